/**
 * OAuth 2.1 resource server (issue 11 item 4; docs/operations.md#oauth-access-tokens): JWT
 * access tokens from a local issuer (keys made here), the JWKS served over HTTPS on 127.0.0.1
 * with a test CA, against a real gateway with real upstreams, the example policy and catalog.
 */
import { createHash, createHmac } from 'node:crypto';
import { mkdirSync, mkdtempSync, realpathSync, rmSync } from 'node:fs';
import { createServer, type Server } from 'node:https';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { StreamableHTTPClientTransport } from '@modelcontextprotocol/sdk/client/streamableHttp.js';
import { exportJWK, exportSPKI, generateKeyPair, type JWK, SignJWT } from 'jose';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { Gateway } from '../src/gateway/lifecycle/start.js';
import { makeTlsPki } from '../testing/tls-pki.js';
import {
  cleanup,
  everythingUpstream,
  filesystemUpstream,
  freePort,
  REPO_ROOT,
  rest,
  rpc,
  startInProcess,
  type TestConfig,
  writeConfig,
} from './harness/gateway.js';

const ISSUER = 'https://issuer.test';
const OP = 'operator-token-oauth';
const WORKSPACE = realpathSync(mkdtempSync(join(tmpdir(), 'cmcp-oauth-ws-')));
const OUTBOX = join(WORKSPACE, 'outbox');

type Key = Awaited<ReturnType<typeof generateKeyPair>>;
let k1: Key;
let k2: Key;
let stranger: Key;
let jwks: { keys: JWK[] };
let jwksFetches = 0;
let jwksServer: Server;
let cfg: TestConfig;
let gw: Gateway;
let resource: string;

async function publicJwk(k: Key, kid: string): Promise<JWK> {
  return { ...(await exportJWK(k.publicKey)), kid, alg: 'ES256', use: 'sig' };
}

/** A token from the local issuer; `over` replaces claims, `kid`/`key` the signer. */
function token(over: Record<string, unknown> = {}, opts: { kid?: string; key?: Key } = {}): Promise<string> {
  const now = Math.floor(Date.now() / 1000);
  const claims = { scope: 'tools:read', team: 'eng', roles: ['writer'], ...over };
  const jwt = new SignJWT(claims)
    .setProtectedHeader({ alg: 'ES256', kid: opts.kid ?? 'k1', typ: 'at+jwt' })
    .setIssuer((over.iss as string) ?? ISSUER)
    .setAudience((over.aud as string) ?? resource)
    .setSubject((over.sub as string) ?? 'oauth-agent')
    .setIssuedAt(now)
    .setExpirationTime((over.exp as number) ?? now + 300);
  return jwt.sign((opts.key ?? k1).privateKey);
}

const b64u = (v: unknown) => Buffer.from(JSON.stringify(v)).toString('base64url');
const list = (t: string | null) => rpc(gw.url, t, { jsonrpc: '2.0', id: 7, method: 'tools/list' });

beforeAll(async () => {
  mkdirSync(OUTBOX, { recursive: true });
  k1 = await generateKeyPair('ES256', { extractable: true });
  k2 = await generateKeyPair('ES256', { extractable: true });
  stranger = await generateKeyPair('ES256', { extractable: true });
  jwks = { keys: [await publicJwk(k1, 'k1')] };
  const dir = mkdtempSync(join(tmpdir(), 'cmcp-oauth-'));
  const pki = await makeTlsPki(dir);
  jwksServer = createServer({ cert: pki.server.cert, key: pki.server.key }, (req, res) => {
    jwksFetches++;
    res.writeHead(req.url === '/jwks.json' ? 200 : 404, { 'content-type': 'application/json' });
    res.end(JSON.stringify(jwks));
  });
  await new Promise<void>((r) => jwksServer.listen(0, '127.0.0.1', r));
  const jwksPort = (jwksServer.address() as { port: number }).port;
  const port = await freePort();
  resource = `http://127.0.0.1:${port}/mcp`;
  cfg = await writeConfig({
    dir,
    port,
    attestation: { provider: 'software' },
    upstreams: [filesystemUpstream(WORKSPACE, 'fs'), everythingUpstream('everything')],
    agents: [{ agent_id: 'alice', token: 'alice-token', attributes: { team: 'eng', roles: ['writer'] } }],
    operators: [{ operator_id: 'root', token: OP }],
    extra: {
      policy: { bundle: join(REPO_ROOT, 'examples', 'policy') },
      catalog: { file: join(REPO_ROOT, 'examples', 'catalog.json'), relist_interval_s: 0 },
      oauth: {
        resource,
        issuer: ISSUER,
        jwks_url: `https://127.0.0.1:${jwksPort}/jwks.json`,
        jwks_ca: pki.ca.certPath,
        jwks_refetch_cooldown_s: 1,
        algorithms: ['ES256', 'RS256'],
        clock_skew_s: 5,
        attribute_claims: { team: 'team', roles: 'roles' },
        scopes_supported: ['tools:read', 'tools:write'],
      },
    },
  });
  gw = await startInProcess(cfg);
}, 60_000);

