/**
 * The versioned schema (src/store/migrations/): a new SQLite file and a real PostgreSQL are
 * migrated to the latest version; both schemas, read from each engine's own catalog, have the
 * same tables, columns, keys and indexes; a second run does nothing; a file made before versions
 * were recorded (test/fixtures/db-before-versioning.sql) is taken over at version 1 with its
 * data unchanged; a database newer than the code is refused with DATABASE_SCHEMA_TOO_NEW and not
 * written. `cmcp db migrate|status` and `cmcp start` with a postgres:// database, through the
 * built CLI.
 */
import { spawn, spawnSync } from 'node:child_process';
import { mkdtempSync, readFileSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { verifyBundle } from '@cmcp/verify';
import Database from 'better-sqlite3';
import pg from 'pg';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { stringify } from 'yaml';
import { LATEST_SCHEMA_VERSION, SchemaTooNewError } from '../src/store/migrations/index.js';
import { migratePostgres, POSTGRES_MIGRATIONS } from '../src/store/migrations/postgres.js';
import { SQLITE_MIGRATIONS, sqliteSchemaVersion } from '../src/store/migrations/sqlite.js';
import { AuditChain } from '../src/store/sqlite/chain.js';
import { openDatabase } from '../src/store/sqlite/db.js';
import { createDatabase, type PostgresInstance, startPostgres } from '../testing/postgres.js';
import { cleanup, REPO_ROOT, writeConfig } from './harness/gateway.js';
import { hasPostgres } from './harness/postgres.js';
import { postgresShape, sqliteShape } from './harness/schema-shape.js';

const dir = mkdtempSync(join(tmpdir(), 'cmcp-migrate-'));
afterAll(() => cleanup(dir));
let n = 0;
const freshPath = () => join(dir, `db-${++n}.db`);

/** `cmcp …` through the built CLI (dist/, made by `npm run build`). */
function cmcp(...args: string[]) {
  const r = spawnSync(process.execPath, [join(REPO_ROOT, 'dist', 'src', 'cli', 'main.js'), ...args], {
    encoding: 'utf8',
    timeout: 60_000,
  });
  return { code: r.status, out: r.stdout, err: r.stderr };
}

/** Every row of every cmcp table, in key order: the data a migration must not change. */
function allRows(db: Database.Database): Record<string, unknown[]> {
  const out: Record<string, unknown[]> = {};
  for (const t of ['audit_entries', 'sessions', 'instances', 'claims', 'executions', 'call_attempts'])
    out[t] = db.prepare(`SELECT * FROM ${t} ORDER BY 1, 2`).all();
  return out;
}

function schemaTexts(db: Database.Database): { name: string; sql: string | null }[] {
  return db
    .prepare<[], { name: string; sql: string | null }>('SELECT name, sql FROM sqlite_schema ORDER BY name')
    .all();
}

function versionRows(db: Database.Database) {
  return db.prepare('SELECT version, description, applied_at FROM schema_version ORDER BY version').all();
}

describe('the migration lists', () => {
  it('both engines have versions 1 … latest with the same descriptions', () => {
    const summary = (l: typeof SQLITE_MIGRATIONS) => l.map((m) => [m.version, m.description]);
    expect(summary(SQLITE_MIGRATIONS)).toEqual(summary(POSTGRES_MIGRATIONS));
    expect(SQLITE_MIGRATIONS.map((m) => m.version)).toEqual(
      Array.from({ length: LATEST_SCHEMA_VERSION }, (_, i) => i + 1),
    );
  });
});

describe('SQLite', () => {
  it('a new file is migrated to the latest version at open; opening again changes nothing', () => {
    const path = freshPath();
    const db = openDatabase(path);
    expect(sqliteSchemaVersion(db)).toBe(LATEST_SCHEMA_VERSION);
    const rows = versionRows(db);
    expect(rows).toHaveLength(LATEST_SCHEMA_VERSION);
    const texts = schemaTexts(db);
    db.close();
    const again = openDatabase(path);
    expect(versionRows(again)).toEqual(rows); // same applied_at: nothing re-applied
    expect(schemaTexts(again)).toEqual(texts);
    again.close();
  });

  // The WAL switch of a new file got SQLITE_BUSY at once when another process held a lock (SQLite
  // does not call its busy handler where waiting could deadlock; store/sqlite/db.ts switchToWal): 6 of
  // 150 such openings failed before it was retried. Five rounds of six, so that a regression shows.
  it('six processes opening one new file at the same instant, five times over, each succeed and apply each version once', async () => {
    for (let round = 0; round < 5; round++) {
      const path = freshPath();
      const go = Date.now() + 1500; // all six open at the same instant
      const script = `
      import { openDatabase } from ${JSON.stringify(join(REPO_ROOT, 'dist', 'src', 'store', 'sqlite', 'db.js'))};
      while (Date.now() < ${go}) {}
      openDatabase(${JSON.stringify(path)}).close();`;
      const run = () =>
        new Promise<number | null>((res) => {
          const p = spawn(process.execPath, ['--input-type=module', '-e', script], { stdio: 'inherit' });
          p.on('exit', (code) => res(code));
        });
      expect(await Promise.all(Array.from({ length: 6 }, run))).toEqual([0, 0, 0, 0, 0, 0]);
      const db = new Database(path, { readonly: true });
      expect(db.prepare('SELECT version FROM schema_version ORDER BY version').all()).toEqual(
        Array.from({ length: LATEST_SCHEMA_VERSION }, (_, i) => ({ version: i + 1 })),
      );
      db.close();
    }
  }, 60_000);

  it('a file made before versions were recorded is taken over at version 1, data unchanged, then migrated', () => {
    const path = freshPath();
    const old = new Database(path);
    old.exec(readFileSync(join(REPO_ROOT, 'test', 'fixtures', 'db-before-versioning.sql'), 'utf8'));
    expect(sqliteSchemaVersion(old)).toBe('unversioned');
    const before = allRows(old);
    const textsBefore = schemaTexts(old);
    old.close();
    expect(before.audit_entries?.length).toBeGreaterThan(5);
    expect(before.claims).toHaveLength(1);
    expect(before.executions).toHaveLength(1);

    const db = openDatabase(path);
    expect(sqliteSchemaVersion(db)).toBe(LATEST_SCHEMA_VERSION);
    expect(db.prepare('SELECT version FROM schema_version ORDER BY version').all()[0]).toEqual({
      version: 1,
    });
    expect(allRows(db)).toEqual(before);
    expect(db.prepare('SELECT count(*) AS n FROM session_sensitivity').get()).toEqual({ n: 0 });
    // The tables are the ones that code made, text for text; only schema_version and the tables
    // of later versions are new.
    expect(
      schemaTexts(db).filter(
        (t) =>
          !t.name.startsWith('schema_version') &&
          !t.name.startsWith('session_sensitivity') &&
          !t.name.includes('claim_part') && // its tables and their indexes (sqlite_autoindex_claim_part…)
          !['chain_tips', 'replica_leases', 'entry_writers', 'replica_evidence', 'readiness_probe'].includes(
            t.name,
          ),
      ),
    ).toEqual(textsBefore);
    const sessionId = (before.claims as { session_id: string }[])[0]?.session_id ?? '';
    const report = verifyBundle(new AuditChain(db).bundle(sessionId, sessionId));
    expect(report.checks.filter((c) => c.status === 'fail')).toEqual([]);
    expect(report.checks.length).toBeGreaterThan(0);
    db.close();
  });

  it('a file made before sessions had an owner gets the column (the default instance id)', () => {
    const path = freshPath();
    const old = new Database(path);
    old.exec(`CREATE TABLE sessions (session_id TEXT PRIMARY KEY, agent_id TEXT NOT NULL, is_default INTEGER NOT NULL,
      status TEXT NOT NULL CHECK (status IN ('open','closed')), created_at TEXT NOT NULL, created_ms INTEGER NOT NULL,
      closed_at TEXT, chain_root TEXT NOT NULL, key_thumbprint TEXT NOT NULL, call_count INTEGER NOT NULL DEFAULT 0,
      binding_json TEXT NOT NULL);
      INSERT INTO sessions VALUES ('s1','alice',1,'open','2026-01-01T00:00:00Z',0,NULL,'root','kt',3,'{}');`);
    old.close();
    const db = openDatabase(path);
    expect(db.prepare('SELECT session_id, owner, call_count FROM sessions').all()).toEqual([
      { session_id: 's1', owner: 'gateway', call_count: 3 },
    ]);
    expect(sqliteSchemaVersion(db)).toBe(LATEST_SCHEMA_VERSION);
    // Every other table of version 1 was made beside it.
    expect(Object.keys(sqliteShape(db)).sort()).toEqual(Object.keys(sqliteShape(fresh())).sort());
    db.close();
  });

  it('a file newer than the code is refused with DATABASE_SCHEMA_TOO_NEW and not written', () => {
    const path = freshPath();
    const db = openDatabase(path);
    db.prepare("INSERT INTO schema_version VALUES (?, 'from a newer cmcp', '2030-01-01T00:00:00Z')").run(
      LATEST_SCHEMA_VERSION + 1,
    );
    db.close();
    const bytes = readFileSync(path);
    let thrown: unknown;
    try {
      openDatabase(path);
    } catch (e) {
      thrown = e;
    }
    expect(thrown).toBeInstanceOf(SchemaTooNewError);
    expect((thrown as SchemaTooNewError).code).toBe('DATABASE_SCHEMA_TOO_NEW');
    expect((thrown as Error).message).toContain(`schema version ${LATEST_SCHEMA_VERSION + 1}`);
    expect(readFileSync(path).equals(bytes)).toBe(true);
  });

  it('both CHECK constraints hold (the catalog does not list them)', () => {
    const db = fresh();
    expect(() =>
      db.prepare("INSERT INTO sessions VALUES ('s','a',0,'bogus','t',0,NULL,'r','k',0,'{}','gateway')").run(),
    ).toThrow(/CHECK/);
    expect(() =>
      db.prepare("INSERT INTO executions VALUES ('a','e','b','bogus','c','s','t','o','t','t',NULL)").run(),
    ).toThrow(/CHECK/);
    db.close();
  });
});

/** A migrated new SQLite database. */
function fresh(): Database.Database {
  return openDatabase(freshPath());
}

describe('cmcp db migrate|status (SQLite), cmcp start with a postgres:// database', () => {
  it('migrate makes and migrates a file, says what it did, and a second run does nothing', () => {
    const path = freshPath();
    const first = cmcp('db', 'migrate', '--database', path);
    expect(first.err).toBe('');
    expect(first.code).toBe(0);
    expect(first.out).toContain('found schema version 0 (no cmcp schema)');
    expect(first.out).toContain(`applied 1: ${SQLITE_MIGRATIONS[0]?.description}`);
    expect(first.out).toContain(`now at schema version ${LATEST_SCHEMA_VERSION}`);
    const second = cmcp('db', 'migrate', '--database', path, '--json');
    expect(second.code).toBe(0);
    expect(JSON.parse(second.out)).toMatchObject({
      engine: 'sqlite',
      from: LATEST_SCHEMA_VERSION,
      to: LATEST_SCHEMA_VERSION,
      applied: [],
    });
    const st = cmcp('db', 'status', '--database', path);
    expect(st.code).toBe(0);
    expect(st.out).toContain(`schema version ${LATEST_SCHEMA_VERSION} (latest)`);
  });

  it('status of a file made before versioning says so and writes nothing; migrate takes it over', () => {
    const path = freshPath();
    const old = new Database(path);
    old.exec(readFileSync(join(REPO_ROOT, 'test', 'fixtures', 'db-before-versioning.sql'), 'utf8'));
    old.close();
    const bytes = readFileSync(path);
    const st = cmcp('db', 'status', '--database', path, '--json');
    expect(JSON.parse(st.out)).toMatchObject({ engine: 'sqlite', version: 'unversioned' });
    expect(readFileSync(path).equals(bytes)).toBe(true);
    const m = cmcp('db', 'migrate', '--database', path);
    expect(m.code).toBe(0);
    expect(m.out).toContain('found schema version unversioned');
    expect(m.out).toContain('applied 1:');
  });

  it('migrate refuses a newer file (exit 1, DATABASE_SCHEMA_TOO_NEW); a missing file for status is exit 2', () => {
    const path = freshPath();
    const db = openDatabase(path);
    db.prepare("INSERT INTO schema_version VALUES (99, 'future', 'x')").run();
    db.close();
    const r = cmcp('db', 'migrate', '--database', path);
    expect(r.code).toBe(1);
    expect(r.err).toMatch(/schema version 99, newer than this cmcp knows .*\(DATABASE_SCHEMA_TOO_NEW\)\n$/);
    const missing = cmcp('db', 'status', '--database', join(dir, 'absent.db'));
    expect(missing.code).toBe(2);
    expect(missing.err).toContain('(DATABASE_UNAVAILABLE)');
    expect(cmcp('db', 'status').code).toBe(2);
  });

  it('cmcp start with an unreachable postgres:// database refuses with DATABASE_UNAVAILABLE', async () => {
    const cfg = await writeConfig({ dir: mkdtempSync(join(dir, 'start-')) });
    writeFileSync(cfg.file, stringify({ ...cfg.raw, database: 'postgres://cmcp@127.0.0.1:1/cmcp' }));
    const r = cmcp('start', '--config', cfg.file);
    expect(r.code).toBe(4); // a replica's unreachable PostgreSQL: a supervisor may start it again
    expect(r.err).toContain('(DATABASE_UNAVAILABLE)');
    expect(r.err).toContain('cannot reach postgres://cmcp@127.0.0.1:1/cmcp');
    // Not a SQLite file named like the URL either.
    expect(spawnSync('ls', [cfg.dir], { encoding: 'utf8' }).stdout).not.toMatch(/postgres|cmcp\.db/);
    // --check says so too, and never prints the password.
    writeFileSync(cfg.file, stringify({ ...cfg.raw, database: 'postgres://cmcp:hunter2@127.0.0.1:1/cmcp' }));
    const check = cmcp('start', '--check', '--config', cfg.file);
    expect(check.code).toBe(4);
    expect(check.out).toMatch(/FAIL\s+database\s+cannot reach .*\(DATABASE_UNAVAILABLE\)/);
    expect(check.out).toContain('postgres://cmcp:***@127.0.0.1:1/cmcp');
    expect(check.out + check.err).not.toContain('hunter2');
    // A section a replica refuses at start-up fails --check too, with the same reason.
    writeFileSync(
      cfg.file,
      stringify({ ...cfg.raw, database: 'postgres://cmcp@127.0.0.1:1/cmcp', store: { worker: true } }),
    );
    const worker = cmcp('start', '--check', '--config', cfg.file);
    expect(worker.code).toBe(4); // the database is unreachable here too
    expect(worker.out).toMatch(/FAIL\s+replica\s+.*store\.worker.*\(POSTGRES_FEATURE_UNAVAILABLE\)/);
  });
});

describe.skipIf(!hasPostgres())('PostgreSQL', () => {
  let server: PostgresInstance;
  beforeAll(async () => {
    server = await startPostgres();
  });
  const clients: pg.Client[] = [];
  afterAll(async () => {
    for (const c of clients) await c.end().catch(() => undefined);
    await server?.stop();
  });
  async function client(url: string): Promise<pg.Client> {
    const c = new pg.Client({ connectionString: url });
    clients.push(c);
    await c.connect();
    return c;
  }

  it('an empty database is migrated to the latest version; a second run does nothing', async () => {
    const c = await client(await createDatabase(server, 'm_fresh'));
    const first = await migratePostgres(c, 'm_fresh');
    expect(first).toEqual({
      engine: 'postgres',
      from: 0,
      to: LATEST_SCHEMA_VERSION,
      applied: POSTGRES_MIGRATIONS.map(({ version, description }) => ({ version, description })),
    });
    const rows = (await c.query('SELECT * FROM schema_version ORDER BY version')).rows;
    const second = await migratePostgres(c, 'm_fresh');
    expect(second).toEqual({
      engine: 'postgres',
      from: LATEST_SCHEMA_VERSION,
      to: LATEST_SCHEMA_VERSION,
      applied: [],
    });
    expect((await c.query('SELECT * FROM schema_version ORDER BY version')).rows).toEqual(rows);
    await c.end();
  });

  it('the PostgreSQL schema has the same tables, columns, keys and indexes as the SQLite one', async () => {
    const c = await client(await createDatabase(server, 'm_shape'));
    await migratePostgres(c, 'm_shape');
    const pgShape = await postgresShape(c);
    const db = fresh();
    const liteShape = sqliteShape(db);
    db.close();
    expect(pgShape).toEqual(liteShape);
    expect(Object.keys(pgShape)).toContain('audit_entries');
    expect(pgShape.audit_entries?.unique).toEqual(['chain_id,prev_entry_hash', 'entry_hash']);
    // Every text column compares bytewise, as SQLite's BINARY collation does.
    const coll = await c.query<{ n: string }>(
      `SELECT COUNT(*)::text AS n FROM information_schema.columns WHERE table_schema = current_schema()
       AND data_type = 'text' AND collation_name IS DISTINCT FROM 'C'`,
    );
    expect(coll.rows[0]?.n).toBe('0');
    // The same two CHECK constraints.
    await expect(
      c.query("INSERT INTO sessions VALUES ('s','a',0,'bogus','t',0,NULL,'r','k',0,'{}','gateway')"),
    ).rejects.toThrow(/check constraint/);
    await expect(
      c.query("INSERT INTO executions VALUES ('a','e','b','bogus','c','s','t','o','t','t',NULL)"),
    ).rejects.toThrow(/check constraint/);
    await c.end();
  });

  it('two migrations racing on one database apply each version once (advisory lock)', async () => {
    const url = await createDatabase(server, 'm_race');
    const [a, b] = await Promise.all([client(url), client(url)]);
    const [ra, rb] = await Promise.all([migratePostgres(a, 'm_race'), migratePostgres(b, 'm_race')]);
    expect(ra.applied.length + rb.applied.length).toBe(LATEST_SCHEMA_VERSION);
    expect([ra.to, rb.to]).toEqual([LATEST_SCHEMA_VERSION, LATEST_SCHEMA_VERSION]);
    expect((await a.query('SELECT version FROM schema_version')).rows).toHaveLength(LATEST_SCHEMA_VERSION);
    await Promise.all([a.end(), b.end()]);
  });

  it('a database newer than the code is refused with DATABASE_SCHEMA_TOO_NEW and not written', async () => {
    const c = await client(await createDatabase(server, 'm_newer'));
    await migratePostgres(c, 'm_newer');
    await c.query("INSERT INTO schema_version VALUES ($1, 'from a newer cmcp', 'x')", [
      LATEST_SCHEMA_VERSION + 1,
    ]);
    await expect(migratePostgres(c, 'm_newer')).rejects.toMatchObject({ code: 'DATABASE_SCHEMA_TOO_NEW' });
    expect((await c.query('SELECT version FROM schema_version')).rows).toHaveLength(
      LATEST_SCHEMA_VERSION + 1,
    );
    await c.end();
  });

  it('cmcp db migrate|status on a postgres:// URL and through a config', async () => {
    const url = await createDatabase(server, 'm_cli');
    const st0 = cmcp('db', 'status', '--database', url, '--json');
    expect(st0.err).toBe('');
    expect(JSON.parse(st0.out)).toEqual({
      database: url,
      engine: 'postgres',
      version: 0,
      latest: LATEST_SCHEMA_VERSION,
    });
    const cfg = await writeConfig({ dir: mkdtempSync(join(dir, 'cli-')) });
    writeFileSync(cfg.file, stringify({ ...cfg.raw, database: url }));
    const m = cmcp('db', 'migrate', '--config', cfg.file);
    expect(m.code).toBe(0);
    expect(m.out).toContain(`database: ${url} (postgres)`);
    expect(m.out).toContain('applied 1:');
    expect(cmcp('db', 'migrate', '--database', url).out).toContain('nothing to do');
    expect(cmcp('db', 'status', '--database', url).out).toContain(
      `schema version ${LATEST_SCHEMA_VERSION} (latest)`,
    );
    const refused = cmcp(
      'db',
      'status',
      '--database',
      `postgres://nobody:secret@127.0.0.1:${server.port}/absent`,
    );
    expect(refused.code).toBe(2);
    expect(refused.err).toContain('(DATABASE_UNAVAILABLE)');
    expect(refused.err).not.toContain('secret');
  });
});
