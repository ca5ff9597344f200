/**
 * Requests refused while the gateway drains at shutdown (GATEWAY_SHUTTING_DOWN) are on the
 * record as aggregated `request_refused` entries in the gateway chain, as unauthenticated
 * requests are: the route pattern only, no agent (the gate runs before authentication), the
 * window's count written when the gateway stops. A real in-process gateway, a real upstream
 * holding a call so the drain lasts, real SQLite.
 */
import Database from 'better-sqlite3';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { Gateway } from '../src/gateway/lifecycle/start.js';
import { type CountingServer, startCountingServer } from './fixtures/counting-server.js';
import { cleanup, rest, rpc, startInProcess, type TestConfig, writeConfig } from './harness/gateway.js';

let up: CountingServer;
let cfg: TestConfig;
let gw: Gateway;

beforeAll(async () => {
  up = await startCountingServer();
  cfg = await writeConfig({ upstreams: [{ name: 'c', transport: 'http', url: up.url }] });
  gw = await startInProcess(cfg);
}, 60_000);
afterAll(async () => {
  up?.release();
  await up?.close();
  if (cfg) cleanup(cfg.dir);
});

describe('refused while shutting down', () => {
  it('is recorded, aggregated, with the route pattern and the count', async () => {
    const s = (await rest(gw.url, 'alice-token', 'POST', '/sessions', {})).body;
    const held = rpc(gw.url, 'alice-token', {
      jsonrpc: '2.0',
      id: 1,
      method: 'tools/call',
      params: { name: 'c.hold', arguments: { ms: 20_000 }, _cmcp: { session_id: s.session_id } },
    });
    for (let i = 0; i < 200 && up.invocations.length === 0; i++) await new Promise((r) => setTimeout(r, 25));
    expect(up.invocations).toHaveLength(1);
    const stopping = gw.shutdown(10_000);
    // Three refusals while the held call keeps the drain open.
    const answers = [
      await rest(gw.url, 'alice-token', 'POST', '/sessions', {}),
      await rest(gw.url, null, 'GET', `/sessions/${s.session_id}/claim`),
      await rest(gw.url, 'alice-token', 'POST', '/sessions', {}),
    ];
    for (const a of answers) {
      expect(a.status).toBe(503);
      expect(a.body.error.error_code).toBe('GATEWAY_SHUTTING_DOWN');
    }
    up.release();
    await held;
    await stopping;

    const db = new Database(cfg.dbPath, { readonly: true });
    const rows = db
      .prepare<[], { canonical: string }>(
        "SELECT canonical FROM audit_entries WHERE entry_type = 'request_refused' AND json_extract(canonical, '$.error_code') = 'GATEWAY_SHUTTING_DOWN'",
      )
      .all()
      .map((r) => JSON.parse(r.canonical));
    db.close();
    expect(rows.length).toBeGreaterThanOrEqual(1);
    expect(rows.every((r) => r.agent_id === null)).toBe(true);
    expect(rows.reduce((n, r) => n + r.detail.count, 0)).toBe(3);
    const routes = new Set(rows.flatMap((r) => r.detail.routes ?? [r.detail.route]));
    expect(routes).toEqual(new Set(['POST /sessions', 'GET /sessions/:id/claim']));
    expect(JSON.stringify(rows)).not.toContain(s.session_id);
  }, 60_000);
});
