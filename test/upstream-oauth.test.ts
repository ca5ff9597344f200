/**
 * OAuth 2.1 towards protected upstreams (docs/configuration.md#upstream-oauth): a real
 * authorization server on loopback (oidc-provider) and a protected Streamable HTTP MCP server
 * that verifies each bearer token (issuer, audience = its resource, scope). The gateway discovers
 * the authorization server from the 401, gets a client-credentials token with each client
 * authentication method (client_secret_basic, client_secret_post, private_key_jwt) or after
 * registering dynamically, sends the RFC 8707 resource, steps up on insufficient_scope and
 * renews an expiring token. Acquisitions are recorded without token values; tokens and secrets
 * appear in no log line and no audit entry. An upstream needing a user is refused with
 * UPSTREAM_AUTHORIZATION_REQUIRED and the URL, is not retried on a timer and not reported down.
 */
import { writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { StreamableHTTPClientTransport } from '@modelcontextprotocol/sdk/client/streamableHttp.js';
import { UrlElicitationRequiredError } from '@modelcontextprotocol/sdk/types.js';
import pino from 'pino';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { loadConfig } from '../src/config/index.js';
import { type Gateway, startGateway } from '../src/gateway/lifecycle/start.js';
import { cleanup, rpc, type TestConfig, writeConfig } from './harness/gateway.js';
import { type ProtectedUpstream, startProtectedUpstream } from './harness/oauth-upstream.js';

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

let up: ProtectedUpstream;
let cfg: TestConfig;
let gw: Gateway;
let logText = '';

function call(name: string, id: number) {
  return rpc(gw.url, 'alice-token', {
    jsonrpc: '2.0',
    id,
    method: 'tools/call',
    params: { name, arguments: {} },
  });
}

beforeAll(async () => {
  up = await startProtectedUpstream({ tokenTtlSeconds: 33 });
  process.env.CMCP_TEST_OAUTH_BASIC = up.clients.basic.secret;
  process.env.CMCP_TEST_OAUTH_POST = up.clients.post.secret;
  cfg = await writeConfig({
    upstreams: [
      {
        name: 'basic',
        transport: 'http',
        url: up.url,
        oauth: { client_id: up.clients.basic.id, client_secret: { env: 'CMCP_TEST_OAUTH_BASIC' } },
      },
      {
        name: 'post',
        transport: 'http',
        url: up.url,
        oauth: {
          client_id: up.clients.post.id,
          client_secret: { env: 'CMCP_TEST_OAUTH_POST' },
          token_endpoint_auth_method: 'client_secret_post',
        },
      },
      {
        name: 'jwt',
        transport: 'http',
        url: up.url,
        oauth: { client_id: up.clients.jwt.id, private_key: { file: 'client.pem' } },
      },
      { name: 'dcr', transport: 'http', url: up.url, oauth: {} },
      // No oauth configured: a 401 only a person can resolve.
      { name: 'plain', transport: 'http', url: up.url },
      {
        name: 'user',
        transport: 'http',
        url: up.url,
        oauth: { grant: 'authorization_code', redirect_uri: 'https://gateway.example/oauth/callback' },
      },
    ],
  });
  writeFileSync(join(cfg.dir, 'client.pem'), up.clients.jwt.privateKeyPem);
  const log = pino(
    { level: 'debug' },
    {
      write: (s: string) => {
        logText += s;
      },
    },
  );
  gw = await startGateway(loadConfig(cfg.file), log);
}, 60_000);

afterAll(async () => {
  await gw?.close();
  await up?.close();
  if (cfg) cleanup(cfg.dir);
});

function oauthEntries(upstream: string): Record<string, unknown>[] {
  return gw.chain
    .entries('gateway')
    .filter((e) => e.entry_type === 'upstream_oauth' && e.server_identity === upstream)
    .map((e) => e.detail as Record<string, unknown>);
}

describe('a protected upstream, client credentials', () => {
  it("each client authentication method gets a token for the upstream's resource; its tools are served", async () => {
    for (const [n, id] of [
      ['basic', 1],
      ['post', 2],
      ['jwt', 3],
      ['dcr', 4],
    ] as const) {
      const r = await call(`${n}.read`, id);
      expect(r.body.result?.content?.[0]?.text, `${n}: ${r.text}`).toBe('read ok');
      const acquired = oauthEntries(n).filter((d) => d.event === 'token_acquired');
      expect(acquired.length, n).toBeGreaterThanOrEqual(1);
      expect(acquired[0]?.authorization_server).toBe(up.issuer);
      expect(acquired[0]?.scope).toBe('mcp:read');
    }
    // One for `dcr`, one for `user` (registered to build its authorization request).
    expect(up.registrations).toBe(2);
    expect(up.grants.every((g) => g === 'client_credentials')).toBe(true);
    // Every accepted token names the upstream's resource as its audience (RFC 8707).
    for (const a of up.accepted) expect(a.payload.aud).toBe(up.url);
    const clientIds = new Set(up.accepted.map((a) => a.payload.client_id));
    expect(clientIds.has(up.clients.basic.id) && clientIds.has(up.clients.post.id)).toBe(true);
    expect(clientIds.has(up.clients.jwt.id)).toBe(true);
  });

  it('steps up on insufficient_scope: a tool needing more scope gets a token with it', async () => {
    const before = up.challenges.insufficientScope;
    const r = await call('basic.write', 10);
    expect(r.body.result?.content?.[0]?.text, r.text).toBe('write ok');
    expect(up.challenges.insufficientScope).toBe(before + 1);
    const last = oauthEntries('basic')
      .filter((d) => d.event === 'token_acquired')
      .at(-1);
    expect(last?.trigger).toBe('step_up');
    expect(String(last?.scope).split(' ').sort()).toEqual(['mcp:read', 'mcp:write']);
  });

  it('a token about to expire is renewed before use', async () => {
    const n = oauthEntries('post').filter((d) => d.event === 'token_acquired').length;
    await sleep(4_000); // the 33 s tokens are within the 30 s renewal margin after 3 s
    const r = await call('post.read', 20);
    expect(r.body.result?.content?.[0]?.text, r.text).toBe('read ok');
    const acquired = oauthEntries('post').filter((d) => d.event === 'token_acquired');
    expect(acquired.length).toBeGreaterThan(n);
    expect(acquired.at(-1)?.trigger).toBe('expiry');
  });

  it('no token and no client secret appears in the log or the audit', () => {
    const chainText = JSON.stringify(gw.chain.entries('gateway'));
    expect(up.accepted.length).toBeGreaterThan(0);
    for (const a of up.accepted) {
      expect(logText).not.toContain(a.token);
      expect(chainText).not.toContain(a.token);
    }
    for (const s of [up.clients.basic.secret, up.clients.post.secret]) {
      expect(logText).not.toContain(s);
      expect(chainText).not.toContain(s);
    }
  });
});

describe('an upstream that needs a user', () => {
  it('is refused with UPSTREAM_AUTHORIZATION_REQUIRED and the URL, not retried on a timer, not reported down', async () => {
    for (const name of ['plain', 'user']) {
      const r = await call(`${name}.read`, 30);
      expect(r.body.error?.data?.error_code, r.text).toBe('UPSTREAM_AUTHORIZATION_REQUIRED');
      expect(typeof r.body.error?.data?.authorization_url).toBe('string');
    }
    const plain = await call('plain.read', 31);
    expect(plain.body.error.data.authorization_url).toBe(up.issuer);
    const user = new URL((await call('user.read', 32)).body.error.data.authorization_url);
    expect(`${user.origin}`).toBe(up.issuer);
    expect(user.searchParams.get('resource')).toBe(up.url);
    expect(user.searchParams.get('code_challenge_method')).toBe('S256');
    const entries = gw.chain.entries('gateway');
    expect(
      entries.some((e) => e.entry_type === 'upstream_unavailable' && e.server_identity === 'plain'),
    ).toBe(false);
    expect(
      entries.some(
        (e) => e.entry_type === 'upstream_authorization_required' && e.server_identity === 'plain',
      ),
    ).toBe(true);
    // Without a retry timer the upstream is asked only when a call names it (at most every 5 s):
    // once the tries those calls started are over, nothing asks it.
    await sleep(1_000);
    const unauthorized = up.challenges.unauthorized;
    await sleep(2_500);
    expect(up.challenges.unauthorized).toBe(unauthorized);
    const probe = await gw.upstreams.probe();
    expect(probe.plain).toMatch(/authorization required/);
  });
});

describe('an upstream that needs a user, to a client that declared URL-mode elicitation', () => {
  it("gets MCP's URLElicitationRequiredError naming the URL; a client without it keeps the URL in data", async () => {
    const connect = async (capabilities: Record<string, unknown>) => {
      const c = new Client({ name: 'url-elicitation', version: '1.0.0' }, { capabilities });
      await c.connect(
        new StreamableHTTPClientTransport(new URL(`${gw.url}/mcp`), {
          requestInit: { headers: { Authorization: 'Bearer alice-token' } },
        }),
      );
      return c;
    };
    const urlClient = await connect({ elicitation: { form: {}, url: {} } });
    const formClient = await connect({ elicitation: { form: {} } });
    try {
      for (const name of ['plain', 'user']) {
        const unauthorizedBefore = up.challenges.unauthorized;
        const e = await urlClient.callTool({ name: `${name}.read`, arguments: {} }).catch((x: unknown) => x);
        expect(e, name).toBeInstanceOf(UrlElicitationRequiredError);
        const err = e as UrlElicitationRequiredError;
        expect(err.code).toBe(-32042);
        expect(err.elicitations).toHaveLength(1);
        const [el] = err.elicitations;
        expect(el?.mode).toBe('url');
        const url = new URL(String(el?.url));
        expect(url.origin).toBe(new URL(up.issuer).origin);
        expect(typeof el?.elicitationId).toBe('string');
        expect(el?.message).toMatch(/authorize/i);
        // Refused once: the gateway asked the upstream at most once more for it, no loop.
        expect(up.challenges.unauthorized - unauthorizedBefore).toBeLessThanOrEqual(1);
        const plain = await formClient
          .callTool({ name: `${name}.read`, arguments: {} })
          .catch((x: unknown) => x);
        expect(plain).not.toBeInstanceOf(UrlElicitationRequiredError);
        const pd = (plain as { data?: Record<string, unknown> }).data;
        expect(pd?.error_code).toBe('UPSTREAM_AUTHORIZATION_REQUIRED');
        expect(typeof pd?.authorization_url).toBe('string');
      }
      // A stateless 2026-07-28 request that declares URL-mode elicitation in its `_meta`: the
      // whole error, with the call's id, evidence and the recorded reason beside the elicitation.
      const stateless = await rpc(
        gw.url,
        'alice-token',
        {
          jsonrpc: '2.0',
          id: 50,
          method: 'tools/call',
          params: {
            name: 'plain.read',
            arguments: {},
            _meta: {
              'io.modelcontextprotocol/protocolVersion': '2026-07-28',
              'io.modelcontextprotocol/clientCapabilities': { elicitation: { url: {} } },
            },
          },
        },
        { accept: 'application/json' },
      );
      const err = stateless.body.error;
      expect(err?.code, stateless.text).toBe(-32042);
      expect(err.data.error_code).toBe('URL_ELICITATION_REQUIRED');
      expect(err.data.reason).toBe('UPSTREAM_AUTHORIZATION_REQUIRED');
      expect(err.data.elicitations).toEqual([
        { mode: 'url', elicitationId: err.data.call_id, url: up.issuer, message: expect.any(String) },
      ]);
      expect(typeof err.data.evidence?.entry_hash).toBe('string');
    } finally {
      await urlClient.close();
      await formClient.close();
    }
  }, 30_000);
});

type ErrorBody = { error: { error_code: string } };

describe('the authorization callback', () => {
  it('accepts only the pending state, once; a code the authorization server refuses is UPSTREAM_AUTHORIZATION_FAILED', async () => {
    const cb = (q: string) => fetch(`${gw.url}/oauth/upstream/callback?${q}`);
    const unknown = await cb('state=not-a-pending-state&code=abc');
    expect(unknown.status).toBe(400);
    expect(((await unknown.json()) as ErrorBody).error.error_code).toBe('INVALID_REQUEST');
    // Past the on-demand retry spacing: the call tries the upstream again, and the URL it
    // names is still the pending request's (not replaced by that try).
    await sleep(5_100);
    const url = new URL((await call('user.read', 40)).body.error.data.authorization_url);
    const state = url.searchParams.get('state') as string;
    expect(state.length).toBeGreaterThanOrEqual(43);
    const refused = await cb(`state=${encodeURIComponent(state)}&code=forged-code`);
    expect(refused.status).toBe(502);
    const body = (await refused.json()) as ErrorBody;
    expect(body.error.error_code).toBe('UPSTREAM_AUTHORIZATION_FAILED');
    const again = await cb(`state=${encodeURIComponent(state)}&code=forged-code`);
    expect(again.status).toBe(400);
  }, 30_000);
});
