/**
 * Issue 11 item 7: the WAL's pages are checkpointed by a worker thread (src/store/sqlite/wal.ts), not
 * only in the gateway connection's commits on the event loop. With SQLite's own checkpoint off
 * on the writing connection, the same appends let the WAL grow far past the journal size limit
 * without the worker and keep it under the limit with it: the worker's checkpoints copied the
 * pages, and the log restarted after them. Real SQLite files, a real worker thread.
 */
import { existsSync, mkdtempSync, rmSync, statSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { setTimeout } from 'node:timers/promises';
import { afterAll, describe, expect, it } from 'vitest';
import { AuditChain } from '../src/store/sqlite/chain.js';
import { openDatabase } from '../src/store/sqlite/db.js';
import { JOURNAL_SIZE_LIMIT_BYTES, startCheckpoints } from '../src/store/sqlite/wal.js';
import { cleanup, rest, startInProcess, writeConfig } from './harness/gateway.js';

const dirs: string[] = [];
afterAll(() => {
  for (const d of dirs) rmSync(d, { recursive: true, force: true });
});

const SESSION = '00000000-0000-4000-8000-000000000002';
const detail = { note: 'x'.repeat(2000) };

/** Appends `n` ~2.5 KB entries, one commit each, pausing 40 ms every 25; returns the WAL's largest size. */
async function appendAll(withWorker: boolean, n: number): Promise<number> {
  const dir = mkdtempSync(join(tmpdir(), 'cmcp-wal-worker-'));
  dirs.push(dir);
  const path = join(dir, 'cmcp.db');
  const db = openDatabase(path);
  const checkpoints = startCheckpoints(db, withWorker ? 20 : 0);
  // Only the worker checkpoints (the connection's own checkpoint is what it relieves).
  db.pragma('wal_autocheckpoint = 0');
  const chain = new AuditChain(db);
  let maxWal = 0;
  try {
    for (let i = 0; i < n; i++) {
      chain.append(SESSION, { entry_type: 'tool_call', session_id: SESSION, call_id: `c${i}`, detail });
      if (i % 25 === 0) {
        maxWal = Math.max(maxWal, statSync(`${path}-wal`).size);
        await setTimeout(40);
      }
    }
    expect(chain.entries(SESSION)).toHaveLength(n);
    return Math.max(maxWal, statSync(`${path}-wal`).size);
  } finally {
    await checkpoints.stop();
    db.close();
  }
}

describe('checkpoints in a worker thread', () => {
  it('keep the WAL under the journal size limit when the writing connection never checkpoints', async () => {
    const n = 3000;
    const alone = await appendAll(false, n);
    const worker = await appendAll(true, n);
    console.log(`largest WAL over ${n} appends: ${alone} bytes without the worker, ${worker} with it`);
    expect(alone).toBeGreaterThan(2 * JOURNAL_SIZE_LIMIT_BYTES);
    expect(worker).toBeLessThan(JOURNAL_SIZE_LIMIT_BYTES);
  }, 120_000);
});

describe('stopping the checkpoint thread', () => {
  it('resolves once its connection is closed: the next close is the last and removes the WAL', async () => {
    const dir = mkdtempSync(join(tmpdir(), 'cmcp-wal-stop-'));
    dirs.push(dir);
    const path = join(dir, 'cmcp.db');
    const db = openDatabase(path);
    const checkpoints = startCheckpoints(db, 20);
    new AuditChain(db).append(SESSION, {
      entry_type: 'session_open',
      session_id: SESSION,
      agent_id: 'a',
      detail,
    });
    await setTimeout(100); // the thread has opened its connection and checkpointed
    await checkpoints.stop();
    db.close();
    expect(existsSync(`${path}-wal`)).toBe(false);
  });
});

describe('closing a gateway', () => {
  it('closes the checkpoint thread before its own connection: the WAL is gone once close resolves', async () => {
    const cfg = await writeConfig();
    try {
      const gw = await startInProcess(cfg);
      const opened = await rest(gw.url, 'alice-token', 'POST', '/sessions', {});
      expect(opened.status).toBe(201);
      expect(existsSync(`${cfg.dbPath}-wal`)).toBe(true);
      await gw.close();
      // The last connection's close checkpoints and removes the WAL: that must be the gateway's
      // own, inside close, not the checkpoint thread's some time after it (a reader of the file
      // after close saw the WAL vanish under it).
      expect(existsSync(`${cfg.dbPath}-wal`)).toBe(false);
    } finally {
      cleanup(cfg.dir);
    }
  });
});
