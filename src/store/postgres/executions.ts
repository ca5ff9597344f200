/**
 * The execution registry on PostgreSQL (docs/spec/execution.md, docs/replicas.md#execution-admission-across-replicas):
 * admission is one `INSERT … ON CONFLICT (agent_id, execution_id) DO NOTHING` — a second
 * inserter of the same key, on any replica, waits on the first's uncommitted row and then
 * inserts nothing (or inserts, if the first rolled back) — so exactly one transaction admits.
 * The loser reads the committed row and is refused by the registry's own order of checks
 * (store/executions.ts classifyExisting): the codes do not change.
 */
import type pg from 'pg';
import { classifyExisting } from '../executions.js';
import type { Admission, ExecutionRow, Reservation, TerminalState } from '../port.js';

/** The row for an agent's execution_id, or undefined. Reads only. */
export async function getExecution(
  db: pg.Pool | pg.ClientBase,
  agentId: string,
  executionId: string,
): Promise<ExecutionRow | undefined> {
  const r = await db.query<ExecutionRow>(
    'SELECT * FROM executions WHERE agent_id = $1 AND execution_id = $2',
    [agentId, executionId],
  );
  return r.rows[0];
}

/**
 * Admission inside the caller's fenced transaction: reserves an `in_flight` row owned by
 * `owner`, or classifies the row that holds the key.
 * @throws pg errors.
 */
export async function admitExecution(
  client: pg.ClientBase,
  inp: Reservation,
  owner: string,
): Promise<Admission> {
  const now = new Date().toISOString();
  const r = await client.query(
    `INSERT INTO executions (agent_id, execution_id, binding, state, call_id, session_id, tool_name, owner, created_at, updated_at)
     VALUES ($1,$2,$3,'in_flight',$4,$5,$6,$7,$8,$8) ON CONFLICT (agent_id, execution_id) DO NOTHING RETURNING 1`,
    [inp.agentId, inp.executionId, inp.binding, inp.callId, inp.sessionId, inp.toolName, owner, now],
  );
  if (r.rowCount === 1) return { kind: 'admitted' };
  const existing = await getExecution(client, inp.agentId, inp.executionId);
  if (!existing) throw new Error(`execution ${inp.executionId}: conflicting row vanished`);
  return classifyExisting(existing, inp.binding);
}

/**
 * Moves this call's `in_flight` row to its terminal state, inside the transaction that appends
 * the terminal entry. @throws when the row is not this call's in_flight row (already sealed by
 * recovery or another replica): the terminal entry must not commit.
 */
export async function finishExecution(
  client: pg.ClientBase,
  key: { agentId: string; executionId: string; callId: string },
  state: TerminalState,
  entryHash: string,
): Promise<void> {
  const r = await client.query(
    `UPDATE executions SET state = $1, updated_at = $2, terminal_entry_hash = $3
     WHERE agent_id = $4 AND execution_id = $5 AND call_id = $6 AND state = 'in_flight'`,
    [state, new Date().toISOString(), entryHash, key.agentId, key.executionId, key.callId],
  );
  if (r.rowCount !== 1) throw new Error('execution row is not in flight for this call');
}

/** `owner`'s in-flight rows, oldest first. Reads only. */
export async function inFlightExecutions(
  db: pg.Pool | pg.ClientBase,
  owner: string,
): Promise<ExecutionRow[]> {
  const r = await db.query<ExecutionRow>(
    "SELECT * FROM executions WHERE state = 'in_flight' AND owner = $1 ORDER BY created_at",
    [owner],
  );
  return r.rows;
}
