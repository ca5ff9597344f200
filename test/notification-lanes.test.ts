/**
 * Upstream notification budgets per (client, upstream), progress per request, list changes
 * coalesced (docs/operations.md#limits-and-timeouts): two real HTTP upstreams behind a real
 * gateway, real MCP SDK clients. One upstream floods log messages; the other's progress for the
 * caller's call and its list change still reach the client. A flood of list changes reaches the
 * client as a few coalesced notifications, the last one after the upstream stopped, so the
 * client always learns that its list changed.
 */
import { createServer, type Server } from 'node:http';
import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { StreamableHTTPClientTransport } from '@modelcontextprotocol/sdk/client/streamableHttp.js';
import { McpServer } from '@modelcontextprotocol/sdk/server/mcp.js';
import { StreamableHTTPServerTransport } from '@modelcontextprotocol/sdk/server/streamableHttp.js';
import {
  LoggingMessageNotificationSchema,
  ToolListChangedNotificationSchema,
} from '@modelcontextprotocol/sdk/types.js';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { Gateway } from '../src/gateway/lifecycle/start.js';
import { MAX_PENDING_URIS, NotificationBudget } from '../src/relay/notification-budget.js';
import { cleanup, startInProcess, type TestConfig, writeConfig } from './harness/gateway.js';

const OP = 'op-token-lanes';
const FLOOD = 2000;
const PROGRESS = 30;
const CHURN = 300;
const LIMITS = {
  upstream_notifications_per_s: 10,
  upstream_notification_burst: 50,
  upstream_notification_bytes_per_s: 64 * 1024,
  upstream_notification_byte_burst: 512 * 1024,
};

type Extra = {
  sendNotification: (n: never) => Promise<void>;
  _meta?: { progressToken?: string | number };
};

let servers: Server[] = [];
let cfg: TestConfig;
let gw: Gateway;

/** A stateless HTTP MCP upstream whose tools are built by `tools`. */
async function upstream(name: string, tools: (s: McpServer) => void): Promise<string> {
  const server = createServer(async (req, res) => {
    const s = new McpServer(
      { name, version: '1.0.0' },
      { capabilities: { logging: {}, tools: { listChanged: true } } },
    );
    tools(s);
    const t = new StreamableHTTPServerTransport({ sessionIdGenerator: undefined });
    res.on('close', () => {
      void t.close();
      void s.close();
    });
    await s.connect(t);
    await t.handleRequest(req, res);
  });
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
  servers.push(server);
  return `http://127.0.0.1:${(server.address() as { port: number }).port}/mcp`;
}

const send = (extra: Extra, method: string, params?: Record<string, unknown>) =>
  extra.sendNotification({ method, ...(params ? { params } : {}) } as never);
const done = { content: [{ type: 'text' as const, text: 'done' }] };

beforeAll(async () => {
  // A tool without an input schema gets the request's `extra` as its one argument.
  const f = await upstream('flooder', (s) =>
    s.registerTool('flood', { description: 'floods log messages' }, async (extra: Extra) => {
      for (let i = 0; i < FLOOD; i++)
        await send(extra, 'notifications/message', { level: 'info', data: `${i}` });
      return done;
    }),
  );
  const w = await upstream('worker', (s) => {
    s.registerTool(
      'work',
      { description: 'reports progress, then a tool list change' },
      async (extra: Extra) => {
        const progressToken = extra._meta?.progressToken;
        for (let i = 1; i <= PROGRESS; i++) {
          if (progressToken !== undefined)
            await send(extra, 'notifications/progress', { progressToken, progress: i, total: PROGRESS });
          await new Promise((r) => setTimeout(r, 5));
        }
        await send(extra, 'notifications/tools/list_changed');
        return done;
      },
    );
    s.registerTool(
      'churn',
      { description: 'log messages, then many tool list changes' },
      async (extra: Extra) => {
        for (let i = 0; i < 2 * LIMITS.upstream_notification_burst; i++)
          await send(extra, 'notifications/message', { level: 'info', data: `${i}` });
        for (let i = 0; i < CHURN; i++) await send(extra, 'notifications/tools/list_changed');
        return done;
      },
    );
  });
  cfg = await writeConfig({
    upstreams: [
      { name: 'f', transport: 'http', url: f },
      { name: 'w', transport: 'http', url: w },
    ],
    agents: ['alice', 'bob'].map((a) => ({ agent_id: a, token: `${a}-token` })),
    operators: [{ operator_id: 'root', token: OP }],
    extra: { limits: LIMITS },
  });
  gw = await startInProcess(cfg);
}, 60_000);

afterAll(async () => {
  await gw?.close();
  await Promise.all(servers.map((s) => new Promise((r) => s.close(r))));
  servers = [];
  if (cfg) cleanup(cfg.dir);
});

interface Heard {
  client: Client;
  logs: number;
  listChanged: number;
}

/** A client session of `agent` that set a log level (its own connection to each upstream). */
async function client(agent: string): Promise<Heard> {
  const c = new Client({ name: `${agent}-client`, version: '1.0.0' });
  await c.connect(
    new StreamableHTTPClientTransport(new URL(`${gw.url}/mcp`), {
      requestInit: { headers: { authorization: `Bearer ${agent}-token` } },
    }),
  );
  await c.setLoggingLevel('info');
  const h: Heard = { client: c, logs: 0, listChanged: 0 };
  c.setNotificationHandler(LoggingMessageNotificationSchema, () => {
    h.logs++;
  });
  c.setNotificationHandler(ToolListChangedNotificationSchema, () => {
    h.listChanged++;
  });
  return h;
}

