/**
 * The client-facing edge end to end, with real gateways in front of the conformance fixture
 * (testing/conformance/fixture-server.ts) and the official SDK client: a client that cancels
 * mid-call, or disconnects, cancels the upstream request; progress passes through two gateway
 * hops in order, under the client's own token; two clients' log levels stay apart.
 */
import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { StreamableHTTPClientTransport } from '@modelcontextprotocol/sdk/client/streamableHttp.js';
import { LoggingMessageNotificationSchema } from '@modelcontextprotocol/sdk/types.js';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { Gateway } from '../src/gateway/lifecycle/start.js';
import { type FixtureServer, startFixtureServer } from '../testing/conformance/fixture-server.js';
import { cleanup, startInProcess, type TestConfig, writeConfig } from './harness/gateway.js';

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));
let up: FixtureServer;
/** Hop 1: in front of the fixture (dev mode: no token). */
let near: Gateway;
/** Hop 2: in front of hop 1. */
let far: Gateway;
const configs: TestConfig[] = [];

beforeAll(async () => {
  up = await startFixtureServer();
  const c1 = await writeConfig({
    dev_mode: true,
    agents: [],
    upstreams: [{ name: 'fx', transport: 'http', url: up.url, prefix: '' }],
  });
  configs.push(c1);
  near = await startInProcess(c1);
  const c2 = await writeConfig({ upstreams: [{ name: 'hop', transport: 'http', url: `${near.url}/mcp` }] });
  configs.push(c2);
  far = await startInProcess(c2);
});

afterAll(async () => {
  await far?.close();
  await near?.close();
  await up?.close();
  for (const c of configs) cleanup(c.dir);
});

async function client(gw: Gateway, token?: string): Promise<Client> {
  const c = new Client({ name: 'edge-e2e', version: '1.0.0' });
  await c.connect(
    new StreamableHTTPClientTransport(new URL(`${gw.url}/mcp`), {
      requestInit: { headers: token ? { authorization: `Bearer ${token}` } : {} },
    }),
  );
  return c;
}

async function until(cond: () => boolean, ms = 5000): Promise<void> {
  for (const end = Date.now() + ms; !cond() && Date.now() < end; ) await sleep(20);
}

describe('cancellation through the gateway', () => {
  it("the client's cancellation mid-call reaches the upstream as notifications/cancelled", async () => {
    const c = await client(near);
    const ctl = new AbortController();
    const before = up.cancelled.length;
    // The upstream's first progress says the call reached it and is waiting: cancel only then
    // (a fixed sleep raced a loaded machine, where the cancellation could beat the call upstream).
    let running = false;
    const call = c.callTool({ name: 'test_wait_for_cancel', arguments: {} }, undefined, {
      signal: ctl.signal,
      onprogress: () => {
        running = true;
      },
    });
    await until(() => running);
    expect(running).toBe(true);
    expect(up.cancelled.length).toBe(before);
    ctl.abort('no longer needed');
    await expect(call).rejects.toThrow();
    await until(() => up.cancelled.length > before);
    expect(up.cancelled.length).toBe(before + 1);
    // Its terminal entry says the client cancelled it, not that the upstream failed.
    const entry = () =>
      near.db
        .prepare<[], { canonical: string }>(
          "SELECT canonical FROM audit_entries WHERE entry_type = 'tool_call' AND json_extract(canonical, '$.tool_name') = 'test_wait_for_cancel' ORDER BY rowid DESC LIMIT 1",
        )
        .get();
    await until(() => entry() !== undefined);
    expect(JSON.parse(entry()?.canonical ?? '{}')).toMatchObject({
      disposition: 'outcome_unknown',
      error_code: 'REQUEST_CANCELLED',
    });
    await c.close();
  });

  it('a client that disconnects mid-call cancels its upstream request', async () => {
    const ctl = new AbortController();
    const before = up.cancelled.length;
    const res = await fetch(`${near.url}/mcp`, {
      method: 'POST',
      headers: { 'content-type': 'application/json', accept: 'application/json, text/event-stream' },
      body: JSON.stringify({
        jsonrpc: '2.0',
        id: 'leaving',
        method: 'tools/call',
        params: { name: 'test_wait_for_cancel', arguments: {}, _meta: { progressToken: 'p1' } },
      }),
      signal: ctl.signal,
    });
    // The upstream's first progress notification opened the stream: the call is under way.
    expect(res.headers.get('content-type')).toBe('text/event-stream');
    ctl.abort();
    await until(() => up.cancelled.length > before);
    expect(up.cancelled.length).toBe(before + 1);
  });
});

