/**
 * `cmcp audit export`: the audit entries of a SQLite file or a PostgreSQL database as JSON lines
 * (docs/audit-export.md), read-only, from the first entry or after a cursor, with `--follow`
 * waiting for new commits. `--output FILE` appends to FILE and resumes after its last line, so a
 * restarted export neither skips nor repeats an entry.
 *
 * Exit codes: 0 done (or stopped by SIGINT/SIGTERM while following); 1 a database newer than
 * this cmcp (DATABASE_SCHEMA_TOO_NEW); 2 bad flags, an unknown cursor (AUDIT_CURSOR_UNKNOWN), a
 * database that cannot be opened or reached, or one older than the export needs.
 */
import { createWriteStream, existsSync, type WriteStream } from 'node:fs';
import { resolve } from 'node:path';
import type { Command } from 'commander';
import pg from 'pg';
import { resumeExportFile } from '../audit/export-file.js';
import { EXPORT_FORMATS, type ExportFormat, feedPages, formatLine } from '../audit/export-lines.js';
import { CmcpError } from '../errors/index.js';
import {
  DatabaseUnavailableError,
  isPostgresUrl,
  LATEST_SCHEMA_VERSION,
  redactPostgresUrl,
  SchemaTooNewError,
} from '../store/migrations/index.js';
import { postgresSchemaVersion } from '../store/migrations/postgres.js';
import { sqliteSchemaVersion } from '../store/migrations/sqlite.js';
import type { AuditFeed } from '../store/port.js';
import { postgresAuditFeed } from '../store/postgres/audit-feed.js';
import { sqliteAuditFeed } from '../store/sqlite/audit-feed.js';
import { openReadOnlyDatabase } from '../store/sqlite/db.js';

/** The schema version that gives PostgreSQL's entries their feed position. */
const FEED_SCHEMA_VERSION = 7;

interface ExportOptions {
  database: string;
  after?: string;
  output?: string;
  follow?: boolean;
  format: string;
  pollMs: string;
  page: string;
}

/** A read-only feed over the database, and how to let go of it. */
async function openFeed(database: string): Promise<{ feed: AuditFeed; close: () => Promise<void> }> {
  if (isPostgresUrl(database)) {
    const shown = redactPostgresUrl(database);
    const client = new pg.Client({ connectionString: database, connectionTimeoutMillis: 10_000 });
    client.on('error', () => undefined);
    try {
      await client.connect();
    } catch (e) {
      await client.end().catch(() => undefined);
      throw new DatabaseUnavailableError(`cannot reach ${shown}: ${(e as Error).message}`);
    }
    const close = () => client.end().catch(() => undefined);
    const version = await postgresSchemaVersion(client);
    if (version > LATEST_SCHEMA_VERSION || version < FEED_SCHEMA_VERSION) {
      await close();
      if (version > LATEST_SCHEMA_VERSION) throw new SchemaTooNewError(version, shown);
      throw new DatabaseUnavailableError(
        `${shown} is at schema version ${version}; the export needs ${FEED_SCHEMA_VERSION} (run cmcp db migrate)`,
      );
    }
    return { feed: postgresAuditFeed(client), close };
  }
  const path = resolve(database);
  if (!existsSync(path)) throw new DatabaseUnavailableError(`no database at ${path}`);
  const db = openReadOnlyDatabase(path);
  const version = sqliteSchemaVersion(db);
  if (typeof version === 'number' && version > LATEST_SCHEMA_VERSION) {
    db.close();
    throw new SchemaTooNewError(version, path);
  }
  return {
    feed: sqliteAuditFeed(db),
    close: async () => {
      db.close();
    },
  };
}

/** Writes `text`, waiting for the stream to drain when it is full. */
async function write(out: NodeJS.WritableStream, text: string): Promise<void> {
  if (!out.write(text)) await new Promise<void>((r) => out.once('drain', () => r()));
}

async function runExport(o: ExportOptions): Promise<void> {
  if (!(EXPORT_FORMATS as readonly string[]).includes(o.format))
    throw new CmcpError('INVALID_PARAMS', `--format must be one of ${EXPORT_FORMATS.join(', ')}`);
  const pollMs = Number(o.pollMs);
  const pageSize = Number(o.page);
  if (
    !Number.isInteger(pollMs) ||
    pollMs < 10 ||
    !Number.isInteger(pageSize) ||
    pageSize < 1 ||
    pageSize > 10_000
  )
    throw new CmcpError('INVALID_PARAMS', '--poll-ms must be an integer ≥ 10 and --page one from 1 to 10000');
  if (o.after !== undefined && o.output !== undefined)
    throw new CmcpError(
      'INVALID_PARAMS',
      'give --after or --output (which resumes after its last line), not both',
    );
  const after = o.output !== undefined ? resumeExportFile(o.output) : (o.after ?? null);
  const { feed, close } = await openFeed(o.database);
  const file: WriteStream | null =
    o.output !== undefined ? createWriteStream(o.output, { flags: 'a' }) : null;
  const out: NodeJS.WritableStream = file ?? process.stdout;
  const stop = new AbortController();
  const onSignal = () => stop.abort();
  process.once('SIGINT', onSignal);
  process.once('SIGTERM', onSignal);
  try {
    const format = o.format as ExportFormat;
    const read = { after, pageSize, follow: o.follow === true, pollMs, signal: stop.signal };
    for await (const page of feedPages(feed, read))
      await write(out, page.map((f) => `${formatLine(f, format)}\n`).join(''));
  } finally {
    process.off('SIGINT', onSignal);
    process.off('SIGTERM', onSignal);
    await close();
    if (file) await new Promise<void>((r) => file.end(() => r()));
  }
}

export function registerAuditCommand(program: Command): void {
  const cmd = program.command('audit').description('the audit entries, for a SIEM or an archive');
  cmd
    .command('export')
    .description('every audit entry as JSON lines, in commit order, resumable from a cursor (read-only)')
    .requiredOption('--database <path-or-url>', 'SQLite file path or postgres:// URL')
    .option('--after <cursor>', 'start after the entry of this cursor (each line carries its own)')
    .option('--output <file>', 'append to this file, resuming after its last complete line')
    .option('--follow', 'keep exporting new entries as they commit, until SIGINT or SIGTERM')
    .option('--format <format>', `line shape: ${EXPORT_FORMATS.join(' or ')}`, 'cmcp')
    .option('--poll-ms <ms>', 'with --follow: how often to look for new entries', '1000')
    .option('--page <n>', 'entries read per query', '500')
    .action(async (o: ExportOptions) => {
      try {
        await runExport(o);
      } catch (e) {
        if (!(e instanceof CmcpError)) throw e;
        process.stderr.write(`cmcp audit: ${e.message} (${e.code})\n`);
        process.exit(e instanceof SchemaTooNewError ? 1 : 2);
      }
    });
}
