/**
 * `cmcp db backup|restore|verify` (docs/operations.md#backup-and-restore): a copy of the store
 * taken while the gateway runs, put back into an empty place, and every audit chain checked
 * (store/port.ts AuditFeed, audit/verify-chains.ts) — after each backup and each restore, so a
 * copy that cannot be trusted is said to be so at once.
 *
 * SQLite: better-sqlite3's `backup()` (SQLite's online backup API: a consistent copy while
 * writers go on), restored by copying the file into a path that does not exist yet.
 * PostgreSQL: `pg_dump --format=custom`, restored by `pg_restore --single-transaction` into a
 * database with no cmcp schema; the restore then starts a new export era (store/postgres/
 * audit-feed.ts), so exports resumed with an earlier cursor miss nothing written afterwards.
 *
 * Exit codes: 0 done and every chain holds; 1 a chain does not hold (each problem printed);
 * 2 bad flags, an existing target, an unreachable database, a failed pg_dump or pg_restore.
 */
import { spawnSync } from 'node:child_process';
import { copyFileSync, existsSync } from 'node:fs';
import { join, resolve } from 'node:path';
import type { Command } from 'commander';
import pg from 'pg';
import { feedPages } from '../audit/export-lines.js';
import { type ChainsReport, verifyChains } from '../audit/verify-chains.js';
import { CmcpError } from '../errors/index.js';
import { DatabaseUnavailableError, isPostgresUrl, redactPostgresUrl } from '../store/migrations/index.js';
import { postgresSchemaVersion } from '../store/migrations/postgres.js';
import type { AuditFeed } from '../store/port.js';
import { postgresAuditFeed } from '../store/postgres/audit-feed.js';
import { sqliteAuditFeed } from '../store/sqlite/audit-feed.js';
import { openReadOnlyDatabase } from '../store/sqlite/db.js';

/** Every chain of `feed`, read in pages. */
function checkFeed(feed: AuditFeed): Promise<ChainsReport> {
  return verifyChains(feedPages(feed, { after: null, pageSize: 1000, follow: false, pollMs: 0 }));
}

async function withClient<T>(url: string, fn: (c: pg.Client) => Promise<T>): Promise<T> {
  const client = new pg.Client({ connectionString: url, connectionTimeoutMillis: 10_000 });
  client.on('error', () => undefined);
  try {
    await client.connect();
  } catch (e) {
    await client.end().catch(() => undefined);
    throw new DatabaseUnavailableError(`cannot reach ${redactPostgresUrl(url)}: ${(e as Error).message}`);
  }
  try {
    return await fn(client);
  } finally {
    await client.end().catch(() => undefined);
  }
}

/** Every chain of the database at `database` (a SQLite path or a postgres:// URL). */
export async function verifyDatabaseChains(database: string): Promise<ChainsReport> {
  if (isPostgresUrl(database)) return withClient(database, (c) => checkFeed(postgresAuditFeed(c)));
  const path = resolve(database);
  if (!existsSync(path)) throw new DatabaseUnavailableError(`no database at ${path}`);
  const db = openReadOnlyDatabase(path);
  try {
    return await checkFeed(sqliteAuditFeed(db));
  } finally {
    db.close();
  }
}

/**
 * Runs a PostgreSQL client program with the URL's password in its environment (PGPASSWORD),
 * never on its command line. @throws CmcpError DATABASE_UNAVAILABLE when it fails.
 */
function pgTool(bin: string | undefined, tool: string, url: string, args: string[]): void {
  const u = new URL(url);
  const password = decodeURIComponent(u.password);
  u.password = '';
  const env = { ...process.env, ...(password ? { PGPASSWORD: password } : {}) };
  const r = spawnSync(bin ? join(bin, tool) : tool, [...args, `--dbname=${u.toString()}`], {
    env,
    encoding: 'utf8',
  });
  if (r.status !== 0)
    throw new DatabaseUnavailableError(
      `${tool} failed (${r.error ? r.error.message : `exit ${r.status}`}): ${(r.stderr ?? '').trim().slice(0, 400)}`,
    );
}

async function backup(database: string, to: string, pgBin?: string): Promise<void> {
  const target = resolve(to);
  if (existsSync(target))
    throw new CmcpError('INVALID_PARAMS', `${target} exists; a backup never overwrites`);
  if (isPostgresUrl(database)) {
    pgTool(pgBin, 'pg_dump', database, ['--format=custom', '--no-owner', `--file=${target}`]);
    return;
  }
  const path = resolve(database);
  if (!existsSync(path)) throw new DatabaseUnavailableError(`no database at ${path}`);
  const db = openReadOnlyDatabase(path);
  try {
    await db.backup(target);
  } finally {
    db.close();
  }
}