async function droppedMetric(): Promise<number> {
  const text = await (
    await fetch(`${gw.url}/metrics`, { headers: { authorization: `Bearer ${OP}` } })
  ).text();
  const m = /^cmcp_refusals_total\{code="UPSTREAM_NOTIFICATIONS_LIMITED"\} (\d+)$/m.exec(text);
  return m ? Number(m[1]) : 0;
}

/** Waits (bounded) until `ok` holds. */
async function until(ok: () => boolean, ms = 10_000): Promise<void> {
  for (const end = Date.now() + ms; !ok() && Date.now() < end; ) await new Promise((r) => setTimeout(r, 25));
}

describe('notification budgets per upstream, per request and coalesced', () => {
  it("one upstream's log flood starves neither another upstream's progress nor its list change", async () => {
    const h = await client('alice');
    const flood = await h.client.callTool({ name: 'f.flood', arguments: {} }, undefined, {
      timeout: 120_000,
    });
    expect((flood.content as { text: string }[])[0]?.text).toBe('done');
    // The flood emptied the lane of `f` to this client.
    expect(h.logs).toBeLessThan(FLOOD);
    const progress: number[] = [];
    const r = await h.client.callTool({ name: 'w.work', arguments: {} }, undefined, {
      timeout: 60_000,
      onprogress: (p) => progress.push(p.progress),
    });
    expect((r.content as { text: string }[])[0]?.text).toBe('done');
    // Every progress of the call: fewer than its bucket's burst, and no log message took from it.
    expect(progress).toEqual(Array.from({ length: PROGRESS }, (_, i) => i + 1));
    await until(() => h.listChanged >= 1);
    await new Promise((r) => setTimeout(r, 300));
    expect(h.listChanged).toBe(1);
    await h.client.close();
  }, 180_000);

  it('a flood of list changes reaches the client as a few coalesced ones, the last one included', async () => {
    const h = await client('bob');
    const before = await droppedMetric();
    const started = Date.now();
    const r = await h.client.callTool({ name: 'w.churn', arguments: {} }, undefined, { timeout: 120_000 });
    const seconds = (Date.now() - started) / 1000;
    expect((r.content as { text: string }[])[0]?.text).toBe('done');
    // The log messages before took the lane's burst: every list change was over the budget, yet
    // one pending is delivered once the lane refills.
    await until(() => h.listChanged >= 1);
    expect(h.listChanged).toBeGreaterThanOrEqual(1);
    expect(h.listChanged).toBeLessThanOrEqual(
      1 + Math.ceil(LIMITS.upstream_notifications_per_s * (seconds + 2)),
    );
    expect(h.listChanged).toBeLessThan(CHURN / 10);
    // What was not delivered, dropped or merged into a pending one, is counted.
    await new Promise((r) => setTimeout(r, 300));
    const logs = 2 * LIMITS.upstream_notification_burst;
    expect((await droppedMetric()) - before).toBe(logs - h.logs + (CHURN - h.listChanged));
    await h.client.close();
  }, 180_000);
});

describe('NotificationBudget', () => {
  const limits = { perS: 1, burst: 1, bytesPerS: 1024, byteBurst: 1024 };

  it('keeps one pending list change per method and a bounded number of resource URIs; forgets them', async () => {
    const b = new NotificationBudget(limits);
    const delivered: string[] = [];
    const t0 = Date.now();
    expect(b.admit('s', 'u', 10, t0)).toBeNull();
    expect(b.admit('s', 'u', 10, t0)).toBe('rate');
    // Another upstream's lane is untouched.
    expect(b.admit('s', 'v', 10, t0)).toBeNull();
    const m = 'notifications/tools/list_changed';
    expect(b.coalesce('s', 'u', m, undefined, 10, () => delivered.push('a'), t0)).toBe('deferred');
    expect(b.coalesce('s', 'u', m, undefined, 10, () => delivered.push('b'), t0)).toBe('rate');
    // Log messages are never kept.
    expect(b.coalesce('s', 'u', 'notifications/message', undefined, 10, () => delivered.push('x'), t0)).toBe(
      'rate',
    );
    const upd = 'notifications/resources/updated';
    for (let i = 0; i < MAX_PENDING_URIS; i++)
      expect(b.coalesce('s', 'u', upd, `r:${i}`, 10, () => delivered.push(`r:${i}`), t0)).toBe('deferred');
    expect(b.coalesce('s', 'u', upd, 'r:more', 10, () => delivered.push('r:more'), t0)).toBe('rate');
    // After about a second the lane has one token again: the first pending, the latest of its kind.
    await until(() => delivered.length >= 1, 5000);
    expect(delivered).toEqual(['b']);
    expect(b.size).toBe(1);
    b.forget('s');
    expect(b.size).toBe(0);
    await new Promise((r) => setTimeout(r, 1500));
    expect(delivered).toEqual(['b']);
  }, 20_000);

  it("a request's progress bucket is its own", () => {
    const b = new NotificationBudget(limits);
    const t0 = Date.now();
    expect(b.admit('s', 'u', 10, t0)).toBeNull();
    const gate = b.progressGate();
    expect(gate(10, t0)).toBeNull();
    expect(gate(10, t0)).toBe('rate');
    expect(b.progressGate()(10, t0)).toBeNull();
  });
});
