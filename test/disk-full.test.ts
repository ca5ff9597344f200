/**
 * A gateway whose database sits on a full filesystem (a real tmpfs filled with ballast, no
 * mocks): /readyz says not ready with the database's reason while a write cannot commit, and
 * ready again once space is freed; a call whose terminal write failed is recorded by the
 * gateway itself once writes succeed again, and session open/close answer a stable 503.
 */
import { join } from 'node:path';
import Database from 'better-sqlite3';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { Gateway } from '../src/gateway/lifecycle/start.js';
import { type CountingServer, startCountingServer } from './fixtures/counting-server.js';
import { rest, rpc, startInProcess, type TestConfig, writeConfig } from './harness/gateway.js';
import { mountSmallFs, type SmallFs, smallFsUnavailable } from './harness/small-fs.js';

const unavailable = smallFsUnavailable();
if (unavailable) console.warn(`disk-full tests skipped: ${unavailable}`);

/** /readyz answers the same report for 1 s (src/gateway/health/readiness.ts): wait past it after a change. */
const nextReport = () => new Promise((r) => setTimeout(r, 1100));

async function readyz(url: string) {
  const r = await fetch(`${url}/readyz`);
  // biome-ignore lint/suspicious/noExplicitAny: a JSON body asserted member by member
  return { status: r.status, body: (await r.json()) as any };
}

describe.skipIf(unavailable !== null)('a full disk', () => {
  let fs: SmallFs;
  let cfg: TestConfig;
  let gw: Gateway;
  beforeAll(async () => {
    fs = mountSmallFs(16 * 1024 * 1024);
    cfg = await writeConfig({ dir: fs.dir });
    gw = await startInProcess(cfg);
  });
  afterAll(async () => {
    try {
      fs?.unfill();
    } catch {}
    await gw?.close();
    fs?.close(); // removes the config and database with the filesystem
  });

  it('makes /readyz not ready while a write cannot commit, and ready once space is freed', async () => {
    expect((await readyz(gw.url)).status).toBe(200);
    fs.fill();
    await nextReport();
    const full = await readyz(gw.url);
    expect(full.status).toBe(503);
    expect(full.body.status).toBe('not_ready');
    expect(full.body.checks.database).toMatch(/^(ENOSPC|SQLITE_FULL|SQLITE_IOERR)/);
    fs.unfill();
    await nextReport();
    const freed = await readyz(gw.url);
    expect(freed.body.checks.database).toBeNull();
    expect(freed.status).toBe(200);
  });
});

describe.skipIf(unavailable !== null)('after a full disk, the gateway heals', () => {
  let fs: SmallFs;
  let up: CountingServer;
  let gw: Gateway;
  beforeAll(async () => {
    fs = mountSmallFs(16 * 1024 * 1024);
    up = await startCountingServer();
    const cfg = await writeConfig({
      dir: fs.dir,
      upstreams: [{ name: 'c', transport: 'http', url: up.url }],
    });
    // SQLite's own checkpoints only (at 1000 pages, past this filesystem's size): every commit
    // appends to the WAL, so none can reuse frames of a checkpointed log while the disk is full.
    gw = await startInProcess(cfg, { checkpointIntervalMs: 0 });
  });
  afterAll(async () => {
    try {
      fs?.unfill();
    } catch {}
    await gw?.close();
    await up?.close();
    fs?.close();
  });

  it('records a call whose terminal write failed once writes succeed, with the outcome it knows', async () => {
    const sid = (await rest(gw.url, 'alice-token', 'POST', '/sessions', {})).body.session_id as string;
    const callHold = (id: number) =>
      rpc(gw.url, 'alice-token', {
        jsonrpc: '2.0',
        id,
        method: 'tools/call',
        params: {
          name: 'c.hold',
          arguments: { ms: 60_000 },
          _cmcp: { session_id: sid, execution_id: 'x-full' },
        },
      });
    const held = callHold(1);
    // The attempt and reservation are durable once the upstream sees the call.
    for (let i = 0; i < 200 && up.invocations.length === 0; i++) await new Promise((r) => setTimeout(r, 25));
    expect(up.invocations).toHaveLength(1);
    fs.fill();
    up.release();
    const failed = await held;
    expect(failed.body.error.data.error_code).toBe('AUDIT_WRITE_FAILED');
    // While the disk is full the call stays in flight: a retry is not run again (its refusal
    // cannot be recorded either).
    const retry = await callHold(2);
    expect(retry.body.error.data.error_code).toBe('AUDIT_WRITE_FAILED');
    expect(up.invocations).toHaveLength(1);

    // Opening and closing a session answer a stable code with 503, not 500 INTERNAL_ERROR.
    const open = await rest(gw.url, 'alice-token', 'POST', '/sessions', {});
    expect(open.status).toBe(503);
    expect(open.body.error.error_code).toBe('STORE_WRITE_FAILED');
    const close = await rest(gw.url, 'alice-token', 'POST', `/sessions/${sid}/close`);
    expect(close.status).toBe(503);
    expect(close.body.error.error_code).toBe('STORE_WRITE_FAILED');

    // A call that would open the agent's default session: a stable code, nothing forwarded.
    const noSession = await rpc(gw.url, 'bob-token', {
      jsonrpc: '2.0',
      id: 4,
      method: 'tools/call',
      params: { name: 'c.record', arguments: {} },
    });
    expect(noSession.body.error.data.error_code).toBe('AUDIT_WRITE_FAILED');
    expect(up.invocations).toHaveLength(1);

    fs.unfill();
    // The gateway records the call itself once a write succeeds (bounded wait).
    let state = '';
    for (let i = 0; i < 80 && state !== 'completed'; i++) {
      await new Promise((r) => setTimeout(r, 250));
      state = (await rest(gw.url, 'alice-token', 'GET', '/executions/x-full')).body?.state ?? '';
    }
    expect(state).toBe('completed');
    const again = await callHold(3);
    expect(again.body.error?.data.error_code).not.toBe('EXECUTION_IN_FLIGHT');
    expect(up.invocations).toHaveLength(1);
    const claim = await rest(gw.url, 'alice-token', 'POST', `/sessions/${sid}/close`);
    expect(claim.status).toBe(200);
    expect(
      claim.body.transcript.filter((e: { tool_name: string }) => e.tool_name === 'c.hold'),
    ).toMatchObject([
      { disposition: 'completed' },
      { disposition: 'refused', error_code: 'EXECUTION_REPLAY_REFUSED' },
    ]);
    // Exactly one terminal entry for the call, saying it was recorded late.
    const db = new Database(join(fs.dir, 'cmcp.db'), { readonly: true });
    try {
      const callId = failed.body.error.data.call_id as string;
      const terminals = db
        .prepare<[string], { canonical: string }>(
          "SELECT canonical FROM audit_entries WHERE entry_type = 'tool_call' AND json_extract(canonical, '$.call_id') = ?",
        )
        .all(callId)
        .map((r) => JSON.parse(r.canonical));
      expect(terminals).toHaveLength(1);
      expect(terminals[0]).toMatchObject({
        disposition: 'completed',
        session_id: sid,
        detail: { recorded_late: 'terminal_write_failed' },
      });
    } finally {
      db.close();
    }
  }, 60_000);
});
