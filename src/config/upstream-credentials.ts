/**
 * Credentials of an HTTP upstream (docs/operations.md#upstream-credentials): request headers
 * (a bearer token, an API key) whose values come from an environment variable or a file —
 * never from the config itself, so the config (and the measurement over it) holds names only —
 * and TLS: a pinned CA or server certificate, and a client certificate. And a stdio upstream's
 * `env`, whose entries may be marked secret.
 */
import { z } from 'zod';
import { resolveOAuthSecretPaths, type UpstreamOAuthConfig } from './upstream-oauth.js';

/** Headers the gateway or the MCP transport sets itself (RFC 9110 framing, MCP, tracing). */
const RESERVED_HEADERS =
  /^(host|content-length|content-type|accept|connection|transfer-encoding|te|upgrade|traceparent|tracestate|mcp-.*|last-event-id)$/i;

/** Where a secret's value comes from; `prefix` is put before it (e.g. `"Bearer "`). */
const secretSource = z.union([
  z.strictObject({
    env: z.string().regex(/^[A-Za-z_][A-Za-z0-9_]{0,127}$/, 'must be an environment variable name'),
    prefix: z.string().max(64).default(''),
  }),
  z.strictObject({ file: z.string().min(1), prefix: z.string().max(64).default('') }),
]);
export type SecretSource = z.infer<typeof secretSource>;

export const upstreamHeaders = z
  .record(
    z.string().regex(/^[!#$%&'*+.^_`|~0-9A-Za-z-]{1,100}$/, 'must be an HTTP field name (RFC 9110 §5.1)'),
    secretSource,
  )
  .superRefine((h, ctx) => {
    for (const name of Object.keys(h))
      if (RESERVED_HEADERS.test(name))
        ctx.addIssue({ code: 'custom', path: [name], message: 'is set by the gateway or the MCP transport' });
  })
  .optional();

export const upstreamTls = z
  .strictObject({
    /** PEM CA certificate(s): the only trust anchors for this upstream (instead of Node's roots). */
    ca: z.string().min(1).optional(),
    /** PEM server certificate: the upstream must present exactly this certificate (pinned). */
    server_cert: z.string().min(1).optional(),
    /** PEM client certificate and its private key (mutual TLS). */
    client_cert: z.string().min(1).optional(),
    client_key: z.string().min(1).optional(),
  })
  .superRefine((t, ctx) => {
    if ((t.client_cert === undefined) !== (t.client_key === undefined))
      ctx.addIssue({
        code: 'custom',
        path: ['client_key'],
        message: 'client_cert and client_key go together',
      });
  })
  .optional();

/**
 * An upstream that runs in a TEE of its own and terminates attested TLS (docs/spec/attested-tls.md):
 * every connection to it is checked like an agent checks the gateway, before any request is
 * sent; the binding accepted is recorded with each call to it.
 */
export const upstreamAttestedTls = z
  .strictObject({
    /** Accepted `gateway_measurement` values of the upstream (`sha256:<64 hex>`). */
    measurements: z.array(z.string().regex(/^sha256:[0-9a-f]{64}$/, 'not sha256:<64 lowercase hex>')).min(1),
    /** Trust store YAML pinning the roots its evidence must chain to (relative to the config). */
    trust_store: z.string().min(1),
    /** Reference values YAML for its evidence (relative to the config). */
    reference_values: z.string().min(1).optional(),
    /** Pins on the upstream's policy bundle and catalog hashes. */
    policy_hash: z.string().optional(),
    catalog_hash: z.string().optional(),
    /** Oldest acceptable binding, seconds (default 172800). */
    max_age_s: z.number().int().min(60).optional(),
    /** Accept evidence that chains to no pinned root (test TPMs only). */
    allow_unanchored: z.boolean().default(false),
  })
  .optional();
export type UpstreamAttestedTlsConfig = NonNullable<z.infer<typeof upstreamAttestedTls>>;

/** An HTTP upstream's credential fields, spread into its schema. */
export const httpCredentialFields = {
  /** Request headers whose values come from environment variables or files. */
  headers: upstreamHeaders,
  /** Pinned CA or server certificate, client certificate. */
  tls: upstreamTls,
  /** Attested TLS to an upstream in a TEE of its own. */
  attested_tls: upstreamAttestedTls,
};

/**
 * A stdio upstream's environment: each value as a string (whether it is a secret is decided by
 * its name and shape, src/upstream/credentials.ts) or `{ value, secret }` to say so explicitly.
 * A secret value is redacted from what every upstream sends back (src/upstream/redact.ts).
 */
export const stdioEnv = z
  .record(z.string(), z.union([z.string(), z.strictObject({ value: z.string(), secret: z.boolean() })]))
  .default({});
export type StdioEnvConfig = z.infer<typeof stdioEnv>;

/** The variables a stdio upstream's process gets: each configured name with its value. */
export function envValues(env: StdioEnvConfig): Record<string, string> {
  const out: Record<string, string> = {};
  for (const [k, v] of Object.entries(env)) out[k] = typeof v === 'string' ? v : v.value;
  return out;
}

export type UpstreamTlsConfig = NonNullable<z.infer<typeof upstreamTls>>;
export type UpstreamHeadersConfig = NonNullable<z.infer<typeof upstreamHeaders>>;

/** Resolves the files named by the section against the config file's folder. */
export function resolveCredentialPaths(
  u: {
    headers?: UpstreamHeadersConfig;
    tls?: UpstreamTlsConfig;
    attested_tls?: UpstreamAttestedTlsConfig;
    oauth?: UpstreamOAuthConfig;
  },
  abs: (p: string) => string,
): void {
  resolveOAuthSecretPaths(u.oauth, abs);
  for (const s of Object.values(u.headers ?? {})) if ('file' in s) s.file = abs(s.file);
  if (u.attested_tls) {
    u.attested_tls.trust_store = abs(u.attested_tls.trust_store);
    if (u.attested_tls.reference_values)
      u.attested_tls.reference_values = abs(u.attested_tls.reference_values);
  }
  const t = u.tls;
  if (!t) return;
  if (t.ca) t.ca = abs(t.ca);
  if (t.server_cert) t.server_cert = abs(t.server_cert);
  if (t.client_cert) t.client_cert = abs(t.client_cert);
  if (t.client_key) t.client_key = abs(t.client_key);
}