afterAll(async () => {
  await gw?.close();
  await new Promise((r) => jwksServer?.close(r));
  if (cfg) cleanup(cfg.dir);
  rmSync(WORKSPACE, { recursive: true, force: true });
});

function expectRefused(r: Awaited<ReturnType<typeof list>>, invalidToken = true) {
  expect(r.status).toBe(401);
  expect(r.body.error.data.error_code).toBe('UNAUTHENTICATED');
  const www = r.headers.get('www-authenticate') ?? '';
  expect(www).toContain(
    `resource_metadata="${new URL(resource).origin}/.well-known/oauth-protected-resource/mcp"`,
  );
  expect(www.includes('error="invalid_token"')).toBe(invalidToken);
}

describe('JWT access tokens', () => {
  it('a valid token authenticates; the sub claim is the agent_id in the audit chain', async () => {
    const r = await list(await token());
    expect(r.status).toBe(200);
    expect(r.body.result.tools.length).toBeGreaterThan(0);
    const call = await rpc(gw.url, await token(), {
      jsonrpc: '2.0',
      id: 1,
      method: 'tools/call',
      params: { name: 'everything.echo', arguments: { message: 'via jwt' } },
    });
    expect(call.body.result.content[0].text).toContain('via jwt');
    const entries = gw.db
      .prepare(`SELECT agent_id, canonical FROM audit_entries WHERE entry_type = 'tool_call'`)
      .all() as { agent_id: string; canonical: string }[];
    expect(entries).toHaveLength(1);
    expect(entries[0]?.agent_id).toBe('oauth-agent');
    expect(entries[0]?.canonical).toContain('everything.echo');
  });

  it('an unknown static token: 401 naming the RFC 9728 metadata, without error=invalid_token', async () => {
    // (This gateway runs in dev_mode, where a request without any token is the `dev` agent.)
    expectRefused(await list('not-a-known-token'), false);
  });

  it('expired (beyond the skew), not yet valid, wrong audience, wrong issuer: refused', async () => {
    const now = Math.floor(Date.now() / 1000);
    expectRefused(await list(await token({ exp: now - 60 })));
    expectRefused(await list(await token({ nbf: now + 120 })));
    expectRefused(await list(await token({ aud: 'http://127.0.0.1:1/mcp' })));
    expectRefused(await list(await token({ iss: 'https://evil.test' })));
    // Within the skew an expired-a-moment-ago token still passes.
    expect((await list(await token({ exp: now - 2 }))).status).toBe(200);
  });

  it('alg none and HS256 keyed with the public key are refused', async () => {
    const now = Math.floor(Date.now() / 1000);
    const payload = { iss: ISSUER, aud: resource, sub: 'oauth-agent', exp: now + 300 };
    const none = `${b64u({ alg: 'none', typ: 'JWT' })}.${b64u(payload)}.`;
    expectRefused(await list(none));
    // The classic confusion: the verifier's public key used as an HMAC secret.
    for (const secret of [await exportSPKI(k1.publicKey), JSON.stringify(jwks.keys[0])]) {
      const head = `${b64u({ alg: 'HS256', kid: 'k1', typ: 'JWT' })}.${b64u(payload)}`;
      const mac = createHmac('sha256', secret).update(head).digest('base64url');
      expectRefused(await list(`${head}.${mac}`));
    }
    // A tampered payload with the original signature.
    const good = (await token()).split('.');
    const forged = `${good[0]}.${b64u({ ...payload, sub: 'alice' })}.${good[2]}`;
    expectRefused(await list(forged));
  });

  it('an unknown kid is refused, and refetches the JWKS at most once per cooldown', async () => {
    const before = jwksFetches;
    for (let i = 0; i < 5; i++) expectRefused(await list(await token({}, { kid: 'k9', key: stranger })));
    expect(jwksFetches - before).toBeLessThanOrEqual(1);
  });

  it('JWKS rotation: a token with the new kid is accepted after the issuer publishes it', async () => {
    const t2 = await token({}, { kid: 'k2', key: k2 });
    await new Promise((r) => setTimeout(r, 1100)); // past the cooldown of the previous test's fetch
    expectRefused(await list(t2));
    jwks = { keys: [await publicJwk(k2, 'k2')] };
    await new Promise((r) => setTimeout(r, 1100));
    const before = jwksFetches;
    expect((await list(t2)).status).toBe(200);
    expect(jwksFetches - before).toBe(1);
  });

  it('an operator can block an agent that authenticates with a token', async () => {
    const jwt = await token({ sub: 'blockable' }, { kid: 'k2', key: k2 });
    expect((await list(jwt)).status).toBe(200);
    expect((await rest(gw.url, OP, 'POST', '/operator/agents/blockable/block', {})).status).toBe(200);
    const r = await list(jwt);
    expect(r.body.error.data.error_code).toBe('AGENT_BLOCKED');
    expect((await rest(gw.url, OP, 'POST', '/operator/agents/blockable/unblock', {})).status).toBe(200);
    expect((await list(jwt)).status).toBe(200);
    // A subject no token has presented yet is unknown.
    expect((await rest(gw.url, OP, 'POST', '/operator/agents/never-seen/block', {})).status).toBe(404);
  });

  it('static tokens still work beside OAuth', async () => {
    expect((await list('alice-token')).status).toBe(200);
    expect((await rest(gw.url, 'alice-token', 'POST', '/sessions', {})).status).toBe(201);
  });
});

