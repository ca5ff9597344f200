/**
 * An HTTP upstream that expires its session (404) — it restarted on the same port, or forgot its
 * sessions — is re-initialised once, on every request path, and recorded
 * (src/upstream/session-renewal.ts, docs/spec/mcp.md "Relayed methods"); and the result cap
 * bounds the result message, not the sum of a stream's progress events (C-MCP-4). Real SDK
 * upstream (test/fixtures/relay-server.ts), the real Upstream class and SDK client, and a real
 * gateway for /readyz.
 */
import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { GATEWAY_CHAIN_ID } from '@cmcp/verify/formats';
import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { StreamableHTTPClientTransport } from '@modelcontextprotocol/sdk/client/streamableHttp.js';
import pino from 'pino';
import { afterAll, afterEach, describe, expect, it } from 'vitest';
import type { UpstreamConfig } from '../src/config/index.js';
import type { Gateway } from '../src/gateway/lifecycle/start.js';
import { Upstream } from '../src/upstream/upstream.js';
import { type RelayServer, startRelayServer } from './fixtures/relay-server.js';
import { cleanup, startInProcess, writeConfig } from './harness/gateway.js';

const log = pino({ level: 'silent' });

/** An Upstream on `server` with its renewals counted. */
function upstreamOn(server: RelayServer, maxResultBytes = 2 * 1024 * 1024) {
  const renewals: string[] = [];
  const cfg = { name: 'r', transport: 'http', url: server.url, timeout_ms: 15_000 } as UpstreamConfig;
  const u = new Upstream(cfg, log, () => undefined, maxResultBytes, {
    onRenewed: (_name, why) => renewals.push(why),
  });
  return { u, renewals };
}

/**
 * After a restart, lets the client see the old connections close: a request put on a pooled
 * socket the server has just dropped fails (UND_ERR_SOCKET) before any 404 could be answered.
 */
const settle = () => new Promise((r) => setTimeout(r, 100));

const text = (o: unknown) =>
  ((o as { result?: { content?: { text?: string }[] } }).result?.content ?? [])[0]?.text;

let servers: RelayServer[] = [];
let ups: Upstream[] = [];
afterEach(async () => {
  for (const u of ups) await u.release();
  for (const s of servers) await s.close();
  ups = [];
  servers = [];
});

async function setup(opts: { json?: boolean; cap?: number } = {}) {
  const server = await startRelayServer({ tag: 'r', ...(opts.json ? { json: true } : {}) });
  servers.push(server);
  const { u, renewals } = upstreamOn(server, opts.cap);
  ups.push(u);
  return { server, u, renewals };
}

describe('session expiry on every request path', () => {
  it('a ping that meets the 404 first renews the session once; calls after it succeed', async () => {
    const { server, u, renewals } = await setup();
    expect(text(await u.call('r-tool-1', {}))).toBe('called r-tool-1');
    const before = server.initializations;
    await server.restart();
    await settle();
    expect(await u.ping(5000)).toBeNull();
    expect(renewals).toEqual(['session expired (HTTP 404)']);
    expect(server.initializations).toBe(before + 1);
    for (let i = 0; i < 3; i++) expect(text(await u.call('r-tool-2', {}))).toBe('called r-tool-2');
    expect(await u.ping(5000)).toBeNull();
    expect(renewals).toHaveLength(1);
  });

  it('a listing and a relayed method meet the 404 and are renewed and answered', async () => {
    const { server, u, renewals } = await setup();
    await u.listTools();
    await server.restart();
    await settle();
    const tools = await u.listTools();
    expect(tools.map((t) => t.name)).toContain('r-tool-0');
    await server.expireSessions();
    await settle();
    const res = await u.request('resources/list', {});
    expect('result' in res && Array.isArray(res.result.resources)).toBe(true);
    expect(renewals).toHaveLength(2);
  });

  it('three concurrent calls that meet the same 404 share one renewal and all run once', async () => {
    const { server, u, renewals } = await setup();
    await u.call('r-tool-0', {});
    const before = server.initializations;
    await server.restart();
    await settle();
    const outs = await Promise.all([0, 1, 2].map((i) => u.call(`r-tool-${i}`, {})));
    expect(outs.map(text)).toEqual(['called r-tool-0', 'called r-tool-1', 'called r-tool-2']);
    expect(outs.every((o) => o.boundary === 'answered')).toBe(true);
    expect(renewals).toHaveLength(1);
    expect(server.initializations).toBe(before + 1);
    // Each ran once upstream (the 404s processed nothing): r-tool-0 twice in all, the others once.
    expect([0, 1, 2].map((i) => server.calls.get(`r-tool-${i}`))).toEqual([2, 1, 1]);
  });

  it('a call in flight on the old session is not aborted by the renewal: it ends by its own answer', async () => {
    const { server, u, renewals } = await setup();
    await u.call('r-tool-0', {});
    const slow = u.call('wait', { ms: 600 });
    while ((server.calls.get('wait') ?? 0) === 0) await new Promise((r) => setTimeout(r, 10));
    server.forgetSessions();
    expect(text(await u.call('r-tool-1', {}))).toBe('called r-tool-1');
    expect(renewals).toHaveLength(1);
    const out = await slow;
    expect(out.boundary).toBe('answered');
    expect(text(out)).toBe('waited');
  });
});

