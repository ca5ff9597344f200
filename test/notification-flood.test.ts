/**
 * Upstream notification floods (docs/operations.md#limits-and-timeouts): a real HTTP upstream
 * whose tools send a bounded burst of log notifications during a call, real MCP SDK clients in
 * their own client sessions receiving them through a real gateway. Each client gets at most what
 * `limits.upstream_notification*` allow; the excess is dropped, counted in
 * `cmcp_refusals_total{code="UPSTREAM_NOTIFICATIONS_LIMITED"}` and recorded in the aggregated
 * refusal record; the gateway keeps answering meanwhile.
 */
import { createServer, type Server } from 'node:http';
import { verifyBundle } from '@cmcp/verify';
import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { StreamableHTTPClientTransport } from '@modelcontextprotocol/sdk/client/streamableHttp.js';
import { McpServer } from '@modelcontextprotocol/sdk/server/mcp.js';
import { StreamableHTTPServerTransport } from '@modelcontextprotocol/sdk/server/streamableHttp.js';
import { LoggingMessageNotificationSchema } from '@modelcontextprotocol/sdk/types.js';
import Database from 'better-sqlite3';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { Gateway } from '../src/gateway/lifecycle/start.js';
import { AuditChain } from '../src/store/sqlite/chain.js';
import { openDatabase } from '../src/store/sqlite/db.js';
import { cleanup, rpc, startInProcess, type TestConfig, writeConfig } from './harness/gateway.js';

const OP = 'op-token-flood';
/** Small notifications, many: the count bound is the one that holds. */
const FLOOD = 3000;
/** Large notifications, few: the byte bound is the one that holds. */
const BIG = 40;
const BIG_BYTES = 32 * 1024;
const LIMITS = {
  upstream_notifications_per_s: 10,
  upstream_notification_burst: 50,
  upstream_notification_bytes_per_s: 16 * 1024,
  upstream_notification_byte_burst: 128 * 1024,
};

let upstream: Server;
let cfg: TestConfig;
let gw: Gateway;

beforeAll(async () => {
  upstream = createServer(async (req, res) => {
    const s = new McpServer({ name: 'flooder', version: '1.0.0' }, { capabilities: { logging: {} } });
    // A tool without an input schema gets the request's `extra` as its one argument.
    const send =
      (count: number, data: string) => async (extra: { sendNotification: (n: never) => Promise<void> }) => {
        for (let i = 0; i < count; i++)
          await extra.sendNotification({
            method: 'notifications/message',
            params: { level: 'info', data: `${i} ${data}` },
          } as never);
        return { content: [{ type: 'text' as const, text: 'done' }] };
      };
    s.registerTool('flood', { description: 'floods log messages' }, send(FLOOD, 'x'.repeat(100)));
    s.registerTool('big', { description: 'sends large log messages' }, send(BIG, 'y'.repeat(BIG_BYTES)));
    const t = new StreamableHTTPServerTransport({ sessionIdGenerator: undefined });
    res.on('close', () => {
      void t.close();
      void s.close();
    });
    await s.connect(t);
    await t.handleRequest(req, res);
  });
  await new Promise<void>((r) => upstream.listen(0, '127.0.0.1', r));
  const url = `http://127.0.0.1:${(upstream.address() as { port: number }).port}/mcp`;
  cfg = await writeConfig({
    upstreams: [{ name: 'h', transport: 'http', url }],
    agents: ['alice', 'bob', 'carol'].map((a) => ({ agent_id: a, token: `${a}-token` })),
    operators: [{ operator_id: 'root', token: OP }],
    extra: { limits: LIMITS },
  });
  gw = await startInProcess(cfg);
}, 60_000);

afterAll(async () => {
  await gw?.close();
  await new Promise((r) => upstream?.close(r));
  if (cfg) cleanup(cfg.dir);
});

async function client(agent: string): Promise<Client> {
  const c = new Client({ name: `${agent}-client`, version: '1.0.0' });
  await c.connect(
    new StreamableHTTPClientTransport(new URL(`${gw.url}/mcp`), {
      requestInit: { headers: { authorization: `Bearer ${agent}-token` } },
    }),
  );
  // Log messages reach a client session that set a level (its own upstream connection); on the
  // shared connection they reach no client (docs/spec/mcp.md#client-sessions).
  await c.setLoggingLevel('info');
  return c;
}