describe('RFC 9728 metadata and Cedar attributes', () => {
  it('publishes protected resource metadata at both well-known paths without authentication', async () => {
    for (const path of [
      '/.well-known/oauth-protected-resource',
      '/.well-known/oauth-protected-resource/mcp',
    ]) {
      const r = await fetch(`${gw.url}${path}`);
      expect(r.status).toBe(200);
      expect(await r.json()).toEqual({
        resource,
        authorization_servers: [ISSUER],
        bearer_methods_supported: ['header'],
        resource_signing_alg_values_supported: ['ES256', 'RS256'],
        scopes_supported: ['tools:read', 'tools:write'],
      });
    }
  });

  it('scopes are Cedar principal attributes: writing needs tools:write (example policy)', async () => {
    const path = join(
      OUTBOX,
      `d-${createHash('sha256').update(String(Date.now())).digest('hex').slice(0, 8)}`,
    );
    const call = async (scope: string) =>
      rpc(gw.url, await token({ scope, sub: 'k2-agent' }, { kid: 'k2', key: k2 }), {
        jsonrpc: '2.0',
        id: 2,
        method: 'tools/call',
        params: { name: 'fs.create_directory', arguments: { path } },
      });
    const denied = await call('tools:read');
    expect(denied.body.error.data.error_code).toBe('POLICY_DENY');
    expect(denied.body.error.data.policy_ids).toEqual(['oauth-write-needs-scope']);
    const allowed = await call('tools:read tools:write');
    expect(allowed.body.result.isError).toBeFalsy();
  });

  it('a real MCP SDK client authenticates with a JWT through the gateway', async () => {
    const jwt = await token({ sub: 'sdk-agent' }, { kid: 'k2', key: k2 });
    const client = new Client({ name: 'oauth-test', version: '1.0.0' });
    await client.connect(
      new StreamableHTTPClientTransport(new URL(`${gw.url}/mcp`), {
        requestInit: { headers: { authorization: `Bearer ${jwt}` } },
      }),
    );
    const tools = await client.listTools();
    expect(tools.tools.map((t) => t.name)).toContain('everything.echo');
    const r = await client.callTool({ name: 'everything.echo', arguments: { message: 'sdk' } });
    expect((r.content as { text: string }[])[0]?.text).toContain('sdk');
    await client.close();
  });
});