async function restore(from: string, database: string, pgBin?: string): Promise<void> {
  const source = resolve(from);
  if (!existsSync(source)) throw new CmcpError('INVALID_PARAMS', `no backup at ${source}`);
  if (!isPostgresUrl(database)) {
    const target = resolve(database);
    if (existsSync(target))
      throw new CmcpError('INVALID_PARAMS', `${target} exists; restore into a path that does not`);
    copyFileSync(source, target);
    return;
  }
  const version = await withClient(database, (c) => postgresSchemaVersion(c));
  if (version !== 0)
    throw new CmcpError(
      'INVALID_PARAMS',
      `${redactPostgresUrl(database)} holds a cmcp schema; restore into an empty database`,
    );
  pgTool(pgBin, 'pg_restore', database, ['--single-transaction', '--exit-on-error', '--no-owner', source]);
  // The restored entries' transaction ids came from another server: what this one writes next
  // belongs to a new era, after all of them (store/postgres/audit-feed.ts).
  await withClient(database, async (c) => {
    await c.query('BEGIN');
    const r = await c.query<{ era: string }>('UPDATE audit_feed_era SET era = era + 1 RETURNING era::text');
    const era = Number(r.rows[0]?.era);
    await c.query(`ALTER TABLE audit_entries ALTER COLUMN feed_era SET DEFAULT ${era}`);
    await c.query('COMMIT');
  });
}

/** The report as printed: JSON, or one line per problem then a summary. */
function printReport(r: ChainsReport, json: boolean): void {
  if (json)
    process.stdout.write(
      `${JSON.stringify({ entries: r.entries, chains: r.chains.size, problems: r.problems, ok: r.problems.length === 0 })}\n`,
    );
  else {
    for (const p of r.problems) process.stdout.write(`problem: ${p}\n`);
    process.stdout.write(
      `${r.problems.length === 0 ? 'every chain holds' : 'chains do not hold'}: ${r.chains.size} chains, ${r.entries} entries\n`,
    );
  }
  if (r.problems.length > 0) process.exitCode = 1;
}

async function guarded(work: () => Promise<void>): Promise<void> {
  try {
    await work();
  } catch (e) {
    if (!(e instanceof CmcpError)) throw e;
    process.stderr.write(`cmcp db: ${e.message} (${e.code})\n`);
    process.exit(2);
  }
}

/** Adds `backup`, `restore` and `verify` to the `cmcp db` command. */
export function registerBackupCommands(cmd: Command): void {
  cmd
    .command('backup')
    .description('copy the store while the gateway runs, then check every chain of the copy')
    .requiredOption('--database <path-or-url>', 'SQLite file path or postgres:// URL')
    .requiredOption('--to <file>', 'the backup file (must not exist)')
    .option('--pg-bin <dir>', 'folder of pg_dump (default: from PATH)')
    .option('--json', 'JSON output')
    .action((o: { database: string; to: string; pgBin?: string; json?: boolean }) =>
      guarded(async () => {
        await backup(o.database, o.to, o.pgBin);
        // A SQLite backup is itself a database to check; a dump is checked once restored.
        if (!isPostgresUrl(o.database)) printReport(await verifyDatabaseChains(o.to), o.json === true);
        else
          process.stdout.write(
            `${o.json ? JSON.stringify({ backup: resolve(o.to) }) : `wrote ${resolve(o.to)}`}\n`,
          );
      }),
    );
  cmd
    .command('restore')
    .description(
      'put a backup into a new SQLite path or an empty PostgreSQL database, then check every chain',
    )
    .requiredOption('--from <file>', 'the backup file')
    .requiredOption(
      '--database <path-or-url>',
      'a SQLite path that does not exist, or an empty postgres:// database',
    )
    .option('--pg-bin <dir>', 'folder of pg_restore (default: from PATH)')
    .option('--json', 'JSON output')
    .action((o: { from: string; database: string; pgBin?: string; json?: boolean }) =>
      guarded(async () => {
        await restore(o.from, o.database, o.pgBin);
        printReport(await verifyDatabaseChains(o.database), o.json === true);
      }),
    );
  cmd
    .command('verify')
    .description('check every audit chain of the store (read-only)')
    .requiredOption('--database <path-or-url>', 'SQLite file path or postgres:// URL')
    .option('--json', 'JSON output')
    .action((o: { database: string; json?: boolean }) =>
      guarded(async () => printReport(await verifyDatabaseChains(o.database), o.json === true)),
    );
}
