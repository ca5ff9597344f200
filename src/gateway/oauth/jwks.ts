/**
 * Where the OAuth verifier's keys come from (docs/operations.md#oauth-access-tokens): a JWKS
 * file read at start-up, or an HTTPS JWKS URL fetched by jose's remote key set — cached for
 * `jwks_cache_max_age_s`, refetched when a token names an unknown `kid`, at most once per
 * `jwks_refetch_cooldown_s` (so unknown kids cannot make the gateway hammer the issuer). The
 * fetch goes through undici with the configured CA (never a hand-made TLS check).
 */
import { readFileSync } from 'node:fs';
import { CmcpError } from '@cmcp/verify/errors/index';
import {
  createLocalJWKSet,
  createRemoteJWKSet,
  customFetch,
  type JSONWebKeySet,
  type JWTVerifyGetKey,
} from 'jose';
import { Agent, fetch as undiciFetch } from 'undici';
import type { OAuthConfig } from '../../config/oauth.js';

/** The key resolver for `jwtVerify`, and what releases its connections. */
export interface KeySource {
  getKey: JWTVerifyGetKey;
  close(): Promise<void>;
}

function readJwksFile(file: string): JSONWebKeySet {
  let parsed: unknown;
  try {
    parsed = JSON.parse(readFileSync(file, 'utf8'));
  } catch (e) {
    throw new CmcpError(
      'CONFIG_INVALID',
      `oauth.jwks_file ${file}: ${(e as NodeJS.ErrnoException).code ?? 'not JSON'}`,
    );
  }
  if (!parsed || typeof parsed !== 'object' || !Array.isArray((parsed as { keys?: unknown }).keys))
    throw new CmcpError('CONFIG_INVALID', `oauth.jwks_file ${file}: not a JWKS (no "keys" array)`);
  return parsed as JSONWebKeySet;
}

/**
 * The configured key source.
 * @throws CmcpError CONFIG_INVALID for an unreadable JWKS file or CA file.
 */
export function keySource(o: OAuthConfig): KeySource {
  if (o.jwks_file) {
    const getKey = createLocalJWKSet(readJwksFile(o.jwks_file));
    return { getKey, close: async () => undefined };
  }
  let ca: string | undefined;
  if (o.jwks_ca) {
    try {
      ca = readFileSync(o.jwks_ca, 'utf8');
    } catch (e) {
      throw new CmcpError(
        'CONFIG_INVALID',
        `oauth.jwks_ca ${o.jwks_ca}: ${(e as NodeJS.ErrnoException).code}`,
      );
    }
  }
  const dispatcher = new Agent({ connect: ca ? { ca } : {} });
  const fetchJwks = (url: string, init: { headers: Headers; signal: AbortSignal; redirect: 'manual' }) =>
    undiciFetch(url, {
      method: 'GET',
      headers: Object.fromEntries(init.headers),
      signal: init.signal,
      redirect: init.redirect,
      dispatcher,
    }) as unknown as Promise<Response>;
  const getKey = createRemoteJWKSet(new URL(o.jwks_url as string), {
    cacheMaxAge: o.jwks_cache_max_age_s * 1000,
    cooldownDuration: o.jwks_refetch_cooldown_s * 1000,
    timeoutDuration: o.jwks_timeout_ms,
    [customFetch]: fetchJwks,
  });
  return { getKey, close: () => dispatcher.close() };
}