describe('oauth configuration', () => {
  const base = {
    database: '/tmp/x.db',
    attestation: { provider: 'tpm', tcti: 'swtpm:host=127.0.0.1,port=1' },
    oauth: { resource: 'https://gw.example/mcp', issuer: ISSUER, jwks_url: 'https://issuer.test/jwks' },
  };
  it('needs no static agent; only asymmetric algorithms can be pinned; one JWKS source', async () => {
    const { parseConfig } = await import('../src/config/index.js');
    expect(parseConfig(base).oauth?.algorithms).toEqual(['RS256', 'ES256']);
    for (const alg of ['none', 'HS256', 'HS512']) {
      expect(() => parseConfig({ ...base, oauth: { ...base.oauth, algorithms: [alg] } })).toThrow(
        /algorithms\[0\]/,
      );
    }
    expect(() =>
      parseConfig({ ...base, oauth: { ...base.oauth, jwks_url: 'http://issuer.test/jwks' } }),
    ).toThrow(/jwks_url/);
    expect(() => parseConfig({ ...base, oauth: { ...base.oauth, jwks_file: 'k.json' } })).toThrow(
      /exactly one/,
    );
    expect(() => parseConfig({ ...base, oauth: { ...base.oauth, clock_skew_s: 3600 } })).toThrow(
      /clock_skew_s/,
    );
  });

  it('fails closed when the JWKS cannot be fetched or its server is not the pinned CA’s', async () => {
    const { OAuthVerifier } = await import('../src/gateway/agent/oauth/verifier.js');
    const { parseConfig } = await import('../src/config/index.js');
    const jwksPort = (jwksServer.address() as { port: number }).port;
    const other = await makeTlsPki(mkdtempSync(join(tmpdir(), 'cmcp-oauth-other-')), 'another CA');
    for (const [jwks_url, jwks_ca] of [
      [`https://127.0.0.1:${await freePort()}/jwks.json`, undefined], // nothing listens
      [`https://127.0.0.1:${jwksPort}/jwks.json`, other.ca.certPath], // another CA: TLS refused
    ] as const) {
      const v = new OAuthVerifier(
        parseConfig({
          ...base,
          oauth: {
            resource,
            issuer: ISSUER,
            jwks_url,
            ...(jwks_ca ? { jwks_ca } : {}),
            algorithms: ['ES256'],
          },
        }).oauth as never,
      );
      await expect(v.verify(await token())).rejects.toMatchObject({ reason: 'jwks_unavailable' });
      await v.close();
    }
  });

  it('a JWKS file is used as given (no fetch)', async () => {
    const { OAuthVerifier } = await import('../src/gateway/agent/oauth/verifier.js');
    const dir = mkdtempSync(join(tmpdir(), 'cmcp-oauth-file-'));
    const file = join(dir, 'jwks.json');
    const { writeFileSync } = await import('node:fs');
    writeFileSync(file, JSON.stringify({ keys: [await publicJwk(k1, 'k1')] }));
    const v = new OAuthVerifier(
      (await import('../src/config/index.js')).parseConfig({
        ...base,
        oauth: { resource, issuer: ISSUER, jwks_file: file, algorithms: ['ES256'] },
      }).oauth as never,
    );
    await expect(v.verify(await token({ sub: 'file-agent', scope: 'a b' }))).resolves.toEqual({
      agentId: 'file-agent',
      attributes: { scopes: ['a', 'b'] },
    });
    await expect(v.verify(await token({}, { kid: 'k2', key: k2 }))).rejects.toMatchObject({
      reason: 'unknown_key',
    });
    await v.close();
    rmSync(dir, { recursive: true, force: true });
  });

  it('a JWKS body over jwks_max_bytes is refused without being read whole (fails closed)', async () => {
    const { OAuthVerifier } = await import('../src/gateway/agent/oauth/verifier.js');
    const { parseConfig } = await import('../src/config/index.js');
    const dir = mkdtempSync(join(tmpdir(), 'cmcp-oauth-big-'));
    const pki = await makeTlsPki(dir);
    // A valid JWKS with k1, padded to 64 MiB, streamed chunk by chunk (never held whole here)
    // and with no content-length, so only a capped read can stop it.
    const TOTAL = 64 * 1024 * 1024;
    const chunk = Buffer.alloc(64 * 1024, 'a');
    let sent = 0;
    let finished = false;
    const big = createServer({ cert: pki.server.cert, key: pki.server.key }, async (_req, res) => {
      res.writeHead(200, { 'content-type': 'application/json' });
      const head = `{"keys":[${JSON.stringify(await publicJwk(k1, 'k1'))}],"pad":"`;
      res.write(head);
      sent += head.length;
      res.on('close', () => {
        finished = true;
      });
      while (!finished && sent < TOTAL) {
        sent += chunk.length;
        if (!res.write(chunk)) await new Promise((r) => res.once('drain', r).once('close', r));
      }
      if (!finished) res.end('"}');
    });
    await new Promise<void>((r) => big.listen(0, '127.0.0.1', r));
    const v = new OAuthVerifier(
      parseConfig({
        ...base,
        oauth: {
          resource,
          issuer: ISSUER,
          jwks_url: `https://127.0.0.1:${(big.address() as { port: number }).port}/jwks.json`,
          jwks_ca: pki.ca.certPath,
          jwks_max_bytes: 64 * 1024,
          algorithms: ['ES256'],
        },
      }).oauth as never,
    );
    await expect(v.verify(await token())).rejects.toMatchObject({ reason: 'jwks_unavailable' });
    await v.close();
    await new Promise((r) => big.close(r));
    big.closeAllConnections();
    // What the server got out before the client hung up: socket buffers, far below the body.
    expect(sent).toBeLessThan(TOTAL / 4);
    rmSync(dir, { recursive: true, force: true });
  }, 60_000);

  it('a failing JWKS server is fetched with a backoff, not once per token', async () => {
    const { OAuthVerifier } = await import('../src/gateway/agent/oauth/verifier.js');
    const { parseConfig } = await import('../src/config/index.js');
    const dir = mkdtempSync(join(tmpdir(), 'cmcp-oauth-down-'));
    const pki = await makeTlsPki(dir);
    let fetches = 0;
    const down = createServer({ cert: pki.server.cert, key: pki.server.key }, (_req, res) => {
      fetches++;
      res.writeHead(503, { 'content-type': 'text/plain' });
      res.end('down');
    });
    await new Promise<void>((r) => down.listen(0, '127.0.0.1', r));
    const v = new OAuthVerifier(
      parseConfig({
        ...base,
        oauth: {
          resource,
          issuer: ISSUER,
          jwks_url: `https://127.0.0.1:${(down.address() as { port: number }).port}/jwks.json`,
          jwks_ca: pki.ca.certPath,
          jwks_refetch_cooldown_s: 30,
          algorithms: ['ES256'],
        },
      }).oauth as never,
    );
    const t = await token();
    const REQUESTS = 200;
    for (let i = 0; i < REQUESTS; i++)
      await expect(v.verify(t)).rejects.toMatchObject({ reason: 'jwks_unavailable' });
    // Backoff 1 s, 2 s, 4 s…: a handful of fetches however slow the machine, never one per token.
    expect(fetches).toBeGreaterThanOrEqual(1);
    expect(fetches).toBeLessThanOrEqual(8);
    await v.close();
    await new Promise((r) => down.close(r));
    rmSync(dir, { recursive: true, force: true });
  }, 60_000);
});
