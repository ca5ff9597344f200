/**
 * A database whose write lock another process holds (issue 11 item 7): the request paths wait
 * for it by awaiting (store/sqlite/db.ts immediateAsync), so the gateway keeps answering meanwhile;
 * a lock held past the busy timeout fails a call before its attempt as it always did
 * (AUDIT_WRITE_FAILED); a terminal entry meeting it is retried (test/busy-wait-terminal.test.ts).
 */
import { once } from 'node:events';
import { mkdtempSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { AuditChain } from '../src/store/sqlite/chain.js';
import { immediate, immediateAsync, openDatabase, openReadOnlyDatabase } from '../src/store/sqlite/db.js';
import { type CountingServer, startCountingServer } from './fixtures/counting-server.js';
import { cleanup, rest, rpc, startInProcess, type TestConfig, writeConfig } from './harness/gateway.js';
import { holdLock } from './harness/lock-holder.js';

describe('store: awaiting the write lock', () => {
  it('immediateAsync lets the event loop run while another connection holds the lock, then commits once', async () => {
    const dir = mkdtempSync(join(tmpdir(), 'cmcp-busy-'));
    const file = join(dir, 'store.db');
    const a = openDatabase(file, 2000);
    const b = openDatabase(file, 2000);
    const events: string[] = [];
    try {
      a.exec('BEGIN IMMEDIATE');
      const write = immediateAsync(b, () =>
        new AuditChain(b).append('s', { entry_type: 'session_open' }),
      ).then(() => events.push('written'));
      await new Promise((r) => setTimeout(r, 50)); // a timer fires while the writer waits
      events.push('timer');
      a.exec('COMMIT');
      events.push('released');
      await write;
      expect(events).toEqual(['timer', 'released', 'written']);
      expect(new AuditChain(a).entries('s')).toHaveLength(1);
    } finally {
      if (a.inTransaction) a.exec('ROLLBACK');
      a.close();
      b.close();
      cleanup(dir);
    }
  });

  it('past the busy timeout it fails with the SQLITE_BUSY the blocking path throws, leaving nothing', async () => {
    const dir = mkdtempSync(join(tmpdir(), 'cmcp-busy2-'));
    const file = join(dir, 'store.db');
    const a = openDatabase(file, 150);
    const b = openDatabase(file, 150);
    try {
      a.exec('BEGIN IMMEDIATE');
      const chain = new AuditChain(b);
      const waited = await immediateAsync(b, () => chain.append('s', { entry_type: 'session_open' })).catch(
        (e) => e,
      );
      let blocking: unknown;
      try {
        immediate(b, () => chain.append('s', { entry_type: 'session_open' }));
      } catch (e) {
        blocking = e;
      }
      expect((waited as { code?: string }).code).toBe('SQLITE_BUSY');
      expect((blocking as { code?: string }).code).toBe('SQLITE_BUSY');
      a.exec('COMMIT');
      expect(chain.entries('s')).toEqual([]);
      expect(b.inTransaction).toBe(false);
    } finally {
      if (a.inTransaction) a.exec('ROLLBACK');
      a.close();
      b.close();
      cleanup(dir);
    }
  });
});

describe('gateway: a lock held by another process', () => {
  let up: CountingServer;
  let cfg: TestConfig;
  beforeAll(async () => {
    up = await startCountingServer();
    cfg = await writeConfig({ upstreams: [{ name: 'c', transport: 'http', url: up.url }] });
  });
  afterAll(async () => {
    await up?.close();
    if (cfg) cleanup(cfg.dir);
  });

  const call = (url: string) =>
    rpc(url, 'alice-token', {
      jsonrpc: '2.0',
      id: 1,
      method: 'tools/call',
      params: { name: 'c.record', arguments: {} },
    });

  it('a probe is answered while a tools/call waits; the call completes after release with its terminal entry', async () => {
    const gw = await startInProcess(cfg);
    try {
      const first = await call(gw.url); // opens the default session
      const sid = first.body.result._meta['dev.cmcp/evidence'].session_id as string;
      const invocations = up.invocations.length;
      const lock = holdLock(cfg.dbPath, 1000);
      await lock.held;
      const events: string[] = [];
      lock.released.then(() => events.push('released'));
      const pending = call(gw.url).then((r) => {
        events.push('call');
        return r;
      });
      const probe = await rest(gw.url, null, 'GET', '/healthz');
      events.push('probe');
      expect(probe.status).toBe(200);
      const r = await pending;
      expect(events).toEqual(['probe', 'released', 'call']);
      const evidence = r.body.result._meta['dev.cmcp/evidence'];
      expect(evidence.session_id).toBe(sid);
      expect(up.invocations.length).toBe(invocations + 1);
      const terminal = gw.chain.entries(sid).filter((e) => e.entry_type === 'tool_call');
      expect(terminal.map((e) => e.entry_hash)).toContain(evidence.entry_hash);
      expect(terminal.at(-1)?.disposition).toBe('completed');
    } finally {
      await gw.close();
    }
  });

  it('a lock held past the busy timeout fails the call with AUDIT_WRITE_FAILED, upstream not invoked', async () => {
    const gw = await startInProcess(cfg);
    try {
      await call(gw.url);
      const invocations = up.invocations.length;
      const lock = holdLock(cfg.dbPath, 30_000);
      await lock.held;
      const events: string[] = [];
      const pending = call(gw.url).then((r) => {
        events.push('call');
        return r;
      });
      const probe = await rest(gw.url, null, 'GET', '/healthz');
      events.push('probe');
      expect(probe.status).toBe(200);
      const r = await pending;
      lock.proc.stdin?.write('go\n');
      await lock.released;
      await once(lock.proc, 'exit').catch(() => undefined);
      expect(events).toEqual(['probe', 'call']);
      expect(r.body.error.data.error_code).toBe('AUDIT_WRITE_FAILED');
      expect(up.invocations.length).toBe(invocations);
      // Nothing half-written: no attempt left, and the gateway writes again once the lock is free.
      const left = openReadOnlyDatabase(cfg.dbPath);
      expect(left.prepare('SELECT count(*) AS n FROM call_attempts').get()).toEqual({ n: 0 });
      left.close();
      const after = await call(gw.url);
      expect(after.body.result._meta['dev.cmcp/evidence'].entry_hash).toMatch(/^[0-9a-f]{64}$/);
    } finally {
      await gw.close();
    }
  }, 30_000);
});
