/**
 * No trace context carried over between unrelated requests (docs/operations.md#metrics-traces-
 * readiness): background work — the list refresh a `notifications/tools/list_changed` starts
 * (sent by a stdio upstream, and by an HTTP upstream inside a call's own response stream), the
 * reconnect after an upstream process dies, the availability retries that bring in an upstream
 * that was down at start, the client-session sweep — exports no span parented on an agent
 * request's trace. Checked on what a real OTLP receiver gets: every span is a root, or starts
 * within its parent's time span in the parent's trace (a request's span ends when it answers,
 * so work started later cannot be its child); and every background listing is a root.
 */
import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { join } from 'node:path';
import { McpServer } from '@modelcontextprotocol/sdk/server/mcp.js';
import { StreamableHTTPServerTransport } from '@modelcontextprotocol/sdk/server/streamableHttp.js';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { type CountingServer, startCountingServer } from './fixtures/counting-server.js';
import { cleanup, freePort, rpc, startInProcess, writeConfig } from './harness/gateway.js';
import { attr, type OtlpReceiver, type OtlpSpan, startReceiver } from './harness/otlp-receiver.js';

/**
 * A stateless Streamable HTTP upstream (official SDK, SSE answers) whose `grow` tool adds a tool
 * and sends `notifications/tools/list_changed` on the call's own response stream.
 */
async function startNotifyingServer(): Promise<{ url: string; close: () => Promise<void> }> {
  let added = 0;
  const http: Server = createServer(async (req, res) => {
    if (req.method !== 'POST') {
      res.writeHead(405).end();
      return;
    }
    const server = new McpServer(
      { name: 'notifying', version: '1.0.0' },
      { capabilities: { tools: { listChanged: true } } },
    );
    server.registerTool('grow', { description: 'adds a tool and says the list changed' }, async (extra) => {
      added++;
      await extra.sendNotification({ method: 'notifications/tools/list_changed' });
      return { content: [{ type: 'text', text: `added ${added}` }] };
    });
    for (let i = 1; i <= added; i++)
      server.registerTool(`added_${i}`, { description: `added at run time (${i})` }, async () => ({
        content: [{ type: 'text', text: String(i) }],
      }));
    const transport = new StreamableHTTPServerTransport({ sessionIdGenerator: undefined });
    res.on('close', () => {
      void transport.close();
      void server.close();
    });
    await server.connect(transport);
    await transport.handleRequest(req, res);
  });
  await new Promise<void>((r) => http.listen(0, '127.0.0.1', r));
  const { port } = http.address() as AddressInfo;
  return {
    url: `http://127.0.0.1:${port}/mcp`,
    close: async () => {
      http.closeAllConnections();
      await new Promise<void>((r) => http.close(() => r()));
    },
  };
}

const nanos = (s: string) => BigInt(s);

/** Calls `name` with the agent context `trace`/`span` in the request's W3C traceparent header. */
async function tracedCall(url: string, name: string, trace: string, span: string, id: number) {
  const r = await fetch(`${url}/mcp`, {
    method: 'POST',
    headers: {
      authorization: 'Bearer alice-token',
      'content-type': 'application/json',
      accept: 'application/json',
      traceparent: `00-${trace}-${span}-01`,
    },
    body: JSON.stringify({ jsonrpc: '2.0', id, method: 'tools/call', params: { name, arguments: {} } }),
  });
  const body = (await r.json()) as { result?: { content?: { text?: string }[] }; error?: unknown };
  expect(body.error, JSON.stringify(body)).toBeUndefined();
  return body.result?.content?.[0]?.text ?? '';
}

async function until(cond: () => Promise<boolean>, ms: number): Promise<boolean> {
  const end = Date.now() + ms;
  while (Date.now() < end) {
    if (await cond()) return true;
    await new Promise((r) => setTimeout(r, 100));
  }
  return cond();
}

