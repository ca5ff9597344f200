/**
 * `cmcp db migrate|status`: the versioned schema (src/store/migrations/) of a SQLite file or a
 * PostgreSQL database, named by `--database <path-or-postgres-URL>` or by a config's `database`.
 * `migrate` applies the pending migrations and says what it did (a SQLite file is made and
 * migrated exactly as `cmcp start` opens it); `status` reads the version and writes nothing.
 *
 * Exit codes: 0 done; 1 the database is newer than this cmcp (DATABASE_SCHEMA_TOO_NEW, nothing
 * written; `status` prints the version first); 2 bad flags, an invalid config, or a database that cannot be opened or reached
 * (DATABASE_UNAVAILABLE).
 */
import { existsSync } from 'node:fs';
import { resolve } from 'node:path';
import Database from 'better-sqlite3';
import type { Command } from 'commander';
import pg from 'pg';
import { ConfigError, loadConfig } from '../config/index.js';
import { CmcpError } from '../errors/index.js';
import {
  DatabaseUnavailableError,
  isPostgresUrl,
  LATEST_SCHEMA_VERSION,
  type MigrationReport,
  redactPostgresUrl,
  SchemaTooNewError,
} from '../store/migrations/index.js';
import { migratePostgres, postgresSchemaVersion } from '../store/migrations/postgres.js';
import { SQLITE_MIGRATIONS, sqliteSchemaVersion } from '../store/migrations/sqlite.js';
import { openDatabase } from '../store/sqlite/db.js';

interface Target {
  engine: 'sqlite' | 'postgres';
  /** A path or URL to connect with. */
  location: string;
  /** How messages name it (a PostgreSQL password redacted). */
  shown: string;
}

function target(o: { database?: string; config?: string }): Target {
  if ((o.database === undefined) === (o.config === undefined)) {
    process.stderr.write('cmcp db: give exactly one of --database and --config\n');
    process.exit(2);
  }
  let database = o.database ?? '';
  if (o.config !== undefined) database = loadConfig(o.config).database;
  if (isPostgresUrl(database))
    return { engine: 'postgres', location: database, shown: redactPostgresUrl(database) };
  const path = resolve(database);
  return { engine: 'sqlite', location: path, shown: path };
}

/** Opens a pg client; a refused connection or login is DATABASE_UNAVAILABLE. */
async function connect(t: Target): Promise<pg.Client> {
  const client = new pg.Client({ connectionString: t.location, connectionTimeoutMillis: 10_000 });
  // A server that goes away later is reported by the query that fails, not as an unhandled event.
  client.on('error', () => undefined);
  try {
    await client.connect();
    return client;
  } catch (e) {
    await client.end().catch(() => undefined);
    const code = (e as { code?: string }).code;
    throw new DatabaseUnavailableError(
      `cannot reach ${t.shown}: ${(e as Error).message}${code ? ` (${code})` : ''}`,
    );
  }
}

/** The version of an existing SQLite file without writing to it; 0 for no file. */
function sqliteVersionReadOnly(path: string): number | 'unversioned' {
  if (!existsSync(path)) return 0;
  let db: Database.Database;
  try {
    db = new Database(path, { readonly: true, fileMustExist: true });
  } catch (e) {
    throw new DatabaseUnavailableError(`cannot open ${path}: ${(e as Error).message}`);
  }
  try {
    return sqliteSchemaVersion(db);
  } catch (e) {
    throw new DatabaseUnavailableError(`${path} is not a readable database: ${(e as Error).message}`);
  } finally {
    db.close();
  }
}

async function migrate(t: Target): Promise<MigrationReport> {
  if (t.engine === 'postgres') {
    const client = await connect(t);
    try {
      return await migratePostgres(client, t.shown);
    } finally {
      await client.end();
    }
  }
  const from = sqliteVersionReadOnly(t.location);
  let to: number;
  try {
    // The gateway's own open: WAL, page size, then the migrations (store/sqlite/db.ts).
    const db = openDatabase(t.location);
    to = sqliteSchemaVersion(db) as number;
    db.close();
  } catch (e) {
    if (e instanceof CmcpError) throw e;
    throw new DatabaseUnavailableError(`cannot open ${t.location}: ${(e as Error).message}`);
  }
  const start = from === 'unversioned' ? 0 : from;
  const applied = SQLITE_MIGRATIONS.filter((m) => m.version > start && m.version <= to).map(
    ({ version, description }) => ({ version, description }),
  );
  return { engine: 'sqlite', from, to, applied };
}

