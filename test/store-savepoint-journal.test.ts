/**
 * The group commit runs each write in its own SAVEPOINT (store/sqlite/group-commit.ts), and SQLite keeps
 * the pages a savepoint changes in a statement journal to roll it back alone. openDatabase puts
 * that journal in memory (`temp_store = MEMORY`, store/sqlite/db.ts) instead of letting it spill to a
 * temporary file; a write that changes far more than the 64 KiB spill threshold and then throws
 * is still rolled back alone, and the writes around it in the same transaction commit.
 */
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { groupCommitStats, immediateAsync, openDatabase } from '../src/store/sqlite/db.js';

const ROWS = 40;
const ROW_BYTES = 8000; // 40 rows × 8 KB: about 20 pages of 16 KiB, five times the spill threshold

describe('store: savepoint journals', () => {
  it('are kept in memory, and a write past the spill threshold that throws rolls back alone', async () => {
    const dir = mkdtempSync(join(tmpdir(), 'cmcp-sp-'));
    const db = openDatabase(join(dir, 'store.db'), 500);
    try {
      expect(db.pragma('temp_store', { simple: true })).toBe(2); // MEMORY
      db.exec('CREATE TABLE wide (k INTEGER PRIMARY KEY, v BLOB NOT NULL)');
      const insert = db.prepare('INSERT INTO wide VALUES (?, ?)');
      for (let k = 0; k < ROWS; k++) insert.run(k, Buffer.alloc(ROW_BYTES, 0));
      const fill = db.prepare('UPDATE wide SET v = ?');
      const tag = (b: number) => () => fill.run(Buffer.alloc(ROW_BYTES, b)).changes;
      // An idle store commits a lone write at once; the three after it share one transaction.
      await immediateAsync(db, () => null);
      const before = groupCommitStats(db)?.transactions ?? 0;
      const a = immediateAsync(db, tag(1));
      const bad = immediateAsync(db, () => {
        tag(2)();
        throw new Error('fails after rewriting every row');
      });
      const c = immediateAsync(db, () => {
        const seen = db.prepare('SELECT count(*) AS n FROM wide WHERE v = ?').get(Buffer.alloc(ROW_BYTES, 1));
        tag(3)();
        return (seen as { n: number }).n;
      });
      const [ra, rbad, rc] = await Promise.allSettled([a, bad, c]);
      expect(ra).toEqual({ status: 'fulfilled', value: ROWS });
      expect(rbad.status).toBe('rejected');
      // c ran after bad's rollback: it saw a's rows, not bad's.
      expect(rc).toEqual({ status: 'fulfilled', value: ROWS });
      expect((groupCommitStats(db)?.transactions ?? 0) - before).toBe(1);
      const rows = db.prepare('SELECT v FROM wide').all() as { v: Buffer }[];
      expect(rows).toHaveLength(ROWS);
      for (const r of rows) expect(r.v.equals(Buffer.alloc(ROW_BYTES, 3))).toBe(true);
    } finally {
      db.close();
      rmSync(dir, { recursive: true, force: true });
    }
  });
});
