/**
 * The attempt log (docs/spec/execution.md#attempts): before any upstream is invoked for a call —
 * with or without an execution_id — one `call_attempts` row keyed by the gateway's call_id is
 * committed, naming the method, the upstream and the session the call runs in. The row is
 * deleted in the transaction that appends the call's terminal entry, so a row that is still
 * there after the process stopped is exactly a call that may have run upstream without a
 * record; recovery (./recovery.ts) gives each one its terminal entry.
 *
 * Generic on purpose: keyed by call_id with the MCP method, not by tools/call members, so the
 * relayed data-carrying methods use the same log. Never synthesizes an execution_id.
 */
import { ATTEMPT_COLUMNS, attemptRowValues } from '../attempt-row.js';
import type { AttemptRow, AttemptStart } from '../port.js';
import { type Db, inImmediate } from './db.js';

export class AttemptLog {
  private readonly insertStmt;
  private readonly deleteStmt;
  private readonly ownedStmt;
  private readonly openStmt;
  private closed = false;

  constructor(
    private readonly db: Db,
    /** This gateway's instance id: recovery ends only attempts it made. */
    readonly owner: string,
  ) {
    this.insertStmt = db.prepare(
      `INSERT INTO call_attempts (${ATTEMPT_COLUMNS}) VALUES (?,?,?,?,?,?,?,?,?,?,?)`,
    );
    this.deleteStmt = db.prepare('DELETE FROM call_attempts WHERE call_id = ?');
    this.ownedStmt = db.prepare<[string], AttemptRow>(
      'SELECT * FROM call_attempts WHERE owner = ? ORDER BY started_at, call_id',
    );
    this.openStmt = db.prepare<[string], { one: 1 }>('SELECT 1 AS one FROM call_attempts WHERE call_id = ?');
  }

  /**
   * Records an attempt, inside the caller's `BEGIN IMMEDIATE` transaction (the execution
   * reservation's, where there is one). @throws outside such a transaction; after {@link close}; SQLite errors
   * (a duplicate call_id is a constraint error).
   */
  begin(a: AttemptStart): void {
    if (!inImmediate(this.db)) throw new Error('an attempt must be recorded inside BEGIN IMMEDIATE');
    if (this.closed) throw new Error('the gateway is shutting down: no new attempt');
    this.insertStmt.run(...attemptRowValues(a, this.owner, new Date().toISOString()));
  }

  /**
   * Ends an attempt, inside the transaction that appends its terminal entry.
   * @throws when no attempt with this call_id is open (already ended, e.g. recorded
   *   outcome_unknown by a shutdown that did not wait for it): the terminal entry must not commit.
   */
  end(callId: string): void {
    if (!inImmediate(this.db)) throw new Error('an attempt must be ended inside BEGIN IMMEDIATE');
    if (this.deleteStmt.run(callId).changes !== 1)
      throw new Error(`no open attempt for call ${callId}: its terminal entry is already recorded`);
  }

  /**
   * Refuses every later {@link begin} (a shutdown past its drain time, before it records what
   * is still open): nothing is forwarded after recovery has run.
   */
  close(): void {
    this.closed = true;
  }

  /** True once {@link close} ran: a shutdown records what is still open as outcome_unknown. */
  get isClosed(): boolean {
    return this.closed;
  }

  /**
   * True while the attempt has not ended: read inside the transaction that would end it, since
   * another connection (the store worker) may have committed its terminal entry meanwhile.
   */
  isOpen(callId: string): boolean {
    return this.openStmt.get(callId) !== undefined;
  }

  /** This instance's open attempts, oldest first. */
  open(): AttemptRow[] {
    return this.ownedStmt.all(this.owner);
  }
}
