/**
 * Group commit (issue 12 item 5; store/sqlite/group-commit.ts): the request paths' writes queued in the
 * same event-loop turn commit in one BEGIN IMMEDIATE transaction. Real SQLite throughout; commits
 * are counted from the WAL file itself (each committed transaction ends in one commit frame), and
 * a failing COMMIT is a real one (a deferred foreign key SQLite checks at COMMIT).
 */
import { mkdtempSync, readFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { verifyBundle } from '@cmcp/verify';
import { GATEWAY_CHAIN_ID } from '@cmcp/verify/formats';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { AuditChain } from '../src/store/sqlite/chain.js';
import {
  type Db,
  groupCommitStats,
  immediateAsync,
  openDatabase,
  openReadOnlyDatabase,
  setGroupCommit,
  writesSettled,
} from '../src/store/sqlite/db.js';
import { MAX_BATCH } from '../src/store/sqlite/group-commit.js';
import { type CountingServer, startCountingServer } from './fixtures/counting-server.js';
import {
  cleanup,
  rpc,
  STORE_WORKER_PROJECT,
  startInProcess,
  type TestConfig,
  writeConfig,
} from './harness/gateway.js';

/**
 * The WAL's salt and its committed transactions since the log last restarted: frames whose salt
 * matches the header's and whose "database size after commit" field is non-zero (SQLite file
 * format §4.1, WAL frame header bytes 4–7).
 */
function walCommits(dbPath: string): { salt: string; commits: number } {
  const wal = readFileSync(`${dbPath}-wal`);
  if (wal.length < 32) return { salt: '', commits: 0 };
  const pageSize = wal.readUInt32BE(8);
  const salt = wal.subarray(16, 24);
  let commits = 0;
  for (let at = 32; at + 24 + pageSize <= wal.length; at += 24 + pageSize) {
    if (!wal.subarray(at + 8, at + 16).equals(salt)) break;
    if (wal.readUInt32BE(at + 4) !== 0) commits++;
  }
  return { salt: salt.toString('hex'), commits };
}

function freshDb(name: string): { db: Db; file: string; dir: string } {
  const dir = mkdtempSync(join(tmpdir(), `cmcp-gc-${name}-`));
  const file = join(dir, 'store.db');
  const db = openDatabase(file, 500);
  db.pragma('wal_autocheckpoint = 0'); // the log keeps every frame for walCommits
  return { db, file, dir };
}

/** The chain verifies: no check of the verify library fails (root and tip are not pinned here). */
const chainOk = (chain: AuditChain, id: string, sessionId: string | null = null) =>
  verifyBundle(chain.bundle(id, sessionId)).checks.filter(
    (c) => c.status !== 'pass' && c.status !== 'not-applicable',
  );

/**
 * A write into an idle store commits at once, alone (store/sqlite/group-commit.ts): `lead` is that
 * write, so that the writes a test queues after it in the same turn are the grouped ones.
 */
const lead = (db: Db) =>
  immediateAsync(db, () =>
    db
      .prepare(
        "INSERT INTO instances VALUES ('lead', 0, 'h', 'now', 0) ON CONFLICT DO UPDATE SET heartbeat_ms = heartbeat_ms + 1",
      )
      .run(),
  );

/** A few event-loop turns without writes: the store is idle again. */
async function idle(): Promise<void> {
  for (let i = 0; i < 3; i++) await new Promise((r) => setImmediate(r));
}

describe('store: writes queued together commit together', () => {
  it('a write into an idle store commits at once, alone; one after it in the same turn waits for the group', async () => {
    const { db, file, dir } = freshDb('idle');
    const chain = new AuditChain(db);
    try {
      const before = walCommits(file).commits;
      const first = immediateAsync(db, () => chain.append('s', { entry_type: 'tool_call', call_id: 'a' }));
      // Already committed before any await: its commit frame is in the WAL.
      expect(walCommits(file).commits - before).toBe(1);
      const second = immediateAsync(db, () => chain.append('s', { entry_type: 'tool_call', call_id: 'b' }));
      expect(walCommits(file).commits - before).toBe(1);
      await Promise.all([first, second]);
      expect(walCommits(file).commits - before).toBe(2);
      expect(groupCommitStats(db)).toEqual({ transactions: 2, writes: 2 });
    } finally {
      db.close();
      cleanup(dir);
    }
  });

  it('writes queued in one turn commit in one transaction, and settle only once it is durable', async () => {
    const { db, file, dir } = freshDb('one');
    const chain = new AuditChain(db);
    const other = openReadOnlyDatabase(file);
    try {
      const before = walCommits(file).commits;
      const seenAtResolve: number[] = [];
      void lead(db);
      const writes = Array.from({ length: 10 }, (_, i) =>
        immediateAsync(db, () => chain.append('s', { entry_type: 'tool_call', call_id: `c${i}` })).then(
          (e) => {
            // Another connection already reads it: the transaction committed before the answer.
            const row = other.prepare('SELECT count(*) AS n FROM audit_entries WHERE entry_hash = ?');
            seenAtResolve.push((row.get(e.entry_hash) as { n: number }).n);
            return e;
          },
        ),
      );
      const entries = await Promise.all(writes);
      expect(walCommits(file).commits - before).toBe(2); // the lead, then the ten together
      expect(seenAtResolve).toEqual(Array(10).fill(1));
      expect(entries.map((e) => e.sequence_number)).toEqual([...Array(10).keys()]);
      expect(entries.map((e) => e.call_id)).toEqual([...Array(10).keys()].map((i) => `c${i}`));
      expect(chainOk(chain, 's')).toEqual([]);
      expect(groupCommitStats(db)).toEqual({ transactions: 2, writes: 11 });
    } finally {
      other.close();
      db.close();
      cleanup(dir);
    }
  });

  it('a write that throws is rolled back alone and rejects alone; the chain stays contiguous', async () => {
    const { db, file, dir } = freshDb('throw');
    const chain = new AuditChain(db);
    try {
      const before = walCommits(file).commits;
      void lead(db);
      const a = immediateAsync(db, () => chain.append('s', { entry_type: 'tool_call', call_id: 'a' }));
      const bad = immediateAsync(db, () => {
        chain.append('s', { entry_type: 'tool_call', call_id: 'bad' });
        throw new Error('this write fails after appending');
      });
      const c = immediateAsync(db, () => chain.append('s', { entry_type: 'tool_call', call_id: 'c' }));
      const [ra, rbad, rc] = await Promise.allSettled([a, bad, c]);
      expect(ra.status).toBe('fulfilled');
      expect(rc.status).toBe('fulfilled');
      expect(rbad.status).toBe('rejected');
      expect((rbad as PromiseRejectedResult).reason.message).toBe('this write fails after appending');
      expect(walCommits(file).commits - before).toBe(2); // the lead, then a and c (bad rolled back)
      expect(chain.entries('s').map((e) => [e.call_id, e.sequence_number])).toEqual([
        ['a', 0],
        ['c', 1],
      ]);
      expect(chainOk(chain, 's')).toEqual([]);
    } finally {
      db.close();
      cleanup(dir);
    }
  });

  it('a COMMIT that fails rejects every write of its batch and leaves none of them', async () => {
    const { db, file, dir } = freshDb('commit');
    const chain = new AuditChain(db);
    try {
      db.exec(`CREATE TABLE parent (id TEXT PRIMARY KEY);
        CREATE TABLE child (pid TEXT REFERENCES parent(id) DEFERRABLE INITIALLY DEFERRED);`);
      await immediateAsync(db, () => chain.append('s', { entry_type: 'session_open' }));
      await idle(); // the lead commits at once
      const before = walCommits(file).commits;
      void lead(db);
      const writes = [
        immediateAsync(db, () => chain.append('s', { entry_type: 'tool_call', call_id: 'x' })),
        // SQLite checks a deferred foreign key at COMMIT: this batch's COMMIT fails.
        immediateAsync(db, () => db.prepare("INSERT INTO child VALUES ('missing')").run()),
        immediateAsync(db, () => chain.append('s', { entry_type: 'tool_call', call_id: 'y' })),
      ];
      const settled = await Promise.allSettled(writes);
      expect(settled.map((s) => s.status)).toEqual(['rejected', 'rejected', 'rejected']);
      for (const s of settled)
        expect((s as PromiseRejectedResult).reason.code).toBe('SQLITE_CONSTRAINT_FOREIGNKEY');
      expect(walCommits(file).commits - before).toBe(1); // the lead alone
      expect(db.inTransaction).toBe(false);
      expect(chain.entries('s').map((e) => e.entry_type)).toEqual(['session_open']);
      expect(db.prepare('SELECT count(*) AS n FROM child').get()).toEqual({ n: 0 });
      // The next batch commits as usual, after the tip that was durable.
      const next = await immediateAsync(db, () =>
        chain.append('s', { entry_type: 'tool_call', call_id: 'z' }),
      );
      expect(next.sequence_number).toBe(1);
      expect(chainOk(chain, 's')).toEqual([]);
    } finally {
      db.close();
      cleanup(dir);
    }
  });

  it(`no transaction carries more than ${MAX_BATCH} writes; they still commit in order`, async () => {
    const { db, file, dir } = freshDb('bound');
    const chain = new AuditChain(db);
    try {
      const before = walCommits(file).commits;
      const n = MAX_BATCH * 2 + 5;
      void lead(db);
      const entries = await Promise.all(
        Array.from({ length: n }, (_, i) =>
          immediateAsync(db, () => chain.append('s', { entry_type: 'tool_call', call_id: `c${i}` })),
        ),
      );
      expect(walCommits(file).commits - before).toBe(4); // the lead, then 64 + 64 + 5
      expect(entries.map((e) => e.sequence_number)).toEqual([...Array(n).keys()]);
      expect(chainOk(chain, 's')).toEqual([]);
    } finally {
      db.close();
      cleanup(dir);
    }
  });

  it('writesSettled waits for writes nobody awaits, so closing the connection loses none', async () => {
    const { db, file, dir } = freshDb('settle');
    const chain = new AuditChain(db);
    try {
      void lead(db);
      void immediateAsync(db, () => chain.append('s', { entry_type: 'request_refused' }));
      await writesSettled(db);
      db.close();
      const again = openReadOnlyDatabase(file);
      expect(new AuditChain(again).entries('s').map((e) => e.entry_type)).toEqual(['request_refused']);
      again.close();
    } finally {
      if (db.open) db.close();
      cleanup(dir);
    }
  });

  it('with group commit off each write is its own transaction', async () => {
    const { db, file, dir } = freshDb('off');
    setGroupCommit(db, false);
    const chain = new AuditChain(db);
    try {
      const before = walCommits(file).commits;
      await Promise.all(
        Array.from({ length: 10 }, (_, i) =>
          immediateAsync(db, () => chain.append('s', { entry_type: 'tool_call', call_id: `c${i}` })),
        ),
      );
      expect(walCommits(file).commits - before).toBe(10);
      expect(groupCommitStats(db)).toBeNull();
    } finally {
      db.close();
      cleanup(dir);
    }
  });

  it('writes queued while another connection holds the lock wait, then commit together', async () => {
    const { db, file, dir } = freshDb('busy');
    const holder = openDatabase(file, 500);
    const chain = new AuditChain(db);
    try {
      holder.exec('BEGIN IMMEDIATE');
      const writes = Array.from({ length: 5 }, (_, i) =>
        immediateAsync(db, () => chain.append('s', { entry_type: 'tool_call', call_id: `c${i}` })),
      );
      await new Promise((r) => setTimeout(r, 60));
      holder.exec('COMMIT');
      const before = walCommits(file).commits;
      const entries = await Promise.all(writes);
      expect(walCommits(file).commits - before).toBe(1);
      expect(entries.map((e) => e.sequence_number)).toEqual([0, 1, 2, 3, 4]);
      // Held past the busy timeout (500 ms): every queued write fails with SQLITE_BUSY, none written.
      holder.exec('BEGIN IMMEDIATE');
      const late = await Promise.allSettled(
        [0, 1].map(() => immediateAsync(db, () => chain.append('s', { entry_type: 'tool_call' }))),
      );
      holder.exec('COMMIT');
      expect(late.map((s) => (s as PromiseRejectedResult).reason?.code)).toEqual([
        'SQLITE_BUSY',
        'SQLITE_BUSY',
      ]);
      expect(chain.entries('s')).toHaveLength(5);
      expect(db.inTransaction).toBe(false);
    } finally {
      if (holder.inTransaction) holder.exec('ROLLBACK');
      holder.close();
      db.close();
      cleanup(dir);
    }
  });
});

describe('gateway: concurrent tools/calls share commits', () => {
  let up: CountingServer;
  let cfg: TestConfig;
  beforeAll(async () => {
    up = await startCountingServer();
    cfg = await writeConfig({
      upstreams: [{ name: 'c', transport: 'http', url: up.url }],
      sessions: { default_max_calls: 100_000 },
      extra: {
        limits: { agent_requests_per_s: 100_000, agent_request_burst: 100_000, agent_max_in_flight: 10_000 },
      },
    });
  });
  afterAll(async () => {
    await up?.close();
    if (cfg) cleanup(cfg.dir);
  });

  const call = (url: string, id: number, tool: string, args: Record<string, unknown>, executionId?: string) =>
    rpc(url, 'alice-token', {
      jsonrpc: '2.0',
      id,
      method: 'tools/call',
      params: {
        name: tool,
        arguments: args,
        ...(executionId ? { _cmcp: { execution_id: executionId } } : {}),
      },
    });

  /**
   * `n` concurrent calls (every other one with an execution_id) against a gateway of its own
   * (in this process, on a real SQLite file), with group commit on or off.
   */
  async function loadGateway(groupCommit: 'on' | 'off', n: number) {
    const child = await writeConfig({
      upstreams: [{ name: 'c', transport: 'http', url: up.url }],
      // The longest checkpoint window: the burst's commits are the call path's own, not a signed
      // checkpoint's row every 25 ms (a writer of its own, session/checkpoints.ts).
      sessions: { default_max_calls: 100_000, checkpoint_window_ms: 10_000 },
      extra: { limits: cfg.raw.limits },
    });
    // The WAL's frames are counted: no checkpoint thread restarts the log meanwhile (src/store/sqlite/wal.ts).
    const gw = await startInProcess(child, { groupCommit: groupCommit === 'on', checkpointIntervalMs: 0 });
    // Nor does SQLite's own auto-checkpoint: each append also writes its tree's pages, and past
    // 1000 pages the log would restart mid-burst.
    gw.db.pragma('wal_autocheckpoint = 0');
    try {
      await call(gw.url, 0, 'c.record', {}); // opens the default session
      const wal0 = walCommits(child.dbPath);
      const answers = await Promise.all(
        Array.from({ length: n }, (_, i) =>
          call(gw.url, i + 1, 'c.record', { a: i }, i % 2 ? `gc-${groupCommit}-${i}` : undefined),
        ),
      );
      const wal1 = walCommits(child.dbPath);
      expect(wal1.salt).toBe(wal0.salt); // the log did not restart in between
      return { child, answers, commits: wal1.commits - wal0.commits };
    } finally {
      await gw.close();
    }
  }

  it('64 concurrent calls through the gateway commit in fewer transactions than calls (2 each with it off)', async () => {
    const n = 64;
    const off = await loadGateway('off', n);
    const on = await loadGateway('on', n);
    try {
      expect(off.commits).toBeGreaterThanOrEqual(2 * n);
      // In the store worker (vitest project store-worker) the writes reach the group commit at
      // the pace the loop sends them and fewer share a transaction (docs/operations.md, "The
      // store worker"): there grouping must still save commits, not halve them.
      expect(on.commits).toBeLessThan(STORE_WORKER_PROJECT ? 2 * n : n);
      const db = openReadOnlyDatabase(on.child.dbPath);
      const chain = new AuditChain(db);
      try {
        const hashes = on.answers.map((a) => a.body.result?._meta['dev.cmcp/evidence'].entry_hash as string);
        expect(hashes.every((h) => /^[0-9a-f]{64}$/.test(h ?? ''))).toBe(true);
        const sid = on.answers[0]?.body.result._meta['dev.cmcp/evidence'].session_id as string;
        const terminal = chain.entries(sid).filter((e) => e.entry_type === 'tool_call');
        // One terminal entry per call (and the first call's), each the one its answer named.
        expect(terminal).toHaveLength(n + 1);
        expect(new Set(hashes).size).toBe(n);
        for (const h of hashes) expect(terminal.some((e) => e.entry_hash === h)).toBe(true);
        expect(chainOk(chain, sid, sid)).toEqual([]);
        expect(db.prepare('SELECT count(*) AS n FROM call_attempts').get()).toEqual({ n: 0 });
        expect(db.prepare("SELECT count(*) AS n FROM executions WHERE state != 'completed'").get()).toEqual({
          n: 0,
        });
      } finally {
        db.close();
      }
    } finally {
      cleanup(off.child.dir);
      cleanup(on.child.dir);
    }
  });

  it('a batch whose COMMIT fails answers none of its calls as done; each still ends in one terminal entry', async () => {
    const gw = await startInProcess(cfg);
    const marker = `poison-${Date.now()}`;
    try {
      await call(gw.url, 0, 'c.record', {});
      // A real COMMIT failure: the poisoned call's terminal entry fires a trigger that leaves a
      // deferred foreign key unsatisfied, so the COMMIT of whatever batch carries it fails.
      gw.db.exec(`CREATE TABLE poison_parent (id TEXT PRIMARY KEY);
        CREATE TABLE poison_child (pid TEXT REFERENCES poison_parent(id) DEFERRABLE INITIALLY DEFERRED);
        CREATE TRIGGER poison AFTER INSERT ON audit_entries
          WHEN NEW.entry_type = 'tool_call' AND NEW.execution_id = '${marker}'
          BEGIN INSERT INTO poison_child VALUES ('missing'); END;`);
      const held = up.invocations.length;
      const n = 16;
      const pending = Array.from({ length: n }, (_, i) =>
        call(gw.url, i + 1, 'c.hold', { marker: `${marker}-${i}` }, i === 0 ? marker : `${marker}-${i}`),
      );
      // Every call is at the upstream (its attempt is durable): release them together.
      while (up.invocations.length < held + n) await new Promise((r) => setTimeout(r, 10));
      up.release();
      const answers = await Promise.all(pending);
      gw.db.exec('DROP TRIGGER poison');
      const ok = answers.filter((a) => a.body.result);
      const failed = answers.filter((a) => !a.body.result);
      expect(answers[0]?.body.error?.data?.error_code).toBe('AUDIT_WRITE_FAILED');
      for (const f of failed) {
        expect(f.body.error.data).toMatchObject({
          error_code: 'AUDIT_WRITE_FAILED',
          execution_state: 'in_flight',
        });
        const id = f.body.error.data.call_id as string;
        // Nothing of a failed batch is on the record: no terminal entry, the attempt still open.
        expect(
          gw.db.prepare('SELECT count(*) AS n FROM audit_entries WHERE canonical LIKE ?').get(`%${id}%`),
        ).toEqual({ n: 0 });
        expect(gw.db.prepare('SELECT count(*) AS n FROM call_attempts WHERE call_id = ?').get(id)).toEqual({
          n: 1,
        });
      }
      for (const a of ok) {
        const h = a.body.result._meta['dev.cmcp/evidence'].entry_hash as string;
        expect(gw.db.prepare('SELECT count(*) AS n FROM audit_entries WHERE entry_hash = ?').get(h)).toEqual({
          n: 1,
        });
      }
      for (const { chain_id } of gw.db
        .prepare<[], { chain_id: string }>('SELECT DISTINCT chain_id FROM audit_entries')
        .all())
        expect(chainOk(gw.chain, chain_id, chain_id === GATEWAY_CHAIN_ID ? null : chain_id)).toEqual([]);
    } finally {
      await gw.close();
    }
    // The shutdown (or the next start's recovery) gives every failed call its one terminal entry.
    const again = await startInProcess(cfg);
    try {
      const rows = again.db
        .prepare<[string], { execution_id: string; n: number }>(
          "SELECT execution_id, count(*) AS n FROM audit_entries WHERE entry_type = 'tool_call' AND execution_id LIKE ? GROUP BY execution_id",
        )
        .all(`${marker}%`);
      expect(rows).toHaveLength(16);
      for (const r of rows) expect(r.n).toBe(1);
      expect(again.db.prepare('SELECT count(*) AS n FROM call_attempts').get()).toEqual({ n: 0 });
    } finally {
      await again.close();
    }
  });
});
