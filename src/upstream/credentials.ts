/**
 * Credentials for one HTTP upstream (docs/operations.md#upstream-credentials): the header values
 * read from their environment variables or files at start-up, and an undici dispatcher with the
 * pinned CA or server certificate and the client certificate. TLS is undici's and Node's; the
 * only check added here is that a pinned server certificate is byte-identical to the one
 * presented (after Node's own chain and hostname checks).
 *
 * Secret values go into request headers only, never into logs, audit entries, claims or error
 * texts; {@link knownSecrets} lists them so that error texts built from upstream failures are
 * redacted (src/upstream/diagnose.ts), and each is registered with ./redact.ts (with the mTLS
 * client key and certificate, a stdio upstream's secret `env` values ({@link envSecrets}) and
 * the secrets in a URL ({@link urlSecrets})), which takes them out of everything an upstream
 * sends back.
 */
import { X509Certificate } from 'node:crypto';
import { readFileSync } from 'node:fs';
import { checkServerIdentity, type PeerCertificate } from 'node:tls';
import { Agent, type Dispatcher } from 'undici';
import type { UpstreamConfig } from '../config/index.js';
import type { SecretSource, StdioEnvConfig } from '../config/upstream-credentials.js';
import { CmcpError } from '../errors/index.js';
import { attestedUpstreamDispatcher } from './attested-tls.js';
import { authorizerFor, type UpstreamAuthorizer } from './oauth/index.js';
import { registerPem, registerSecret } from './redact.js';

/** What the Streamable HTTP transport of one upstream needs. */
export interface UpstreamCredentials {
  /** Request headers with the secret values (absent: none configured). */
  headers?: Record<string, string>;
  /** The upstream's own TLS dispatcher, for undici's request API (absent: undici's global one). */
  dispatcher?: Dispatcher;
  /** Bearer tokens: the configured OAuth client, or (none configured) the refusal of a 401 (./oauth/). */
  authorizer?: UpstreamAuthorizer;
  close(): Promise<void>;
}

const SECRETS = new Set<string>();

/** Every credential value resolved in this process (longest first), for redaction. */
export function knownSecrets(): string[] {
  return [...SECRETS].sort((a, b) => b.length - a.length);
}

function readSecret(upstream: string, header: string, s: SecretSource): string {
  let value: string | undefined;
  if ('env' in s) {
    value = process.env[s.env];
    if (value === undefined || value === '')
      throw new CmcpError(
        'UPSTREAM_CREDENTIAL_UNAVAILABLE',
        `upstream ${upstream}: header ${header}: environment variable ${s.env} is not set`,
      );
  } else {
    try {
      value = readFileSync(s.file, 'utf8').replace(/\r?\n$/, '');
    } catch (e) {
      throw new CmcpError(
        'UPSTREAM_CREDENTIAL_UNAVAILABLE',
        `upstream ${upstream}: header ${header}: cannot read ${s.file} (${(e as NodeJS.ErrnoException).code ?? 'error'})`,
      );
    }
  }
  // A header value is visible ASCII and spaces (RFC 9110 §5.5); a newline would split the request.
  if (!/^[\x20-\x7e]+$/.test(value) || value.trim() !== value)
    throw new CmcpError(
      'UPSTREAM_CREDENTIAL_UNAVAILABLE',
      `upstream ${upstream}: header ${header}: the value is not a single line of visible ASCII`,
    );
  SECRETS.add(value);
  registerSecret(value);
  return `${s.prefix}${value}`;
}

function readPem(upstream: string, what: string, file: string): string {
  try {
    const text = readFileSync(file, 'utf8');
    // The client's own key and certificate are the gateway's credential: never echoed to agents.
    if (what === 'client_cert' || what === 'client_key') registerPem(text);
    return text;
  } catch (e) {
    throw new CmcpError(
      'UPSTREAM_CREDENTIAL_UNAVAILABLE',
      `upstream ${upstream}: tls.${what}: cannot read ${file} (${(e as NodeJS.ErrnoException).code ?? 'error'})`,
    );
  }
}

/**
 * Names of stdio `env` variables whose values are secrets when the entry is not marked either
 * way: the name ends in a word that names a credential (`GITHUB_PAT`, `SENTRY_DSN`,
 * `DB_PASSWORD`, `CLIENT_SECRET`, `SLACK_TOKEN`, `OPENAI_API_KEY`, `AWS_SECRET_ACCESS_KEY`). A name
 * that merely contains such a word (`OAUTH_TOKEN_URL`, `SESSION_DIR`, `TOKEN_FILE`,
 * `KEY_PATH`) does not count: its value is a place, not a secret, and redacting it would blank
 * ordinary text out of results.
 */
export const SECRET_ENV_NAME =
  /(?:^|_)(?:PAT|DSN|PASSWORD|PASSWD|PASSPHRASE|SECRET|TOKEN|API_?KEY|ACCESS_KEY|PRIVATE_KEY|COOKIE)$/i;