/** An upstream that initialises, then refuses every other request with HTTP `status`. */
async function refusingUpstream(status: number): Promise<{ url: string; server: Server }> {
  const server = createServer(async (req, res) => {
    const chunks: Buffer[] = [];
    for await (const c of req) chunks.push(c as Buffer);
    const body = chunks.length ? JSON.parse(Buffer.concat(chunks).toString()) : null;
    if (body?.method === 'initialize') {
      res.writeHead(200, { 'content-type': 'application/json', 'mcp-session-id': 'only' });
      const result = {
        protocolVersion: '2025-11-25',
        capabilities: {},
        serverInfo: { name: 'x', version: '1' },
      };
      return void res.end(JSON.stringify({ jsonrpc: '2.0', id: body.id, result }));
    }
    if (body?.method === 'notifications/initialized') return void res.writeHead(202).end();
    if (req.method !== 'POST') return void res.writeHead(405).end();
    res.writeHead(status, { 'content-type': 'application/json' }).end('{"error":"refused"}');
  });
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
  return { url: `http://127.0.0.1:${(server.address() as AddressInfo).port}/mcp`, server };
}

describe('the readiness reason of an HTTP refusal', () => {
  for (const [status, reason] of [
    [404, 'HTTP 404 (session expired)'],
    [400, 'HTTP 400'],
  ] as const)
    it(`${status}: "${reason}", no URL (a 404 renewed once first)`, async () => {
      const { url, server } = await refusingUpstream(status);
      const renewals: string[] = [];
      const cfg = { name: 'x', transport: 'http', url, timeout_ms: 5000 } as UpstreamConfig;
      const u = new Upstream(cfg, log, () => undefined, 1 << 20, { onRenewed: (_n, w) => renewals.push(w) });
      try {
        expect(await u.ping(2000)).toBe(reason);
        expect(renewals).toHaveLength(status === 404 ? 1 : 0);
        // A tool call on it is not sent twice into a session the upstream keeps refusing.
        const out = await u.call('t', {});
        expect(out).toEqual(
          status === 404
            ? { boundary: 'not_sent', failure: 'upstream session expired twice' }
            : { boundary: 'maybe_sent', failure: 'HTTP 400' },
        );
      } finally {
        await u.release();
        server.closeAllConnections();
        await new Promise((r) => server.close(r));
      }
    });
});

describe('the result cap bounds the result message, not the stream', () => {
  const cap = 200_000;

  it('3000 progress notifications of 100 B padding and a small result pass over SSE', async () => {
    const { u } = await setup({ cap });
    let seen = 0;
    const out = await u.call(
      'progress',
      { n: 3000, pad: 100 },
      {
        onprogress: () => {
          seen++;
        },
      },
    );
    expect(out.boundary).toBe('answered');
    expect(text(out)).toBe('progressed');
    expect(seen).toBe(3000);
  });

  for (const json of [false, true])
    it(`a result over the cap is still refused (${json ? 'JSON' : 'SSE'})`, async () => {
      const { u } = await setup({ cap, json });
      expect(await u.call('big', { n: cap + 10 })).toEqual({
        boundary: 'answered',
        tooLarge: { capBytes: cap },
      });
      expect(text(await u.call('big', { n: 1000 }))).toBe('x'.repeat(1000));
    });
});

describe('/readyz after an upstream restart', () => {
  let server: RelayServer;
  let gw: Gateway;
  let dir: string;
  afterAll(async () => {
    await gw?.close();
    await server?.close();
    if (dir) cleanup(dir);
  });

  it('polled first, it renews the session and stays ready; tool calls succeed; one renewal per connection recorded', async () => {
    server = await startRelayServer({ tag: 'b' });
    const cfg = await writeConfig({ upstreams: [{ name: 'b', transport: 'http', url: server.url }] });
    dir = cfg.dir;
    gw = await startInProcess(cfg);
    // A client that can be asked for sampling: its calls go on a connection of its own.
    const client = new Client({ name: 'renewal-test', version: '1.0.0' }, { capabilities: { sampling: {} } });
    await client.connect(
      new StreamableHTTPClientTransport(new URL(`${gw.url}/mcp`), {
        requestInit: { headers: { Authorization: 'Bearer alice-token' } },
      }),
    );
    try {
      expect((await client.callTool({ name: 'b.b-tool-1', arguments: {} })).isError).toBeFalsy();
      await server.restart();
      await settle();
      await new Promise((r) => setTimeout(r, 1100)); // past the reused report
      const renewals = () =>
        gw.chain.entries(GATEWAY_CHAIN_ID).filter((e) => e.entry_type === 'upstream_session_renewed');
      const ready = await fetch(`${gw.url}/readyz`);
      const body = (await ready.json()) as { checks: { upstreams: Record<string, string | null> } };
      expect(body.checks.upstreams).toEqual({ b: null });
      expect(ready.status).toBe(200);
      // The ping renewed the shared connection's session.
      expect(renewals()).toHaveLength(1);
      for (let i = 0; i < 3; i++) {
        const r = await client.callTool({ name: 'b.b-tool-1', arguments: {} });
        expect(r.content).toEqual([{ type: 'text', text: 'called b-tool-1' }]);
      }
      // The client session's own upstream connection renewed its session once, on the first call.
      const renewed = renewals();
      expect(renewed).toHaveLength(2);
      for (const e of renewed) expect(e).toMatchObject({ server_identity: 'b' });
      await new Promise((r) => setTimeout(r, 1100));
      expect((await fetch(`${gw.url}/readyz`)).status).toBe(200);
    } finally {
      await client.close();
    }
  });
});
