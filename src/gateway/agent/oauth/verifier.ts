/**
 * JWT access tokens for agents (OAuth 2.1 resource server; RFC 9068 JWT profile, RFC 8725 best
 * current practices; docs/operations.md#oauth-access-tokens). jose verifies the signature with
 * the pinned algorithms and the JWKS, `iss` (exact), `aud` (the gateway's resource URI),
 * `exp` (required) and `nbf`/`iat` within the bounded clock skew. The configured claim becomes
 * the agent_id; the scopes and the configured claims become Cedar principal attributes.
 */

import { errors, jwtVerify } from 'jose';
import type { OAuthConfig } from '../../../config/oauth.js';
import { CmcpError } from '../../../errors/index.js';
import { JwksFetchFailed, type KeySource, keySource } from './jwks.js';

/** Why a token was refused (logged and counted; never echoed with token content). */
export type TokenRefusal =
  | 'malformed'
  | 'algorithm'
  | 'signature'
  | 'unknown_key'
  | 'jwks_unavailable'
  | 'expired'
  | 'not_yet_valid'
  | 'issuer'
  | 'audience'
  | 'claims'
  | 'agent_id'
  | 'scope';

/** A verified token's principal. */
export interface TokenPrincipal {
  agentId: string;
  /** Cedar principal attributes: `scopes` (a set) and the configured claims. */
  attributes: Record<string, unknown>;
}

/**
 * Thrown for a token that is not accepted; `reason` is one of {@link TokenRefusal}. The agent is
 * answered UNAUTHENTICATED (with `error="invalid_token"`); this code names it in logs.
 */
export class TokenRefused extends CmcpError {
  declare readonly code: 'OAUTH_TOKEN_REFUSED';
  constructor(
    readonly reason: TokenRefusal,
    detail: string,
  ) {
    super('OAUTH_TOKEN_REFUSED', detail);
    this.name = 'TokenRefused';
  }
}

const AGENT_ID = /^[\x21-\x7e]{1,200}$/;
/** Three base64url segments: what a JWS compact serialization looks like (RFC 7515 §7.1). */
const COMPACT_JWS = /^[A-Za-z0-9_-]+\.[A-Za-z0-9_-]+\.[A-Za-z0-9_-]*$/;

/** True when a bearer token has the shape of a JWS (static tokens are looked up instead). */
export function looksLikeJwt(token: string): boolean {
  return COMPACT_JWS.test(token);
}

/** The token's scopes: `scope` (space-separated, RFC 9068 §2.2.3) or `scp` (an array or a string). */
function scopesOf(payload: Record<string, unknown>): string[] {
  const raw = payload.scope ?? payload.scp;
  if (raw === undefined) return [];
  if (typeof raw === 'string') return raw.split(' ').filter((s) => s !== '');
  if (Array.isArray(raw) && raw.every((s) => typeof s === 'string')) return raw as string[];
  throw new TokenRefused('claims', 'scope is neither a string nor an array of strings');
}

function classify(e: unknown): TokenRefused {
  if (e instanceof TokenRefused) return e;
  if (e instanceof errors.JWTExpired) return new TokenRefused('expired', 'token expired');
  if (e instanceof errors.JWTClaimValidationFailed) {
    if (e.claim === 'iss') return new TokenRefused('issuer', 'unexpected iss');
    if (e.claim === 'aud') return new TokenRefused('audience', 'aud does not name this resource');
    if (e.claim === 'nbf' || e.claim === 'iat')
      return new TokenRefused('not_yet_valid', `${e.claim} in the future`);
    return new TokenRefused('claims', `claim ${e.claim} ${e.reason}`);
  }
  if (e instanceof errors.JOSEAlgNotAllowed) return new TokenRefused('algorithm', 'algorithm not allowed');
  if (e instanceof errors.JWKSNoMatchingKey)
    return new TokenRefused('unknown_key', 'no key in the JWKS matches');
  if (e instanceof errors.JWSSignatureVerificationFailed)
    return new TokenRefused('signature', 'signature invalid');
  if (e instanceof JwksFetchFailed) return new TokenRefused('jwks_unavailable', e.message);
  if (e instanceof errors.JWKSTimeout) return new TokenRefused('jwks_unavailable', 'JWKS fetch timed out');
  if (e instanceof errors.JOSEError && e.code === 'ERR_JOSE_GENERIC')
    return new TokenRefused('jwks_unavailable', 'JWKS could not be fetched');
  if (e instanceof errors.JWKSInvalid) return new TokenRefused('jwks_unavailable', 'JWKS invalid');
  if (e instanceof errors.JOSEError) return new TokenRefused('malformed', e.code);
  // A fetch failure (TLS, refused connection) surfaces as a plain error from the key set.
  return new TokenRefused('jwks_unavailable', 'JWKS could not be fetched');
}

