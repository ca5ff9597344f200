/**
 * An HTTP upstream's `oauth` section (docs/configuration.md#upstream-oauth): how the gateway, as
 * an OAuth 2.1 client of a protected MCP server (MCP 2025-11-25 "Authorization"), gets access
 * tokens for it. The authorization server is discovered from the upstream's 401 (RFC 9728,
 * RFC 8414); the client is pre-registered (`client_id`), identified by a Client ID Metadata
 * Document (`client_metadata_url`) or registered dynamically (RFC 7591) where the server offers
 * it. Secrets (`client_secret`, `private_key`) come from an environment variable or a file, never
 * from the config itself.
 */
import { z } from 'zod';

const secretRef = z.union([
  z.strictObject({
    env: z.string().regex(/^[A-Za-z_][A-Za-z0-9_]{0,127}$/, 'must be an environment variable name'),
  }),
  z.strictObject({ file: z.string().min(1) }),
]);

/** OAuth scope tokens (RFC 6749 §3.3: visible ASCII except `"` and `\`). */
const scopeToken = z.string().regex(/^[\x21\x23-\x5b\x5d-\x7e]{1,256}$/, 'must be an OAuth scope token');

export const upstreamOAuth = z
  .strictObject({
    /**
     * `client_credentials` (default): the gateway's own token (RFC 6749 §4.4).
     * `authorization_code`: the upstream needs a user; the gateway cannot authorize on its own,
     * so calls are refused with UPSTREAM_AUTHORIZATION_REQUIRED and the URL to visit.
     */
    grant: z.enum(['client_credentials', 'authorization_code']).default('client_credentials'),
    /** A pre-registered client id. Absent: `client_metadata_url` or dynamic registration. */
    client_id: z.string().min(1).max(2048).optional(),
    /** The pre-registered client's secret (client_secret_basic or client_secret_post). */
    client_secret: secretRef.optional(),
    /**
     * How the client authenticates at the token endpoint (RFC 6749 §2.3, RFC 7523 §2.2). Default:
     * `private_key_jwt` with a `private_key`, else the best the server offers for a secret.
     */
    token_endpoint_auth_method: z
      .enum(['client_secret_basic', 'client_secret_post', 'private_key_jwt', 'none'])
      .optional(),
    /** PEM (PKCS#8) or JWK private key for `private_key_jwt`. */
    private_key: secretRef.optional(),
    /** JWS algorithm of the client assertion (RFC 7518 §3.1; default RS256). */
    private_key_alg: z
      .string()
      .regex(/^(RS|PS|ES)(256|384|512)$/)
      .default('RS256'),
    /** HTTPS URL of this client's Client ID Metadata Document, used where the server supports it. */
    client_metadata_url: z.url({ protocol: /^https$/ }).optional(),
    /** Scopes asked for when neither the challenge nor the resource metadata names any. */
    scopes: z.array(scopeToken).max(64).optional(),
    /** Where the authorization server sends the user back (`authorization_code` only). */
    redirect_uri: z.url().optional(),
    /** The client name sent at dynamic registration. */
    client_name: z.string().min(1).max(200).default('cmcp gateway'),
  })
  .superRefine((o, ctx) => {
    if (o.token_endpoint_auth_method === 'private_key_jwt' && !o.private_key)
      ctx.addIssue({ code: 'custom', path: ['private_key'], message: 'private_key_jwt needs private_key' });
    if (o.client_secret && !o.client_id)
      ctx.addIssue({ code: 'custom', path: ['client_id'], message: 'client_secret goes with client_id' });
    if (o.grant === 'authorization_code' && !o.redirect_uri)
      ctx.addIssue({
        code: 'custom',
        path: ['redirect_uri'],
        message: 'authorization_code needs redirect_uri',
      });
  })
  .optional();

export type UpstreamOAuthConfig = NonNullable<z.infer<typeof upstreamOAuth>>;
export type SecretRef = z.infer<typeof secretRef>;

/** Resolves the files the section names against the config file's folder (in place). */
export function resolveOAuthSecretPaths(
  o: UpstreamOAuthConfig | undefined,
  abs: (p: string) => string,
): void {
  if (o?.client_secret && 'file' in o.client_secret) o.client_secret.file = abs(o.client_secret.file);
  if (o?.private_key && 'file' in o.private_key) o.private_key.file = abs(o.private_key.file);
}