/** Calls `tool` as `agent` and counts the log notifications its client receives. */
async function callCounting(
  agent: string,
  tool: string,
): Promise<{ heard: number; seconds: number; text: string }> {
  const c = await client(agent);
  let heard = 0;
  c.setNotificationHandler(LoggingMessageNotificationSchema, () => {
    heard++;
  });
  const started = Date.now();
  const r = await c.callTool({ name: `h.${tool}`, arguments: {} }, undefined, { timeout: 120_000 });
  const seconds = (Date.now() - started) / 1000;
  await c.close();
  return { heard, seconds, text: (r.content as { text: string }[])[0]?.text ?? '' };
}

async function droppedMetric(): Promise<number> {
  const text = await (
    await fetch(`${gw.url}/metrics`, { headers: { authorization: `Bearer ${OP}` } })
  ).text();
  const m = /^cmcp_refusals_total\{code="UPSTREAM_NOTIFICATIONS_LIMITED"\} (\d+)$/m.exec(text);
  return m ? Number(m[1]) : 0;
}

describe('upstream notification floods', () => {
  it('each client gets at most its bound; the excess is counted and recorded; the gateway stays responsive', async () => {
    const flood = callCounting('alice', 'flood');
    // Another agent's request is answered while the flood runs.
    const ping = await rpc(gw.url, 'carol-token', { jsonrpc: '2.0', id: 1, method: 'ping' });
    expect(ping.status).toBe(200);
    expect(ping.body.result).toEqual({});
    const f = await flood;
    expect(f.text).toBe('done');
    // The burst, plus the sustained rate over the call's time, plus a margin.
    expect(f.heard).toBeGreaterThanOrEqual(LIMITS.upstream_notification_burst);
    expect(f.heard).toBeLessThanOrEqual(
      LIMITS.upstream_notification_burst + LIMITS.upstream_notifications_per_s * (f.seconds + 2),
    );
    const b = await callCounting('bob', 'big');
    expect(b.text).toBe('done');
    const bytesBound =
      LIMITS.upstream_notification_byte_burst + LIMITS.upstream_notification_bytes_per_s * (b.seconds + 2);
    expect(b.heard).toBeGreaterThanOrEqual(1);
    expect(b.heard).toBeLessThanOrEqual(Math.ceil(bytesBound / BIG_BYTES));
    const dropped = FLOOD - f.heard + (BIG - b.heard);
    expect(await droppedMetric()).toBe(dropped);
    // Still answering after the floods.
    expect((await rpc(gw.url, 'carol-token', { jsonrpc: '2.0', id: 2, method: 'ping' })).status).toBe(200);

    // The aggregated refusal record: the first drop of each agent with its detail at once, the
    // rest of the window counted (written when the gateway stops).
    await gw.close();
    const db = new Database(cfg.dbPath, { readonly: true });
    const rows = (
      db
        .prepare(
          `SELECT canonical FROM audit_entries WHERE entry_type = 'request_refused' AND chain_id = 'gateway'`,
        )
        .all() as { canonical: string }[]
    )
      .map((r) => JSON.parse(r.canonical))
      .filter((e) => e.error_code === 'UPSTREAM_NOTIFICATIONS_LIMITED');
    db.close();
    const firsts = rows.filter((e) => e.detail.upstream !== undefined);
    expect(
      firsts.map((e) => [e.agent_id, e.detail.route, e.detail.upstream, e.detail.method, e.detail.reason]),
    ).toEqual([
      ['alice', 'notification', 'h', 'notifications/message', 'rate'],
      ['bob', 'notification', 'h', 'notifications/message', 'bytes'],
    ]);
    expect(rows.reduce((n, e) => n + e.detail.count, 0)).toBe(dropped);
    expect(rows.length).toBeLessThanOrEqual(8); // aggregated: not one entry per dropped notification
    // The gateway chain holding them still verifies.
    const store = openDatabase(cfg.dbPath);
    const bundle = new AuditChain(store).bundle('gateway', null);
    store.close();
    expect(verifyBundle(bundle).checks.filter((c) => c.status === 'fail')).toEqual([]);
  }, 180_000);
});
