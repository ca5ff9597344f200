/**
 * Issue 11 item 7: bounded storage, on real SQLite files. The WAL stays under its bound while a
 * second connection reads throughout in short transactions (as the paged export does), where
 * one long read transaction lets it grow without bound; an entry costs about its canonical
 * text on disk (it cost ~4 KB when each row spilled to an overflow page); a database made with
 * the old layout is migrated with its chains intact; the audit route streams a bundle that
 * verifies. Sizes and timings for 10,000 entries are `bench/storage.ts`.
 */
import { mkdtempSync, rmSync, statSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { verifyBundle } from '@cmcp/verify';
import Database from 'better-sqlite3';
import { afterAll, describe, expect, it } from 'vitest';
import { AuditChain } from '../src/store/sqlite/chain.js';
import { openDatabase } from '../src/store/sqlite/db.js';
import { JOURNAL_SIZE_LIMIT_BYTES, startCheckpoints } from '../src/store/sqlite/wal.js';

const dirs: string[] = [];
afterAll(() => {
  for (const d of dirs) rmSync(d, { recursive: true, force: true });
});
function freshPath(): string {
  const d = mkdtempSync(join(tmpdir(), 'cmcp-storage-test-'));
  dirs.push(d);
  return join(d, 'cmcp.db');
}
const size = (p: string) => {
  try {
    return statSync(p).size;
  } catch {
    return 0;
  }
};
const detail = { note: 'x'.repeat(420), upstream: 'everything', tool: 'echo' };
const SESSION = '00000000-0000-4000-8000-000000000001';

/** Appends `n` ~1 KB entries while `read` runs every 10 appends; returns the WAL's largest size. */
function appendWithReader(path: string, n: number, read: (i: number) => void): number {
  const db = openDatabase(path);
  const checkpoints = startCheckpoints(db, 0);
  const chain = new AuditChain(db);
  let maxWal = 0;
  try {
    for (let i = 0; i < n; i++) {
      chain.append(SESSION, { entry_type: 'tool_call', session_id: SESSION, call_id: `c${i}`, detail });
      if (i % 10 === 0) read(i);
      if (i % 100 === 0) {
        checkpoints.tick();
        maxWal = Math.max(maxWal, size(`${path}-wal`));
      }
    }
    return Math.max(maxWal, size(`${path}-wal`));
  } finally {
    db.close();
  }
}

describe('the WAL with a reader open', () => {
  const N = 1500;
  it('stays under the bound when the reader reads in short paged transactions; grows behind one long read', () => {
    const paged = freshPath();
    const reader = (p: string) => new Database(p, { readonly: true, fileMustExist: false });
    let r: Database.Database | null = null;
    let after = -1;
    const walPaged = appendWithReader(paged, N, () => {
      r ??= reader(paged);
      const rows = r
        .prepare<[string, number], { sequence_number: number }>(
          'SELECT sequence_number, canonical FROM audit_entries WHERE chain_id = ? AND sequence_number > ? ORDER BY sequence_number LIMIT 100',
        )
        .all(SESSION, after);
      after = rows.at(-1)?.sequence_number ?? -1;
    });
    (r as Database.Database | null)?.close();

    const long = freshPath();
    let held: Database.Database | null = null;
    const walLong = appendWithReader(long, N, () => {
      if (held) return;
      held = reader(long);
      held.exec('BEGIN');
      held.prepare('SELECT COUNT(*) FROM audit_entries').get();
    });
    (held as Database.Database | null)?.close();

    expect(walPaged).toBeLessThan(JOURNAL_SIZE_LIMIT_BYTES);
    // The contrast the bound is about: a reader that never ends its transaction pins the log.
    expect(walLong).toBeGreaterThan(walPaged * 2);
  }, 120_000);
});

describe('bytes on disk per entry', () => {
  it('an entry costs less than twice its canonical text', () => {
    const path = freshPath();
    const db = openDatabase(path);
    db.pragma('synchronous = OFF'); // the layout is measured, not durability
    const chain = new AuditChain(db);
    let canonical = 0;
    const n = 3000;
    for (let i = 0; i < n; i++) {
      chain.append(SESSION, { entry_type: 'tool_call', session_id: SESSION, call_id: `c${i}`, detail });
    }
    for (const e of chain.entries(SESSION)) canonical += Buffer.byteLength(JSON.stringify(e)) - 80;
    db.pragma('wal_checkpoint(TRUNCATE)');
    db.close();
    const perEntry = size(path) / n;
    expect(perEntry).toBeLessThan((2 * canonical) / n);
  });
});

describe('a database made with the old layout', () => {
  it('is migrated at open: rows unchanged, the chain verifies and grows', () => {
    const path = freshPath();
    const old = new Database(path);
    old.exec(`CREATE TABLE audit_entries (
      chain_id TEXT NOT NULL, sequence_number INTEGER NOT NULL, prev_entry_hash TEXT NOT NULL,
      entry_hash TEXT NOT NULL, entry_type TEXT NOT NULL, session_id TEXT, execution_id TEXT,
      agent_id TEXT, timestamp_utc TEXT NOT NULL, canonical TEXT NOT NULL,
      PRIMARY KEY (chain_id, sequence_number), UNIQUE (chain_id, prev_entry_hash)) WITHOUT ROWID;
      CREATE UNIQUE INDEX audit_entries_hash ON audit_entries(entry_hash);`);
    // Entries as the old layout held them: made by today's chain, copied over in the old columns.
    const scratch = openDatabase(freshPath());
    const made = new AuditChain(scratch);
    for (let i = 0; i < 5; i++) made.append('s', { entry_type: 'tool_call', detail });
    const texts = made.bundle('s', null).entries;
    const cols =
      'chain_id, sequence_number, prev_entry_hash, entry_hash, entry_type, session_id, execution_id, agent_id, timestamp_utc, canonical';
    const insert = old.prepare(`INSERT INTO audit_entries (${cols}) VALUES (${cols.replace(/\w+/g, '?')})`);
    for (const row of scratch
      .prepare(`SELECT ${cols} FROM audit_entries ORDER BY sequence_number`)
      .raw()
      .all())
      insert.run(...(row as unknown[]));
    scratch.close();
    old.close();

    const db = openDatabase(path);
    const sql = (
      db.prepare("SELECT sql FROM sqlite_schema WHERE name = 'audit_entries'").get() as { sql: string }
    ).sql;
    expect(sql).not.toMatch(/WITHOUT ROWID/i);
    const chain = new AuditChain(db);
    expect(chain.bundle('s', null).entries).toEqual(texts);
    chain.append('s', { entry_type: 'tool_call', detail });
    const report = verifyBundle(chain.bundle('s', null));
    expect(report.checks.filter((c) => c.status === 'fail')).toEqual([]);
    expect(chain.entries('s')).toHaveLength(6);
    db.close();
  });

  it('the paged export is the same JSON bundle as the one-read export', async () => {
    const db = openDatabase(freshPath());
    const chain = new AuditChain(db);
    // Texts SQLite's json_object must escape exactly as a JSON string: quotes, backslashes,
    // control characters, U+2028, a non-BMP character (the chain refuses lone surrogates).
    const tricky = ['"q" \\ back', 'tab\t nl\n nul\u0000 bel\u0007 del\u007f', '\u2028 \u00e9 😀'];
    for (let i = 0; i < 250; i++)
      chain.append('s', { entry_type: 'tool_call', detail: { ...detail, text: tricky[i % tricky.length] } });
    let text = '';
    for await (const piece of chain.bundleJson('s', 's', 100)) text += piece;
    const paged = JSON.parse(text);
    const whole = chain.bundle('s', 's');
    expect({ ...paged, exported_at: null }).toEqual({ ...whole, exported_at: null });
    expect(verifyBundle(paged).checks.filter((c) => c.status === 'fail')).toEqual([]);
    db.close();
  });
});
