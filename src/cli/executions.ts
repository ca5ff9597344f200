/**
 * `cmcp executions list|show --db FILE`: the operator's read-only view of the execution
 * registry. Opens the database read-only (a postgres:// URL: every replica's registry, in a
 * READ ONLY transaction, executions-postgres.ts); never invokes anything. Exit codes: 1 a
 * database newer than this cmcp (DATABASE_SCHEMA_TOO_NEW); 2 bad flags, no or no readable
 * database, an unreachable server.
 */
import { existsSync } from 'node:fs';
import type { Command } from 'commander';
import { isPostgresUrl, LATEST_SCHEMA_VERSION, SchemaTooNewError } from '../store/migrations/index.js';
import { sqliteSchemaVersion } from '../store/migrations/sqlite.js';
import type { ExecutionRow, ExecutionState } from '../store/port.js';
import { type Db, openReadOnlyDatabase } from '../store/sqlite/db.js';
import { assertRegistry, listExecutions, readExecution } from '../store/sqlite/executions.js';
import { type ExecutionQuery, readPostgresExecutions } from './executions-postgres.js';
import { terminalSafe } from './terminal.js';

/** The rows of a postgres:// database; a failure printed with its code (exit 1 too new, else 2). */
async function fromPostgres(url: string, q: ExecutionQuery): Promise<ExecutionRow[]> {
  try {
    return await readPostgresExecutions(url, q);
  } catch (e) {
    const code = (e as { code?: string }).code ?? 'error';
    process.stderr.write(`cmcp: ${(e as Error).message} (${code})\n`);
    process.exit(code === 'DATABASE_SCHEMA_TOO_NEW' ? 1 : 2);
  }
}

function openReadOnly(file: string): Db {
  if (!existsSync(file)) {
    process.stderr.write(`cmcp: no database at ${file}\n`);
    process.exit(2);
  }
  try {
    const db = openReadOnlyDatabase(file);
    refuseTooNew(db, file);
    // Fails here (not later with a stack trace) when the file is no cmcp database.
    assertRegistry(db);
    return db;
  } catch (e) {
    process.stderr.write(
      `cmcp: ${file} is not a readable cmcp database (${(e as { code?: string }).code ?? 'error'})\n`,
    );
    process.exit(2);
  }
}

/**
 * A database newer than this cmcp is refused as `cmcp start` and `cmcp db` refuse it: its
 * tables may not mean what this code reads (exit 1, DATABASE_SCHEMA_TOO_NEW).
 */
function refuseTooNew(db: Db, file: string): void {
  const version = sqliteSchemaVersion(db);
  if (typeof version !== 'number' || version <= LATEST_SCHEMA_VERSION) return;
  db.close();
  const e = new SchemaTooNewError(version, file);
  process.stderr.write(`cmcp: ${e.message} (${e.code})\n`);
  process.exit(1);
}

const STATES = ['in_flight', 'completed', 'not_attempted', 'outcome_unknown'];

/** One table row; every value is made terminal-safe (tool names are chosen by upstreams). */
function line(r: ExecutionRow): string {
  return [r.state.padEnd(15), r.agent_id, r.execution_id, r.tool_name, r.call_id, r.updated_at]
    .map((v) => terminalSafe(String(v)))
    .join('  ');
}

export function registerExecutionsCommand(program: Command): void {
  const cmd = program.command('executions').description('read the execution registry (read-only)');
  cmd
    .command('list')
    .description('list executions, newest first')
    .requiredOption('--db <file>', 'gateway database: a SQLite file or a postgres:// URL')
    .option('--agent <agent_id>', 'only this agent')
    .option('--state <state>', 'only this state (in_flight, completed, not_attempted, outcome_unknown)')
    .option('--json', 'JSON output')
    .action(async (o: { db: string; agent?: string; state?: string; json?: boolean }) => {
      if (o.state !== undefined && !STATES.includes(o.state)) {
        process.stderr.write(`cmcp: --state must be one of ${STATES.join(', ')}\n`);
        process.exit(2);
      }
      const filter = { agentId: o.agent ?? null, state: (o.state as ExecutionState | undefined) ?? null };
      let rows: ExecutionRow[];
      if (isPostgresUrl(o.db)) rows = await fromPostgres(o.db, { kind: 'list', filter });
      else {
        const db = openReadOnly(o.db);
        rows = listExecutions(db, filter);
        db.close();
      }
      if (o.json) process.stdout.write(`${JSON.stringify(rows, null, 2)}\n`);
      else {
        process.stdout.write(
          `${['state'.padEnd(15), 'agent', 'execution_id', 'tool', 'call_id', 'updated_at'].join('  ')}\n`,
        );
        for (const r of rows) process.stdout.write(`${line(r)}\n`);
        process.stdout.write(`${rows.length} execution(s)\n`);
      }
    });
  cmd
    .command('show')
    .description('show one execution')
    .requiredOption('--db <file>', 'gateway database: a SQLite file or a postgres:// URL')
    .requiredOption('--agent <agent_id>', 'the owning agent (execution ids are scoped by agent)')
    .argument('<execution_id>')
    .option('--json', 'JSON output')
    .action(async (executionId: string, o: { db: string; agent: string; json?: boolean }) => {
      let row: ExecutionRow | undefined;
      if (isPostgresUrl(o.db))
        [row] = await fromPostgres(o.db, { kind: 'show', agentId: o.agent, executionId });
      else {
        const db = openReadOnly(o.db);
        row = readExecution(db, o.agent, executionId);
        db.close();
      }
      if (!row) {
        process.stderr.write('cmcp: EXECUTION_NOT_FOUND: no such execution for this agent\n');
        process.exit(1);
      }
      if (o.json) process.stdout.write(`${JSON.stringify(row, null, 2)}\n`);
      else
        for (const [k, v] of Object.entries(row))
          process.stdout.write(`${k.padEnd(20)} ${terminalSafe(String(v ?? '-'))}\n`);
    });
}
