/**
 * `cmcp executions list|show` on a shared PostgreSQL (docs/replicas.md#serving-as-a-replica):
 * the same rows and order as the SQLite view (store/sqlite/executions.ts listExecutions,
 * readExecution), every replica's admissions, read in one READ ONLY transaction. A database
 * newer than this cmcp is refused (DATABASE_SCHEMA_TOO_NEW) and one without the cmcp schema is
 * not read, as on SQLite.
 */
import pg from 'pg';
import {
  DatabaseUnavailableError,
  LATEST_SCHEMA_VERSION,
  redactPostgresUrl,
  SchemaTooNewError,
} from '../store/migrations/index.js';
import { postgresSchemaVersion } from '../store/migrations/postgres.js';
import type { ExecutionRow } from '../store/port.js';
import type { ExecutionFilter } from '../store/sqlite/executions.js';

/** What the command asks: every matching row, or one agent's execution. */
export type ExecutionQuery =
  | { kind: 'list'; filter: ExecutionFilter }
  | { kind: 'show'; agentId: string; executionId: string };

/**
 * Runs `q` on the PostgreSQL `url` without writing.
 * @returns (resolves) the rows, newest first (`show`: zero or one).
 * @throws (rejects) DatabaseUnavailableError (unreachable, or no cmcp schema there);
 *   SchemaTooNewError (DATABASE_SCHEMA_TOO_NEW); pg errors.
 */
export async function readPostgresExecutions(url: string, q: ExecutionQuery): Promise<ExecutionRow[]> {
  const shown = redactPostgresUrl(url);
  const client = new pg.Client({ connectionString: url, connectionTimeoutMillis: 10_000 });
  client.on('error', () => undefined);
  try {
    await client.connect();
  } catch (e) {
    await client.end().catch(() => undefined);
    throw new DatabaseUnavailableError(`cannot reach ${shown}: ${(e as Error).message}`);
  }
  try {
    await client.query('BEGIN READ ONLY');
    const version = await postgresSchemaVersion(client);
    if (version > LATEST_SCHEMA_VERSION) throw new SchemaTooNewError(version, shown);
    if (version === 0) throw new DatabaseUnavailableError(`${shown} holds no cmcp schema`);
    const r =
      q.kind === 'list'
        ? await client.query<ExecutionRow>(
            `SELECT * FROM executions WHERE ($1::text IS NULL OR agent_id = $1) AND ($2::text IS NULL OR state = $2)
              ORDER BY created_at DESC`,
            [q.filter.agentId, q.filter.state],
          )
        : await client.query<ExecutionRow>(
            'SELECT * FROM executions WHERE agent_id = $1 AND execution_id = $2',
            [q.agentId, q.executionId],
          );
    await client.query('COMMIT');
    return r.rows;
  } finally {
    await client.end().catch(() => undefined);
  }
}
