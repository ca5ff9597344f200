/**
 * The `oauth` section (docs/operations.md#oauth-access-tokens): agents may present JWT access
 * tokens (RFC 9068 profile) verified against a JWKS. Only asymmetric JWS algorithms can be
 * configured (RFC 8725 §3.1: never `none`, and never an HMAC keyed with a public key).
 */
import { z } from 'zod';

/** JWS algorithms a resource server can verify with a public key (RFC 7518 §3.1, RFC 8037 §3.1). */
export const ASYMMETRIC_JWS_ALGORITHMS = [
  'RS256',
  'RS384',
  'RS512',
  'PS256',
  'PS384',
  'PS512',
  'ES256',
  'ES384',
  'ES512',
  'EdDSA',
  'Ed25519',
] as const;

const cedarIdentifier = z
  .string()
  .regex(/^[A-Za-z_][A-Za-z0-9_]{0,63}$/, 'attribute names are Cedar identifiers (1–64 chars)');

export const oauthSchema = z
  .strictObject({
    /**
     * The gateway's resource URI (RFC 9728 `resource`, RFC 8707): a token's `aud` must name it.
     * Usually the public URL of `/mcp`, e.g. `https://gateway.example/mcp`.
     */
    resource: z.url({ protocol: /^https?$/ }),
    /** The one accepted `iss` (exact string match, RFC 9068 §4). */
    issuer: z.string().min(1).max(2048),
    /** RFC 9728 `authorization_servers`; default `[issuer]`. */
    authorization_servers: z.array(z.url()).min(1).optional(),
    /** A JWKS document (JSON) on disk, relative to the config. */
    jwks_file: z.string().min(1).optional(),
    /** A JWKS URL, HTTPS only; fetched, cached and refetched on an unknown `kid` (bounded by the cooldown). */
    jwks_url: z.url({ protocol: /^https$/ }).optional(),
    /** PEM CA certificate(s) that the JWKS server's certificate must chain to (default: Node's roots). */
    jwks_ca: z.string().min(1).optional(),
    /** Longest time a fetched JWKS is used without a refetch, seconds. */
    jwks_cache_max_age_s: z.number().int().min(1).max(86_400).default(600),
    /** Shortest time between two fetches (an unknown `kid` refetches at most this often), seconds. */
    jwks_refetch_cooldown_s: z.number().int().min(1).max(3600).default(30),
    /** Time limit of one JWKS fetch, milliseconds. */
    jwks_timeout_ms: z.number().int().min(100).max(60_000).default(5000),
    /** Largest JWKS response body read, bytes; a larger one is refused unread (fails closed). */
    jwks_max_bytes: z
      .number()
      .int()
      .min(1024)
      .max(16 * 1024 * 1024)
      .default(256 * 1024),
    /** Accepted JWS algorithms (pinned; asymmetric only). */
    algorithms: z.array(z.enum(ASYMMETRIC_JWS_ALGORITHMS)).min(1).default(['RS256', 'ES256']),
    /** Clock skew tolerated on `exp`/`nbf`/`iat`, seconds (bounded). */
    clock_skew_s: z.number().int().min(0).max(300).default(30),
    /** The claim whose value becomes agent_id (a string of 1–200 printable ASCII characters). */
    agent_id_claim: z.string().min(1).max(100).default('sub'),
    /** Token claims copied to Cedar principal attributes: claim name → attribute name. */
    attribute_claims: z.record(z.string().min(1).max(100), cedarIdentifier).default({}),
    /** Scopes every token must carry (space-separated `scope` or `scp`); none by default. */
    required_scopes: z.array(z.string().regex(/^[\x21\x23-\x5b\x5d-\x7e]+$/)).default([]),
    /** RFC 9728 `scopes_supported`. */
    scopes_supported: z.array(z.string().min(1)).optional(),
  })
  .superRefine((o, ctx) => {
    if ((o.jwks_file === undefined) === (o.jwks_url === undefined))
      ctx.addIssue({ code: 'custom', path: ['jwks_file'], message: 'exactly one of jwks_file and jwks_url' });
    if (o.jwks_ca !== undefined && o.jwks_url === undefined)
      ctx.addIssue({ code: 'custom', path: ['jwks_ca'], message: 'only with jwks_url' });
    if (Object.values(o.attribute_claims).includes('scopes'))
      ctx.addIssue({
        code: 'custom',
        path: ['attribute_claims'],
        message: '`scopes` is the attribute the token scopes go to',
      });
  });

export type OAuthConfig = z.infer<typeof oauthSchema>;

/** Resolves the section's file paths against the config file's folder. */
export function resolveOAuthPaths(o: OAuthConfig | undefined, abs: (p: string) => string): void {
  if (!o) return;
  if (o.jwks_file) o.jwks_file = abs(o.jwks_file);
  if (o.jwks_ca) o.jwks_ca = abs(o.jwks_ca);
}