async function status(t: Target): Promise<number | 'unversioned'> {
  if (t.engine === 'sqlite') {
    if (!existsSync(t.location)) throw new DatabaseUnavailableError(`no database at ${t.location}`);
    return sqliteVersionReadOnly(t.location);
  }
  const client = await connect(t);
  try {
    return await postgresSchemaVersion(client);
  } finally {
    await client.end();
  }
}

function describeVersion(v: number | 'unversioned'): string {
  if (v === 'unversioned')
    return 'unversioned (made before the versioned schema; migrate takes it over at version 1)';
  if (v === 0) return '0 (no cmcp schema)';
  if (v > LATEST_SCHEMA_VERSION)
    return `${v} (newer than this cmcp, which knows up to ${LATEST_SCHEMA_VERSION})`;
  return `${v}${v === LATEST_SCHEMA_VERSION ? ' (latest)' : ` (latest is ${LATEST_SCHEMA_VERSION})`}`;
}

function migrateText(t: Target, r: MigrationReport): string {
  const lines = [`database: ${t.shown} (${t.engine})`, `found schema version ${describeVersion(r.from)}`];
  for (const m of r.applied) lines.push(`applied ${m.version}: ${m.description}`);
  lines.push(
    r.applied.length
      ? `now at schema version ${r.to}`
      : `nothing to do: schema version ${r.to} is the latest this cmcp knows`,
  );
  return `${lines.join('\n')}\n`;
}

/** Runs one subcommand, turning a refusal into one line on stderr and its exit code. */
async function guarded(work: () => Promise<string>): Promise<void> {
  try {
    process.stdout.write(await work());
  } catch (e) {
    if (e instanceof ConfigError) {
      process.stderr.write(`cmcp: ${e.message}\n`);
      process.exit(2);
    }
    if (e instanceof CmcpError) {
      process.stderr.write(`cmcp db: ${e.message} (${e.code})\n`);
      process.exit(e instanceof SchemaTooNewError ? 1 : 2);
    }
    throw e;
  }
}

type DbOptions = { database?: string; config?: string; json?: boolean };

export function registerDbCommand(program: Command): void {
  const cmd = program.command('db').description('the database schema: versions and migrations');
  const common = (c: Command) =>
    c
      .option('--database <path-or-url>', 'SQLite file path or postgres:// URL')
      .option('-c, --config <file>', "YAML configuration file (its 'database')")
      .option('--json', 'JSON output');
  common(
    cmd.command('migrate').description('apply the pending schema migrations, then say what was done'),
  ).action((o: DbOptions) =>
    guarded(async () => {
      const t = target(o);
      const r = await migrate(t);
      return o.json
        ? `${JSON.stringify({ database: t.shown, ...r, latest: LATEST_SCHEMA_VERSION })}\n`
        : migrateText(t, r);
    }),
  );
  common(cmd.command('status').description('print the schema version (writes nothing)')).action(
    (o: DbOptions) =>
      guarded(async () => {
        const t = target(o);
        const v = await status(t);
        const report = o.json
          ? `${JSON.stringify({ database: t.shown, engine: t.engine, version: v, latest: LATEST_SCHEMA_VERSION })}\n`
          : `database: ${t.shown} (${t.engine})\nschema version ${describeVersion(v)}\n`;
        // A database this cmcp cannot serve is a failed status, as `cmcp start` refuses it (exit 1).
        if (typeof v === 'number' && v > LATEST_SCHEMA_VERSION) {
          process.stdout.write(report);
          throw new SchemaTooNewError(v, t.shown);
        }
        return report;
      }),
  );
}
