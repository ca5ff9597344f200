/**
 * The audit leaves the box: `cmcp audit export --follow --output FILE` feeds a file sink while
 * entries are written, is killed mid-way (a torn last line left behind), restarts, and the file
 * then holds every entry of every chain exactly once, each chain whole (checked as the store's
 * own chains are); the OCSF shape carries each entry. `cmcp db backup|restore|verify` copy the
 * store while it is written, put it back, and check every chain (a tampered entry fails). On
 * PostgreSQL: pg_dump and pg_restore, and an export resumed on the restored database with a
 * cursor from the original misses nothing written after the restore. Real SQLite, real
 * PostgreSQL, the built CLI.
 */
import { type ChildProcess, spawn, spawnSync } from 'node:child_process';
import { appendFileSync, existsSync, mkdtempSync, readFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import pg from 'pg';
import { afterAll, describe, expect, it } from 'vitest';
import { verifyChains } from '../src/audit/verify-chains.js';
import { migratePostgres } from '../src/store/migrations/postgres.js';
import { appendEntry } from '../src/store/postgres/chain.js';
import { AuditChain } from '../src/store/sqlite/chain.js';
import { openDatabase } from '../src/store/sqlite/db.js';
import { createDatabase, findPostgresBin, startPostgres } from '../testing/postgres.js';
import { cleanup, REPO_ROOT } from './harness/gateway.js';
import { hasPostgres } from './harness/postgres.js';

const CLI = join(REPO_ROOT, 'dist', 'src', 'cli', 'main.js');
const dir = mkdtempSync(join(tmpdir(), 'cmcp-audit-export-'));
afterAll(() => cleanup(dir));

function cmcp(...args: string[]) {
  const r = spawnSync(process.execPath, [CLI, ...args], { encoding: 'utf8' });
  return { code: r.status, out: r.stdout, err: r.stderr };
}

function lines(file: string): Record<string, unknown>[] {
  return readFileSync(file, 'utf8')
    .split('\n')
    .slice(0, -1) // complete lines only: a torn one is cut off by the export that resumes
    .map((l) => JSON.parse(l) as Record<string, unknown>);
}

async function until(what: () => boolean, ms = 90_000): Promise<void> {
  const end = Date.now() + ms;
  while (!what()) {
    if (Date.now() > end) throw new Error('timed out');
    await new Promise((r) => setTimeout(r, 50));
  }
}

function follow(database: string, output: string): ChildProcess {
  return spawn(
    process.execPath,
    [
      CLI,
      'audit',
      'export',
      '--database',
      database,
      '--output',
      output,
      '--follow',
      '--poll-ms',
      '20',
      '--page',
      '13',
    ],
    { stdio: ['ignore', 'ignore', 'pipe'] },
  );
}

const exited = (p: ChildProcess) =>
  new Promise<number | null>((r) => (p.exitCode !== null ? r(p.exitCode) : p.once('exit', (c) => r(c))));

describe('cmcp audit export to a file sink on SQLite', () => {
  it('holds every entry once across a killed and restarted export, each chain whole', async () => {
    const database = join(dir, 'store.db');
    const sink = join(dir, 'sink.jsonl');
    const db = openDatabase(database);
    const chain = new AuditChain(db);
    const write = async (n: number, from: number) => {
      for (let i = from; i < from + n; i++) {
        await chain.appendAwaited(`chain-${i % 5}`, {
          entry_type: 'test_append',
          agent_id: 'agent-1',
          detail: { i },
        });
        if (i % 10 === 0) await new Promise((r) => setTimeout(r, 5));
      }
    };
    let exporter = follow(database, sink);
    await write(60, 0);
    await until(() => existsSync(sink) && lines(sink).length >= 40);
    exporter.kill('SIGKILL');
    await exited(exporter);
    // A crash in the middle of a write leaves a torn last line, which the restart cuts off.
    appendFileSync(sink, '{"cursor":"00');
    const writing = write(90, 60);
    exporter = follow(database, sink);
    await writing;
    await until(() => lines(sink).length >= 150);
    exporter.kill('SIGTERM');
    expect(await exited(exporter)).toBe(0);

    const got = lines(sink);
    expect(got).toHaveLength(150);
    expect(new Set(got.map((l) => l.entry_hash)).size).toBe(150);
    const fromFile = await verifyChains([got as { entry_hash: string; canonical: string }[]]);
    expect(fromFile.problems).toEqual([]);
    const stored = db
      .prepare<[], { chain_id: string; n: number; tip: string }>(
        `SELECT chain_id, count(*) AS n, (SELECT entry_hash FROM audit_entries b WHERE b.chain_id = a.chain_id
           ORDER BY sequence_number DESC LIMIT 1) AS tip FROM audit_entries a GROUP BY chain_id`,
      )
      .all();
    expect(stored).toHaveLength(5);
    for (const c of stored) expect(fromFile.chains.get(c.chain_id)).toEqual({ length: c.n, tip: c.tip });

    // The OCSF shape, from a cursor: the rest, as API Activity events carrying the entry.
    const ocsf = cmcp(
      'audit',
      'export',
      '--database',
      database,
      '--after',
      String(got[99]?.cursor),
      '--format',
      'ocsf',
    );
    expect(ocsf.code).toBe(0);
    const events = ocsf.out
      .trim()
      .split('\n')
      .map((l) => JSON.parse(l));
    expect(events).toHaveLength(50);
    expect(events[0]).toMatchObject({
      class_uid: 6003,
      type_uid: 600399,
      status_id: 1,
      actor: { user: { uid: 'agent-1' } },
      metadata: { uid: got[100]?.entry_hash, product: { name: 'cmcp' } },
      unmapped: { cmcp: { entry_hash: got[100]?.entry_hash } },
    });
    const unknown = cmcp('audit', 'export', '--database', database, '--after', 'f'.repeat(64));
    expect(unknown.code).toBe(2);
    expect(unknown.err).toMatch(/AUDIT_CURSOR_UNKNOWN/);
    db.close();
  }, 180_000);

  it('backs up while entries are written, restores, and finds a tampered entry', async () => {
    const database = join(dir, 'live.db');
    const db = openDatabase(database);
    const chain = new AuditChain(db);
    for (let i = 0; i < 40; i++) await chain.appendAwaited(`c-${i % 3}`, { entry_type: 'test_append' });
    let writing = true;
    const writer = (async () => {
      for (let i = 0; writing; i++) await chain.appendAwaited(`c-${i % 3}`, { entry_type: 'test_append' });
    })();
    const backup = join(dir, 'live.backup');
    const b = await new Promise<{ code: number | null; out: string }>((r) => {
      const p = spawn(process.execPath, [
        CLI,
        'db',
        'backup',
        '--database',
        database,
        '--to',
        backup,
        '--json',
      ]);
      let out = '';
      p.stdout.on('data', (d) => (out += d));
      p.once('exit', (code) => r({ code, out }));
    });
    writing = false;
    await writer;
    db.close();
    expect(b.code).toBe(0);
    const report = JSON.parse(b.out);
    expect(report).toMatchObject({ ok: true, chains: 3, problems: [] });
    expect(report.entries).toBeGreaterThanOrEqual(40);
    expect(cmcp('db', 'backup', '--database', database, '--to', backup).code).toBe(2);

    const restored = join(dir, 'restored.db');
    const r = cmcp('db', 'restore', '--from', backup, '--database', restored, '--json');
    expect(r.code).toBe(0);
    expect(JSON.parse(r.out)).toMatchObject({ ok: true, entries: report.entries });
    const t = openDatabase(restored);
    t.prepare(
      "UPDATE audit_entries SET canonical = replace(canonical, 'test_append', 'test_appenD') WHERE chain_id = 'c-1' AND sequence_number = 3",
    ).run();
    t.close();
    const v = cmcp('db', 'verify', '--database', restored);
    expect(v.code).toBe(1);
    expect(v.out).toMatch(/problem: entry [0-9a-f]{64}: the hash of its canonical text differs/);
  }, 180_000);
});

describe('cmcp audit export, backup and restore on PostgreSQL', () => {
  it.skipIf(!hasPostgres())(
    'restores a pg_dump with every chain whole; a resumed export misses nothing after it',
    async () => {
      const server = await startPostgres();
      const pgBin = findPostgresBin()?.bin as string;
      try {
        const url = await createDatabase(server, 'export_source');
        const pool = new pg.Pool({ connectionString: url, max: 4 });
        pool.on('error', () => undefined);
        const c = await pool.connect();
        await migratePostgres(c, 'source');
        for (let i = 0; i < 30; i++) await appendEntry(c, `pc-${i % 4}`, { entry_type: 'test_append' });
        c.release();
        await pool.end();
        const first = cmcp('audit', 'export', '--database', url);
        expect(first.code).toBe(0);
        const exported = first.out
          .trim()
          .split('\n')
          .map((l) => JSON.parse(l));
        expect(exported).toHaveLength(30);

        const dump = join(dir, 'pg.dump');
        expect(cmcp('db', 'backup', '--database', url, '--to', dump, '--pg-bin', pgBin).code).toBe(0);
        const target = await createDatabase(server, 'export_restored');
        const r = cmcp('db', 'restore', '--from', dump, '--database', target, '--pg-bin', pgBin, '--json');
        expect(r.err).toBe('');
        expect(JSON.parse(r.out)).toMatchObject({ ok: true, entries: 30, chains: 4 });
        expect(cmcp('db', 'restore', '--from', dump, '--database', target, '--pg-bin', pgBin).code).toBe(2);

        // New writes on the restored server come after every restored entry, whatever their xids.
        const after = new pg.Client({ connectionString: target });
        await after.connect();
        await appendEntry(after, 'pc-new', { entry_type: 'test_append' });
        await after.end();
        const resumed = cmcp('audit', 'export', '--database', target, '--after', exported[19].cursor);
        expect(resumed.code).toBe(0);
        const rest = resumed.out
          .trim()
          .split('\n')
          .map((l) => JSON.parse(l));
        expect(rest.map((l) => l.entry_hash).slice(0, 10)).toEqual(
          exported.slice(20).map((l) => l.entry_hash),
        );
        expect(rest).toHaveLength(11);
        expect(rest[10]?.chain_id).toBe('pc-new');
      } finally {
        await server.stop();
      }
    },
    120_000,
  );
});
