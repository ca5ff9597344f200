/**
 * Where the OAuth verifier's keys come from (docs/operations.md#oauth-access-tokens): a JWKS
 * file read at start-up, or an HTTPS JWKS URL fetched by jose's remote key set — cached for
 * `jwks_cache_max_age_s`, refetched when a token names an unknown `kid`, at most once per
 * `jwks_refetch_cooldown_s` (so unknown kids cannot make the gateway hammer the issuer). The
 * fetch goes through undici with the configured CA (never a hand-made TLS check); its body is
 * read up to `jwks_max_bytes` and no further, and a failed fetch is not retried for a backoff
 * that doubles from 1 s up to `jwks_refetch_cooldown_s` (jose itself would refetch on every
 * token while the issuer is down).
 */
import { readFileSync } from 'node:fs';
import {
  createLocalJWKSet,
  createRemoteJWKSet,
  customFetch,
  type JSONWebKeySet,
  type JWTVerifyGetKey,
} from 'jose';
import { Agent, fetch as undiciFetch } from 'undici';
import type { OAuthConfig } from '../../../config/oauth.js';
import { CmcpError } from '../../../errors/index.js';

/**
 * A JWKS fetch that failed (or was not tried, backing off): the token that needed it is refused
 * (`OAUTH_TOKEN_REFUSED`, reason `jwks_unavailable`, verifier.ts).
 */
export class JwksFetchFailed extends CmcpError {
  declare readonly code: 'OAUTH_TOKEN_REFUSED';
  constructor(detail: string) {
    super('OAUTH_TOKEN_REFUSED', detail);
    this.name = 'JwksFetchFailed';
  }
}

/**
 * Reads a response body of at most `max` bytes: a larger declared `content-length` is refused
 * before reading, and a longer stream is cancelled (closing the connection) as soon as it passes
 * `max`, so an oversized JWKS is never held whole.
 * @throws JwksFetchFailed when the body is larger than `max`.
 */
async function readCapped(
  res: { headers: { get(n: string): string | null }; body: ReadableStream<Uint8Array> | null },
  max: number,
): Promise<Buffer> {
  const declared = Number(res.headers.get('content-length') ?? Number.NaN);
  if (declared > max) {
    await res.body?.cancel();
    throw new JwksFetchFailed(`JWKS response larger than ${max} bytes`);
  }
  const chunks: Buffer[] = [];
  let total = 0;
  if (res.body) {
    const reader = res.body.getReader();
    for (;;) {
      const { done, value } = await reader.read();
      if (done) break;
      total += value.byteLength;
      if (total > max) {
        await reader.cancel();
        throw new JwksFetchFailed(`JWKS response larger than ${max} bytes`);
      }
      chunks.push(Buffer.from(value));
    }
  }
  return Buffer.concat(chunks, total);
}

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
  const cooldownMs = o.jwks_refetch_cooldown_s * 1000;
  let failures = 0;
  let retryAt = 0;
  // jose's fetch hook: the whole fetch (status, capped body, JWKS shape) succeeds or fails here,
  // so that every failure — refused connection, TLS, timeout, non-200, oversize, not a JWKS —
  // starts the backoff, and jose gets a body already read and checked.
  const fetchJwks = async (
    url: string,
    init: { headers: Headers; signal: AbortSignal; redirect: 'manual' },
  ): Promise<Response> => {
    if (Date.now() < retryAt) throw new JwksFetchFailed('JWKS fetch backing off after a failure');
    try {
      const res = await undiciFetch(url, {
        method: 'GET',
        headers: Object.fromEntries(init.headers),
        signal: init.signal,
        redirect: init.redirect,
        dispatcher,
      });
      if (res.status !== 200) {
        await res.body?.cancel();
        throw new JwksFetchFailed(`JWKS fetch answered ${res.status}`);
      }
      const body = await readCapped(res, o.jwks_max_bytes);
      const parsed: unknown = JSON.parse(body.toString('utf8'));
      if (!parsed || typeof parsed !== 'object' || !Array.isArray((parsed as { keys?: unknown }).keys))
        throw new JwksFetchFailed('JWKS response has no "keys" array');
      failures = 0;
      retryAt = 0;
      return new Response(body, { status: 200, headers: { 'content-type': 'application/json' } });
    } catch (e) {
      failures++;
      retryAt = Date.now() + Math.min(cooldownMs, 1000 * 2 ** Math.min(failures - 1, 20));
      throw e;
    }
  };
  const getKey = createRemoteJWKSet(new URL(o.jwks_url as string), {
    cacheMaxAge: o.jwks_cache_max_age_s * 1000,
    cooldownDuration: o.jwks_refetch_cooldown_s * 1000,
    timeoutDuration: o.jwks_timeout_ms,
    [customFetch]: fetchJwks,
  });
  return { getKey, close: () => dispatcher.close() };
}
