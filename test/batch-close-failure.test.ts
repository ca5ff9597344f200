/**
 * A batch close (a policy reload, an agent block, shutdown: SessionService.closeOpenInBatches)
 * whose close of a session fails — here the database's write lock held by another connection
 * past the busy timeout, every try — leaves that session unusable (SESSION_CLOSED), not open
 * for calls under a policy its claim would not name; once the lock is free, closing it issues
 * its claim. Real SQLite, a second real connection, an in-process gateway.
 */
import Database from 'better-sqlite3';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { Gateway } from '../src/gateway/lifecycle/start.js';
import { cleanup, rest, startInProcess, type TestConfig, writeConfig } from './harness/gateway.js';

let cfg: TestConfig;
let gw: Gateway;

beforeAll(async () => {
  cfg = await writeConfig();
  gw = await startInProcess(cfg);
});

afterAll(async () => {
  await gw?.close();
  cleanup(cfg.dir);
});

describe('a batch close that cannot close a session', () => {
  it('leaves it unusable; a later close issues its claim', async () => {
    const opened = await rest(gw.url, 'alice-token', 'POST', '/sessions', {});
    expect(opened.status).toBe(201);
    const sid = opened.body.session_id as string;
    await expect(gw.sessions.resolve('alice', sid)).resolves.toMatchObject({ session_id: sid });

    const holder = new Database(cfg.dbPath);
    holder.exec('BEGIN IMMEDIATE'); // every try of the close waits out the 5 s busy timeout
    let closed: Awaited<ReturnType<Gateway['sessions']['closeOpenInBatches']>>;
    try {
      closed = await gw.sessions.closeOpenInBatches('alice', 'policy_reload');
    } finally {
      holder.exec('ROLLBACK');
      holder.close();
    }
    expect(closed.map((c) => c.session_id)).not.toContain(sid);
    await expect(gw.sessions.resolve('alice', sid)).rejects.toMatchObject({ code: 'SESSION_CLOSED' });

    const claim = await gw.sessions.closeAwaited('alice', sid);
    expect(claim.session_id).toBe(sid);
    const stored = await rest(gw.url, 'alice-token', 'GET', `/sessions/${sid}/claim`);
    expect(stored.status).toBe(200);
    expect(stored.body.session_id).toBe(sid);
  }, 60_000);
});
