/**
 * The execution registry (docs/spec/execution.md): one row per (agent_id, execution_id), reserved
 * `in_flight` with an immutable action binding before the upstream is invoked, moved to a
 * terminal state (`completed`, `not_attempted`, `outcome_unknown`) in the same transaction
 * as the call's terminal audit entry. Terminal rows refuse reuse forever. Start-up recovery of
 * rows left in flight is ./recovery.ts. SQLite's registry; PostgreSQL's is
 * store/postgres/executions.ts.
 */

import { classifyExisting } from '../executions.js';
import type { Admission, ExecutionRow, ExecutionState, Reservation, TerminalState } from '../port.js';
import { type Db, inImmediate } from './db.js';

export class ExecutionRegistry {
  private readonly getStmt;
  private readonly insertStmt;
  private readonly finishStmt;

  constructor(
    private readonly db: Db,
    /** This gateway's instance id: recovery seals only rows it owns. */
    readonly owner: string,
  ) {
    this.getStmt = db.prepare<[string, string], ExecutionRow>(
      'SELECT * FROM executions WHERE agent_id = ? AND execution_id = ?',
    );
    // A key already taken inserts nothing (and is read then): one statement per admitted call.
    this.insertStmt = db.prepare(
      `INSERT INTO executions (agent_id, execution_id, binding, state, call_id, session_id, tool_name, owner, created_at, updated_at)
       VALUES (?,?,?,'in_flight',?,?,?,?,?,?) ON CONFLICT (agent_id, execution_id) DO NOTHING`,
    );
    this.finishStmt = db.prepare(
      `UPDATE executions SET state = ?, updated_at = ?, terminal_entry_hash = ?
       WHERE agent_id = ? AND execution_id = ? AND call_id = ? AND state = 'in_flight'`,
    );
  }

  /** The row for an agent's execution_id, or undefined. Reads never invoke anything. */
  get(agentId: string, executionId: string): ExecutionRow | undefined {
    return this.getStmt.get(agentId, executionId);
  }

  /**
   * Admission, to be called inside the caller's `BEGIN IMMEDIATE` transaction: inserts an
   * `in_flight` row, or classifies the existing one. A different binding is a collision
   * whatever the state (checked first); then in_flight; then any terminal state is a replay.
   */
  admit(inp: Reservation): Admission {
    if (!inImmediate(this.db)) throw new Error('admission must run inside a BEGIN IMMEDIATE transaction');
    const now = new Date().toISOString();
    const inserted = this.insertStmt.run(
      inp.agentId,
      inp.executionId,
      inp.binding,
      inp.callId,
      inp.sessionId,
      inp.toolName,
      this.owner,
      now,
      now,
    ).changes;
    if (inserted === 1) return { kind: 'admitted' };
    return classifyExisting(this.getStmt.get(inp.agentId, inp.executionId) as ExecutionRow, inp.binding);
  }

  /**
   * Moves an admitted row to its terminal state, inside the transaction that appends the
   * terminal audit entry. @throws if the row is not this call's in_flight row.
   */
  finish(
    agentId: string,
    executionId: string,
    callId: string,
    state: TerminalState,
    entryHash: string,
  ): void {
    if (!inImmediate(this.db))
      throw new Error('terminal transition must run inside a BEGIN IMMEDIATE transaction');
    const r = this.finishStmt.run(state, new Date().toISOString(), entryHash, agentId, executionId, callId);
    if (r.changes !== 1) throw new Error('execution row is not in flight for this call');
  }
}

/** A filter of {@link listExecutions}: null members match everything. */
export interface ExecutionFilter {
  agentId: string | null;
  state: ExecutionState | null;
}

/**
 * Registry rows matching `filter`, newest first (operators' `cmcp executions list`). Reads
 * only: works on a read-only connection.
 * @throws SQLite errors, e.g. when the database holds no registry.
 */
export function listExecutions(db: Db, filter: ExecutionFilter): ExecutionRow[] {
  return db
    .prepare<[string | null, string | null, string | null, string | null], ExecutionRow>(
      'SELECT * FROM executions WHERE (? IS NULL OR agent_id = ?) AND (? IS NULL OR state = ?) ORDER BY created_at DESC',
    )
    .all(filter.agentId, filter.agentId, filter.state, filter.state);
}

/** One agent's execution row, or undefined (read-only connections too). */
export function readExecution(db: Db, agentId: string, executionId: string): ExecutionRow | undefined {
  return db
    .prepare<[string, string], ExecutionRow>(
      'SELECT * FROM executions WHERE agent_id = ? AND execution_id = ?',
    )
    .get(agentId, executionId);
}

/** Throws unless the database holds an execution registry (a cheap probe for read-only tools). */
export function assertRegistry(db: Db): void {
  db.prepare('SELECT 1 FROM executions LIMIT 1').all();
}
