/**
 * The audit chain in SQLite: C-CHAIN-1 (concurrent appends from two connections), C-CHAIN-2
 * (hash what you store: sub-millisecond clock, a clock stepping backwards, an undefined
 * member), C-SQL-1 (IMMEDIATE transactions; a busy database fails the whole transaction).
 */
import { spawn } from 'node:child_process';
import { mkdtempSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { verifyBundle } from '@cmcp/verify';
import { sha256Hex } from '@cmcp/verify/formats';
import { afterAll, describe, expect, it } from 'vitest';
import { AuditChain } from '../src/store/sqlite/chain.js';
import { immediate, openDatabase } from '../src/store/sqlite/db.js';
import { cleanup, REPO_ROOT } from './harness/gateway.js';

const dir = mkdtempSync(join(tmpdir(), 'cmcp-chain-'));
afterAll(() => cleanup(dir));

describe('C-CHAIN-1 concurrent appends', () => {
  for (const n of [2, 50]) {
    for (const prefilled of [false, true]) {
      it(`${n} interleaved appends from two connections to a ${prefilled ? 'non-empty' : 'empty'} chain`, async () => {
        const file = join(dir, `c1-${n}-${prefilled}.db`);
        const a = new AuditChain(openDatabase(file));
        const b = new AuditChain(openDatabase(file));
        if (prefilled) a.append('s', { entry_type: 'session_open' });
        await Promise.all(
          Array.from(
            { length: n },
            (_, i) =>
              new Promise<void>((res) =>
                setImmediate(() => {
                  (i % 2 ? a : b).append('s', { entry_type: 'tool_call', call_id: `c${i}` });
                  res();
                }),
              ),
          ),
        );
        const entries = a.entries('s');
        expect(entries).toHaveLength(n + (prefilled ? 1 : 0));
        expect(new Set(entries.map((e) => e.sequence_number)).size).toBe(entries.length);
        expect(new Set(entries.map((e) => e.prev_entry_hash)).size).toBe(entries.length);
        const r = verifyBundle(a.bundle('s', null));
        expect(r.checks.filter((c) => c.status === 'fail')).toEqual([]);
        a.db.close();
        b.db.close();
      });
    }
  }
});

describe('C-CHAIN-2 hash what you store', () => {
  it('sub-millisecond timestamps, a clock stepping backwards, and undefined members', () => {
    let now = 1_764_460_800_000_123n; // µs
    const clock = () => now;
    const db = openDatabase(join(dir, 'c2.db'));
    const chain = new AuditChain(db, clock);
    const e1 = chain.append('s', {
      entry_type: 'session_open',
      detail: { x: 1, gone: undefined } as Record<string, unknown>,
    });
    now += 7n; // 7 µs later
    const e2 = chain.append('s', { entry_type: 'tool_call' });
    now -= 5_000_000n; // the wall clock steps back 5 s
    const e3 = chain.append('s', { entry_type: 'tool_call' });
    expect(e1.timestamp_utc).toMatch(/\.\d{6}Z$/);
    expect(e2.timestamp_utc > e1.timestamp_utc).toBe(true);
    expect(e3.timestamp_utc).toBe(e2.timestamp_utc); // never decreasing
    const rows = db
      .prepare<[], { canonical: string; entry_hash: string }>(
        "SELECT canonical, entry_hash FROM audit_entries WHERE chain_id = 's' ORDER BY sequence_number",
      )
      .all();
    for (const r of rows) expect(sha256Hex(r.canonical)).toBe(r.entry_hash);
    expect(rows[0]?.canonical).not.toContain('gone');
    const report = verifyBundle(chain.bundle('s', null));
    expect(report.checks.filter((c) => c.status === 'fail')).toEqual([]);
    db.close();
  });
});

describe('C-CHAIN-1 concurrent appends from two OS processes', () => {
  const script = (file: string, tag: string, n: number, go: number) => `
    import { AuditChain } from ${JSON.stringify(join(REPO_ROOT, 'dist', 'src', 'store', 'sqlite', 'chain.js'))};
    import { openDatabase } from ${JSON.stringify(join(REPO_ROOT, 'dist', 'src', 'store', 'sqlite', 'db.js'))};
    const chain = new AuditChain(openDatabase(${JSON.stringify(file)}, 10000));
    while (Date.now() < ${go}) {}
    for (let i = 0; i < ${n}; i++) chain.append('s', { entry_type: 'tool_call', call_id: '${tag}-' + i });
  `;
  for (const n of [2, 50]) {
    for (const prefilled of [false, true]) {
      it(`${n} appends from two processes to a ${prefilled ? 'non-empty' : 'empty'} chain`, async () => {
        const file = join(dir, `p-${n}-${prefilled}.db`);
        const chain = new AuditChain(openDatabase(file));
        if (prefilled) chain.append('s', { entry_type: 'session_open' });
        const go = Date.now() + 700; // both start appending at the same instant
        const run = (tag: string) =>
          new Promise<number | null>((res) => {
            const p = spawn(process.execPath, ['--input-type=module', '-e', script(file, tag, n / 2, go)], {
              stdio: 'inherit',
            });
            p.on('exit', (code) => res(code));
          });
        expect(await Promise.all([run('a'), run('b')])).toEqual([0, 0]);
        const entries = chain.entries('s');
        expect(entries).toHaveLength(n + (prefilled ? 1 : 0));
        expect(new Set(entries.map((e) => e.call_id)).size).toBe(entries.length);
        expect(new Set(entries.map((e) => e.prev_entry_hash)).size).toBe(entries.length);
        expect(verifyBundle(chain.bundle('s', null)).checks.filter((c) => c.status === 'fail')).toEqual([]);
        chain.db.close();
      });
    }
  }
});

describe('C-SQL-1 deferred upgrade cannot happen', () => {
  it('A reads the tip in a deferred transaction, B appends and commits, A cannot append', () => {
    const file = join(dir, 'sql1-deferred.db');
    const a = openDatabase(file);
    const b = openDatabase(file);
    const ca = new AuditChain(a);
    const cb = new AuditChain(b);
    ca.append('s', { entry_type: 'session_open' });
    a.prepare('BEGIN').run(); // deferred
    const tipSeenByA = a
      .prepare(
        "SELECT entry_hash FROM audit_entries WHERE chain_id = 's' ORDER BY sequence_number DESC LIMIT 1",
      )
      .get();
    cb.append('s', { entry_type: 'tool_call', call_id: 'b' });
    expect(() => ca.append('s', { entry_type: 'tool_call', call_id: 'a' })).toThrow(/not BEGIN IMMEDIATE/);
    a.prepare('ROLLBACK').run();
    expect(tipSeenByA).toBeDefined();
    ca.append('s', { entry_type: 'tool_call', call_id: 'a' });
    expect(ca.entries('s').map((e) => [e.sequence_number, e.call_id])).toEqual([
      [0, null],
      [1, 'b'],
      [2, 'a'],
    ]);
    a.close();
    b.close();
  });

  it('a writer waits for the busy timeout, then fails its whole transaction cleanly', () => {
    const file = join(dir, 'sql1.db');
    const a = openDatabase(file, 200);
    const b = openDatabase(file, 200);
    const ca = new AuditChain(a);
    const cb = new AuditChain(b);
    ca.append('s', { entry_type: 'session_open' });
    // A holds the write lock (IMMEDIATE) while B tries to append.
    a.prepare('BEGIN IMMEDIATE').run(); // A holds the write lock
    const t0 = Date.now();
    expect(() => immediate(b, () => cb.append('s', { entry_type: 'tool_call', call_id: 'b' }))).toThrow(
      /busy|locked/i,
    );
    expect(Date.now() - t0).toBeGreaterThanOrEqual(150);
    a.prepare('COMMIT').run();
    // B's failed transaction left nothing behind; once the lock is free it appends normally.
    expect(cb.entries('s').map((e) => e.sequence_number)).toEqual([0]);
    cb.append('s', { entry_type: 'tool_call', call_id: 'b' });
    expect(ca.entries('s').map((e) => e.sequence_number)).toEqual([0, 1]);
    a.close();
    b.close();
  });
});