/** Query parameter names whose values are secrets in a URL (`?api_key=…`, `&access_token=…`). */
export const SECRET_QUERY_NAME =
  /^(?:.*[_-])?(?:api_?key|apikey|key|token|secret|password|passwd|pwd|auth|sig|signature|credentials?)$/i;

/**
 * The secrets in a URL-shaped text (`scheme://user:password@host/…?api_key=…`): the password of
 * its userinfo and `user:password` (decoded and as written), and the values of query parameters whose names
 * look secret ({@link SECRET_QUERY_NAME}). Anything else yields none.
 */
export function urlSecrets(text: string): string[] {
  if (!/^[A-Za-z][A-Za-z0-9+.-]*:\/\//.test(text) || !URL.canParse(text)) return [];
  const u = new URL(text);
  const out: string[] = [];
  const dec = (v: string) => {
    try {
      return decodeURIComponent(v);
    } catch {
      return v;
    }
  };
  // Decoded (the secret itself) and as written (percent-encoded: an echo of the whole URL,
  // base64 or encoded once more, holds that form).
  if (u.password)
    out.push(
      dec(u.password),
      `${dec(u.username)}:${dec(u.password)}`,
      u.password,
      `${u.username}:${u.password}`,
    );
  for (const [k, v] of u.searchParams) if (v && SECRET_QUERY_NAME.test(k)) out.push(v);
  return out;
}

/**
 * The values of a stdio upstream's `env` that are secrets: an entry marked `secret: true`;
 * an unmarked one whose name looks secret ({@link SECRET_ENV_NAME}); and, from any entry not
 * marked `secret: false`, the secrets in a URL value ({@link urlSecrets}: a `DATABASE_URL`'s
 * password).
 */
export function envSecrets(env: StdioEnvConfig): string[] {
  const out: string[] = [];
  for (const [name, entry] of Object.entries(env)) {
    const value = typeof entry === 'string' ? entry : entry.value;
    const marked = typeof entry === 'string' ? undefined : entry.secret;
    if (marked === false) continue;
    if (marked === true || SECRET_ENV_NAME.test(name)) out.push(value);
    out.push(...urlSecrets(value));
  }
  return out;
}

/**
 * Resolves an HTTP upstream's headers and TLS settings, and registers the secrets in its `url`;
 * for a stdio upstream, registers the secret values of its `env` ({@link envSecrets}) and
 * returns no credentials. Registered values are redacted from what upstreams send (./redact.ts).
 * @throws CmcpError UPSTREAM_CREDENTIAL_UNAVAILABLE naming the variable or file (never a value).
 */
export function upstreamCredentials(cfg: UpstreamConfig): UpstreamCredentials {
  const none = { close: async () => undefined };
  if (cfg.transport !== 'http') {
    for (const v of envSecrets(cfg.env)) registerSecret(v);
    return none;
  }
  for (const v of urlSecrets(cfg.url)) registerSecret(v);
  const headers: Record<string, string> = {};
  for (const [name, source] of Object.entries(cfg.headers ?? {}))
    headers[name] = readSecret(cfg.name, name, source);
  const t = cfg.tls;
  const out: UpstreamCredentials = {
    ...none,
    ...(Object.keys(headers).length ? { headers } : {}),
    authorizer: authorizerFor(cfg),
  };
  if (cfg.attested_tls) {
    // An upstream in a TEE: its evidence, not a CA, says who it is (./attested-tls.ts).
    const attested = attestedUpstreamDispatcher(cfg.name, cfg.attested_tls);
    return { ...out, dispatcher: attested, close: () => attested.close() };
  }
  if (!t) return out;
  const pinned = t.server_cert ? new X509Certificate(readPem(cfg.name, 'server_cert', t.server_cert)) : null;
  const ca = [t.ca ? readPem(cfg.name, 'ca', t.ca) : null, pinned?.toString() ?? null].filter(
    (v): v is string => v !== null,
  );
  const dispatcher = new Agent({
    connect: {
      ...(ca.length ? { ca } : {}),
      // A pinned leaf is a trust anchor of its own (OpenSSL X509_V_FLAG_PARTIAL_CHAIN).
      ...(pinned ? { allowPartialTrustChain: true } : {}),
      ...(t.client_cert && t.client_key
        ? {
            cert: readPem(cfg.name, 'client_cert', t.client_cert),
            key: readPem(cfg.name, 'client_key', t.client_key),
          }
        : {}),
      checkServerIdentity: (host: string, cert: PeerCertificate) => {
        const err = checkServerIdentity(host, cert);
        if (err) return err;
        if (pinned && !pinned.raw.equals(cert.raw))
          return new Error('the upstream presented another certificate than the pinned tls.server_cert');
        return undefined;
      },
    },
  });
  out.dispatcher = dispatcher;
  out.close = () => dispatcher.close();
  return out;
}