describe('client sessions kept apart', () => {
  it('two clients in parallel with different log levels each get only their own log messages', async () => {
    const [loud, quiet] = await Promise.all([client(near), client(near)]);
    const heard: Record<string, string[]> = { loud: [], quiet: [] };
    loud.setNotificationHandler(LoggingMessageNotificationSchema, (n) => {
      heard.loud?.push(String(n.params.data));
    });
    quiet.setNotificationHandler(LoggingMessageNotificationSchema, (n) => {
      heard.quiet?.push(String(n.params.data));
    });
    await Promise.all([loud.setLoggingLevel('debug'), quiet.setLoggingLevel('error')]);
    await Promise.all([
      loud.callTool({ name: 'test_tool_with_logging', arguments: {} }),
      quiet.callTool({ name: 'test_tool_with_logging', arguments: {} }),
    ]);
    expect(heard.loud).toEqual([
      'Tool execution started',
      'Tool processing data',
      'Tool execution completed',
    ]);
    expect(heard.quiet).toEqual([]);
    await Promise.all([loud.close(), quiet.close()]);
  });
});

describe('progress through two gateway hops', () => {
  it('arrives in order, under the token the client chose', async () => {
    const c = await client(far, 'alice-token');
    const seen: [number, number | undefined][] = [];
    const r = await c.callTool({ name: 'hop.test_tool_with_progress', arguments: {} }, undefined, {
      onprogress: (p) => seen.push([p.progress, p.total]),
    });
    expect(seen).toEqual([
      [0, 100],
      [50, 100],
      [100, 100],
    ]);
    expect((r.content as { text: string }[])[0]?.text).toBe('Tool with progress executed successfully');
    // Each hop recorded the call in its own evidence.
    const ev = (r._meta as Record<string, { chain_id: string; entry_hash: string }>)['dev.cmcp/evidence'];
    expect(far.chain.entries(ev?.chain_id as string).some((e) => e.entry_hash === ev?.entry_hash)).toBe(true);
    await c.close();
  });

  it('many progress notifications pass both hops in order', async () => {
    const c = await client(far, 'alice-token');
    const seen: number[] = [];
    await c.callTool({ name: 'hop.test_progress_steps', arguments: { steps: 200 } }, undefined, {
      onprogress: (p) => seen.push(p.progress),
    });
    expect(seen).toEqual(Array.from({ length: 200 }, (_, i) => i + 1));
    await c.close();
  });

  it('a notification reaches the client while the call still runs (the SSE channel coalesces, it does not hold back)', async () => {
    const c = await client(far, 'alice-token');
    const ctl = new AbortController();
    const seen: number[] = [];
    let settled = false;
    const call = c
      .callTool({ name: 'hop.test_wait_for_cancel', arguments: {} }, undefined, {
        signal: ctl.signal,
        onprogress: (p) => seen.push(p.progress),
      })
      .finally(() => {
        settled = true;
      });
    call.catch(() => undefined);
    await until(() => seen.length > 0);
    expect(seen).toEqual([0]);
    expect(settled).toBe(false);
    ctl.abort('seen enough');
    await expect(call).rejects.toThrow();
    await c.close();
  });
});
