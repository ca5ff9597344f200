/**
 * Stdio upstream processes are shared and bounded (docs/spec/mcp.md#client-sessions): many
 * client sessions making plain calls share one upstream process; a client session gets a
 * process of its own only when its state needs one (a log level here), at most
 * `max_client_connections` per upstream (then `UPSTREAM_CLIENT_CONNECTIONS_FULL`), and that
 * process ends when no request used it for `sessions.client_idle_s`.
 * Real gateway (in this process), real @modelcontextprotocol/server-everything over stdio,
 * real SDK clients over HTTP; processes counted in /proc.
 */
import { readdirSync, readFileSync } from 'node:fs';
import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { StreamableHTTPClientTransport } from '@modelcontextprotocol/sdk/client/streamableHttp.js';
import { McpError } from '@modelcontextprotocol/sdk/types.js';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { Gateway } from '../src/gateway/lifecycle/start.js';
import { everythingUpstream, startInProcess, writeConfig } from './harness/gateway.js';

const SESSIONS = 200;
const CAP = 2;

/** The server-everything processes this test process started (its children running it). */
function upstreamProcesses(): number {
  let n = 0;
  for (const d of readdirSync('/proc')) {
    if (!/^\d+$/.test(d)) continue;
    try {
      const stat = readFileSync(`/proc/${d}/stat`, 'utf8');
      const ppid = Number(stat.slice(stat.lastIndexOf(')') + 2).split(' ')[1]);
      if (ppid !== process.pid) continue;
      if (readFileSync(`/proc/${d}/cmdline`, 'utf8').includes('server-everything')) n++;
    } catch {
      // the process ended while it was read
    }
  }
  return n;
}

async function until(ok: () => boolean, ms: number): Promise<void> {
  const end = Date.now() + ms;
  while (!ok()) {
    if (Date.now() > end) throw new Error('timed out waiting');
    await new Promise((r) => setTimeout(r, 50));
  }
}

async function sdkClient(url: string, capabilities: Record<string, unknown> = {}): Promise<Client> {
  const client = new Client({ name: 'shared-sessions-test', version: '1.0.0' }, { capabilities });
  await client.connect(
    new StreamableHTTPClientTransport(new URL(`${url}/mcp`), {
      requestInit: { headers: { Authorization: 'Bearer alice-token' } },
    }),
  );
  return client;
}

describe('client sessions against one stdio upstream', () => {
  let gw: Gateway;
  const clients: Client[] = [];

  beforeAll(async () => {
    const cfg = await writeConfig({
      upstreams: [everythingUpstream('everything', { max_client_connections: CAP })],
      extra: { limits: { agent_client_sessions_per_min: 10_000 } },
    });
    gw = await startInProcess(cfg);
  });
  afterAll(async () => {
    await Promise.all(clients.map((c) => c.close().catch(() => undefined)));
    await gw?.close();
  });

  it(`${SESSIONS} client sessions making plain calls share the one upstream process`, async () => {
    let next = 0;
    await Promise.all(
      Array.from({ length: 8 }, async () => {
        while (next < SESSIONS) {
          next++;
          const c = await sdkClient(gw.url);
          clients.push(c);
          const tools = await c.listTools();
          expect(tools.tools.some((t) => t.name === 'everything.echo')).toBe(true);
          const r = await c.callTool({ name: 'everything.echo', arguments: { message: 'hi' } });
          expect(r.content).toEqual([{ type: 'text', text: 'Echo: hi' }]);
        }
      }),
    );
    expect(upstreamProcesses()).toBeLessThanOrEqual(2);
    expect(gw.relay.sessions.ownConnections('everything')).toBe(0);
  }, 240_000);

  it('gives a client that sets a log level a process of its own, up to the cap, then refuses clearly', async () => {
    const before = upstreamProcesses();
    const own = [await sdkClient(gw.url), await sdkClient(gw.url)];
    clients.push(...own);
    for (const c of own) await c.setLoggingLevel('error');
    await until(() => upstreamProcesses() === before + CAP, 30_000);
    expect(gw.relay.sessions.ownConnections('everything')).toBe(CAP);
    // One more is refused with the stable code, and nothing is started for it.
    const third = await sdkClient(gw.url);
    clients.push(third);
    const refused = await third.setLoggingLevel('error').catch((e: unknown) => e);
    expect(refused).toBeInstanceOf(McpError);
    expect((refused as McpError).code).toBe(-32035);
    expect((refused as McpError).data).toMatchObject({
      error_code: 'UPSTREAM_CLIENT_CONNECTIONS_FULL',
      upstream: 'everything',
    });
    // A client that can be asked for sampling needs its own connection for a call: refused too,
    // and the call's terminal entry records why.
    const sampler = await sdkClient(gw.url, { sampling: {} });
    clients.push(sampler);
    const call = await sampler
      .callTool({ name: 'everything.echo', arguments: { message: 'x' } })
      .catch((e: unknown) => e);
    expect((call as McpError).data).toMatchObject({ error_code: 'UPSTREAM_CLIENT_CONNECTIONS_FULL' });
    // Plain calls still go through on the shared connection.
    const r = await third.callTool({ name: 'everything.echo', arguments: { message: 'still' } });
    expect(r.content).toEqual([{ type: 'text', text: 'Echo: still' }]);
    expect(upstreamProcesses()).toBe(before + CAP);
    // Ending one client session (DELETE) frees its place and ends its process.
    const first = own[0] as Client;
    await (first.transport as StreamableHTTPClientTransport).terminateSession();
    await until(() => gw.relay.sessions.ownConnections('everything') === CAP - 1, 10_000);
    await third.setLoggingLevel('error');
    expect(gw.relay.sessions.ownConnections('everything')).toBe(CAP);
    await until(() => upstreamProcesses() === before + CAP, 30_000);
  }, 120_000);
});

describe('an idle client session', () => {
  it('loses its own upstream process after sessions.client_idle_s without a request', async () => {
    const cfg = await writeConfig({ upstreams: [everythingUpstream()], sessions: { client_idle_s: 1 } });
    const gw = await startInProcess(cfg);
    const c = await sdkClient(gw.url);
    try {
      const shared = upstreamProcesses();
      await c.setLoggingLevel('info');
      expect(gw.relay.sessions.ownConnections('everything')).toBe(1);
      await until(() => upstreamProcesses() === shared + 1, 30_000);
      // No further request: its own connection closes and its process exits, though the SDK
      // client's open standalone stream keeps the client session itself alive.
      await until(() => gw.relay.sessions.ownConnections('everything') === 0, 30_000);
      await until(() => upstreamProcesses() === shared, 30_000);
      const r = await c.callTool({ name: 'everything.echo', arguments: { message: 'later' } });
      expect(r.content).toEqual([{ type: 'text', text: 'Echo: later' }]);
      expect(upstreamProcesses()).toBe(shared);
    } finally {
      await c.close().catch(() => undefined);
      await gw.close();
    }
  }, 90_000);
});
