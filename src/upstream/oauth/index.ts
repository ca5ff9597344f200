/**
 * The OAuth authorizer of each HTTP upstream config (./authorizer.ts): one per configured
 * upstream, shared by its shared connection and every client session's own connection (the
 * gateway's client-credentials token is the same for all of them). Secrets (`client_secret`,
 * `private_key`) are read here at first use, from their environment variable or file, and
 * registered for redaction.
 */
import { readFileSync } from 'node:fs';
import type { UpstreamConfig } from '../../config/index.js';
import type { SecretRef } from '../../config/upstream-oauth.js';
import { CmcpError } from '../../errors/index.js';
import { registerPem, registerSecret } from '../redact.js';
import { UpstreamAuthorizer } from './authorizer.js';
import { GatewayOAuthProvider, type OAuthSecrets } from './provider.js';

export { type OAuthEvent, type OAuthListener, UpstreamAuthorizer } from './authorizer.js';
export {
  authorizationErrorOf,
  UpstreamAuthorizationFailedError,
  UpstreamAuthorizationRequiredError,
} from './errors.js';

type HttpUpstreamConfig = Extract<UpstreamConfig, { transport: 'http' }>;

const BY_CONFIG = new WeakMap<HttpUpstreamConfig, UpstreamAuthorizer>();
/** The authorizers of interactive upstreams, which may await a callback. */
const INTERACTIVE = new Set<UpstreamAuthorizer>();

/** @throws CmcpError UPSTREAM_CREDENTIAL_UNAVAILABLE naming the variable or file (never a value). */
function readRef(upstream: string, what: string, ref: SecretRef): string {
  if ('env' in ref) {
    const v = process.env[ref.env];
    if (v === undefined || v === '')
      throw new CmcpError(
        'UPSTREAM_CREDENTIAL_UNAVAILABLE',
        `upstream ${upstream}: oauth.${what}: environment variable ${ref.env} is not set`,
      );
    return v;
  }
  try {
    return readFileSync(ref.file, 'utf8').replace(/\r?\n$/, '');
  } catch (e) {
    throw new CmcpError(
      'UPSTREAM_CREDENTIAL_UNAVAILABLE',
      `upstream ${upstream}: oauth.${what}: cannot read ${ref.file} (${(e as NodeJS.ErrnoException).code ?? 'error'})`,
    );
  }
}

function readSecrets(cfg: HttpUpstreamConfig): OAuthSecrets {
  const o = cfg.oauth;
  const out: OAuthSecrets = {};
  if (!o) return out;
  if (o.client_secret) {
    out.clientSecret = readRef(cfg.name, 'client_secret', o.client_secret);
    registerSecret(out.clientSecret);
  }
  if (o.private_key) {
    const text = readRef(cfg.name, 'private_key', o.private_key);
    registerPem(text);
    out.privateKey = text.trimStart().startsWith('{') ? (JSON.parse(text) as Record<string, unknown>) : text;
  }
  return out;
}

/**
 * The authorizer of one HTTP upstream config (made at first use; the same object for the same
 * config). Every HTTP upstream has one: without `oauth`, it turns a 401 into
 * UPSTREAM_AUTHORIZATION_REQUIRED instead of a failure retried for ever.
 * @throws CmcpError UPSTREAM_CREDENTIAL_UNAVAILABLE when a configured secret cannot be read.
 */
export function authorizerFor(cfg: HttpUpstreamConfig): UpstreamAuthorizer {
  let a = BY_CONFIG.get(cfg);
  if (!a) {
    const provider = cfg.oauth ? new GatewayOAuthProvider(cfg.oauth, readSecrets(cfg)) : undefined;
    a = new UpstreamAuthorizer(cfg.name, new URL(cfg.url), provider);
    BY_CONFIG.set(cfg, a);
    if (cfg.oauth?.grant === 'authorization_code') INTERACTIVE.add(a);
  }
  return a;
}

/**
 * The redirect back from an authorization server (the upstream's `redirect_uri`, served by the
 * gateway): finds the upstream whose pending authorization request has this `state` and
 * exchanges the code (RFC 6749 §4.1.2, PKCE RFC 7636).
 * @returns the upstream's name, or undefined when no pending request has this `state`.
 * @throws UpstreamAuthorizationFailedError when the code exchange fails.
 */
export async function completeAuthorization(state: string, code: string): Promise<string | undefined> {
  for (const a of INTERACTIVE) if (await a.complete(state, code)) return a.upstream;
  return undefined;
}