describe('background work and trace context', () => {
  let receiver: OtlpReceiver;
  let notifying: Awaited<ReturnType<typeof startNotifyingServer>>;
  let late: CountingServer | null = null;
  beforeAll(async () => {
    receiver = await startReceiver();
    notifying = await startNotifyingServer();
  });
  afterAll(async () => {
    await late?.close();
    await notifying?.close();
    await receiver?.close();
  });

  it('refreshes, reconnects and retries in root spans: no span hangs under an earlier request', async () => {
    const latePort = await freePort();
    const cfg = await writeConfig({
      upstreams: [
        {
          name: 'growing',
          transport: 'stdio',
          command: process.execPath,
          args: [join(import.meta.dirname, 'fixtures', 'list-changing-server.mjs')],
        },
        { name: 'notifying', transport: 'http', url: notifying.url },
        // Down at start: retried with backoff until it answers.
        { name: 'late', transport: 'http', url: `http://127.0.0.1:${latePort}/mcp` },
      ],
      sessions: { client_idle_s: 1 },
      extra: { tracing: { enabled: true, otlp_endpoint: receiver.url, service_name: 'cmcp-bg-test' } },
    });
    const agentSpan = '00f067aa0ba902b7';
    const traces = {
      stdioGrow: '11111111111111111111111111111111',
      httpGrow: '22222222222222222222222222222222',
      pid: '33333333333333333333333333333333',
      afterKill: '44444444444444444444444444444444',
    };
    const gw = await startInProcess(cfg);
    try {
      const tools = async () =>
        ((await rpc(gw.url, 'alice-token', { jsonrpc: '2.0', id: 9, method: 'tools/list' })).body.result
          ?.tools ?? []) as { name: string }[];
      // A list_changed from a stdio upstream, then from an HTTP upstream on the call's stream.
      await tracedCall(gw.url, 'growing.grow', traces.stdioGrow, agentSpan, 1);
      expect(await until(async () => (await tools()).some((t) => t.name === 'growing.added_1'), 10_000)).toBe(
        true,
      );
      expect(await tracedCall(gw.url, 'notifying.grow', traces.httpGrow, agentSpan, 2)).toBe('added 1');
      expect(
        await until(async () => (await tools()).some((t) => t.name === 'notifying.added_1'), 10_000),
      ).toBe(true);
      // The stdio upstream dies; the next call reconnects.
      const pid = Number(await tracedCall(gw.url, 'growing.pid', traces.pid, agentSpan, 3));
      process.kill(pid, 'SIGKILL');
      await new Promise((r) => setTimeout(r, 300));
      const again = await until(async () => {
        try {
          return Number(await tracedCall(gw.url, 'growing.pid', traces.afterKill, agentSpan, 4)) !== pid;
        } catch {
          return false;
        }
      }, 10_000);
      expect(again).toBe(true);
      // The late upstream comes up; a retry brings it in.
      late = await startCountingServer(latePort);
      expect(await until(async () => (await tools()).some((t) => t.name === 'late.record'), 15_000)).toBe(
        true,
      );
      // A sweep of the client sessions runs (every 250 ms at this idle time).
      await new Promise((r) => setTimeout(r, 600));
    } finally {
      await gw.close(); // flushes the batch processor
      cleanup(cfg.dir);
    }

    const spans = receiver.spans();
    const byId = new Map(spans.map((s) => [s.spanId, s]));
    const agentTraces = new Set(Object.values(traces));
    const leaks: string[] = [];
    for (const s of spans) {
      const parentId = s.parentSpanId ?? '';
      if (parentId === '') continue;
      if (parentId === agentSpan && agentTraces.has(s.traceId)) continue; // an agent's request
      const parent = byId.get(parentId);
      const inside =
        parent !== undefined &&
        parent.traceId === s.traceId &&
        nanos(s.startTimeUnixNano) >= nanos(parent.startTimeUnixNano) &&
        nanos(s.startTimeUnixNano) <= nanos(parent.endTimeUnixNano);
      if (!inside)
        leaks.push(`${s.name} (${attr(s, 'cmcp.upstream') ?? '-'}) under ${parent?.name ?? parentId}`);
    }
    expect(leaks).toEqual([]);
    // The background listings were traced, each as a root of its own trace.
    const listings = (upstream: string) =>
      spans.filter((s) => s.kind === 3 && s.name === 'tools/list' && attr(s, 'cmcp.upstream') === upstream);
    const roots = (xs: OtlpSpan[]) => xs.filter((s) => (s.parentSpanId ?? '') === '');
    for (const name of ['growing', 'notifying']) {
      // First contact, the refresh, and (growing) the relisting of the reconnect if any.
      expect(listings(name).length, name).toBeGreaterThanOrEqual(2);
      expect(roots(listings(name)), name).toEqual(listings(name));
    }
    expect(listings('late').length).toBeGreaterThanOrEqual(1);
    expect(roots(listings('late'))).toEqual(listings('late'));
    for (const s of spans) if (agentTraces.has(s.traceId)) expect(s.name).not.toBe('tools/list');
    // The reconnect's call belongs to the request that made it.
    const afterKill = spans.filter((s) => s.traceId === traces.afterKill && s.kind === 3);
    expect(afterKill.map((s) => s.name)).toContain('tools/call pid');
  }, 60_000);
});