/** Verifies agents' JWT access tokens for one `oauth` section. */
export class OAuthVerifier {
  private readonly keys: KeySource;

  /** @throws CmcpError CONFIG_INVALID when the JWKS file or CA cannot be read. */
  constructor(private readonly cfg: OAuthConfig) {
    this.keys = keySource(cfg);
  }

  /** The RFC 9728 metadata URL named in `WWW-Authenticate` (RFC 9728 §3.1, §5.1). */
  metadataUrl(): string {
    const u = new URL(this.cfg.resource);
    const path = u.pathname === '/' ? '' : u.pathname;
    return `${u.origin}/.well-known/oauth-protected-resource${path}`;
  }

  /** The protected resource metadata document (RFC 9728 §2). */
  metadata(): Record<string, unknown> {
    return {
      resource: this.cfg.resource,
      authorization_servers: this.cfg.authorization_servers ?? [this.cfg.issuer],
      bearer_methods_supported: ['header'],
      resource_signing_alg_values_supported: [...this.cfg.algorithms],
      ...(this.cfg.scopes_supported ? { scopes_supported: this.cfg.scopes_supported } : {}),
    };
  }

  /**
   * Verifies one access token.
   * @throws TokenRefused with the reason (never the token's content).
   */
  async verify(token: string): Promise<TokenPrincipal> {
    let payload: Record<string, unknown>;
    try {
      const r = await jwtVerify(token, this.keys.getKey, {
        issuer: this.cfg.issuer,
        audience: this.cfg.resource,
        algorithms: [...this.cfg.algorithms],
        clockTolerance: this.cfg.clock_skew_s,
        requiredClaims: ['exp', this.cfg.agent_id_claim],
      });
      payload = r.payload as Record<string, unknown>;
    } catch (e) {
      throw classify(e);
    }
    const agentId = payload[this.cfg.agent_id_claim];
    if (typeof agentId !== 'string' || !AGENT_ID.test(agentId))
      throw new TokenRefused(
        'agent_id',
        `${this.cfg.agent_id_claim} is not 1–200 printable ASCII characters`,
      );
    const scopes = scopesOf(payload);
    const missing = this.cfg.required_scopes.filter((s) => !scopes.includes(s));
    if (missing.length) throw new TokenRefused('scope', `missing scope ${missing.join(' ')}`);
    const attributes: Record<string, unknown> = { scopes };
    for (const [claim, attribute] of Object.entries(this.cfg.attribute_claims)) {
      const v = payload[claim];
      if (v !== undefined && v !== null) attributes[attribute] = v;
    }
    return { agentId, attributes };
  }

  /** Releases the JWKS fetcher's connections. */
  close(): Promise<void> {
    return this.keys.close();
  }
}

/** The JWS of an `Authorization: Bearer <jwt>` header (RFC 6750 §2.1), or null. At most 8 KiB. */
export function bearerJwt(header: string | undefined): string | null {
  const m = header ? /^Bearer ([\x21-\x7e]{1,8192})$/i.exec(header) : null;
  return m && looksLikeJwt(m[1] as string) ? (m[1] as string) : null;
}
