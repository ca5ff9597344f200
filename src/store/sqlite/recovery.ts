/**
 * Recovery of calls that may have run upstream without a terminal entry
 * (docs/spec/execution.md#recovery): at start-up, before the listener opens, and at a graceful
 * shutdown for what did not drain. Each open attempt of this instance gets exactly one terminal
 * `tool_call` entry, `outcome_unknown` with CALL_INTERRUPTED, in the session chain it ran in
 * (so that session's claim counts it) — or in the gateway chain, naming the session, when the
 * session was closed meanwhile (audit-entries.md#terminal-entries). The entry, the session's
 * call count, the execution row's terminal state and the attempt's end commit in one
 * IMMEDIATE transaction per attempt. SQLite's; a replica's counterpart is
 * store/postgres/sealing.ts.
 */
import { type AuditEntry, GATEWAY_CHAIN_ID } from '@cmcp/verify/formats';
import type { EntryInput } from '../entries/next-entry.js';
import { interruptedAttemptEntry, interruptedExecutionEntry, reservedByAttempt } from '../interrupted.js';
import type { AttemptRow, ExecutionRow } from '../port.js';
import type { AttemptLog } from './attempts.js';
import type { AuditChain } from './chain.js';
import { type Db, immediate, immediateAsync } from './db.js';
import type { ExecutionRegistry } from './executions.js';

/** What recovery needs of the sessions: where an entry may go, and the claim's call count. */
export interface SessionCounter {
  isOpen(sessionId: string): boolean;
  countCall(sessionId: string): void;
}

/** How many calls recovery ended. */
export interface Recovered {
  /** Attempts given their terminal entry (with or without execution_id). */
  attempts: number;
  /** In-flight execution rows without an attempt (databases from before attempts) sealed. */
  executions: number;
}

export class CallRecovery {
  /** The entries a shutdown's {@link runAwaited} wrote, by call_id (answers name them). */
  private readonly interruptedAtShutdown = new Map<string, AuditEntry>();

  constructor(
    private readonly db: Db,
    private readonly chain: AuditChain,
    private readonly attempts: AttemptLog,
    private readonly executions: ExecutionRegistry,
    private readonly sessions: SessionCounter,
  ) {}

  /**
   * Ends every open attempt of this instance, then every in-flight execution row of this
   * instance that no attempt covers. Must run when none of them can still commit its own
   * terminal entry: before the listener opens, or after a shutdown's drain time.
   * @param reason the `detail.reason` of each entry.
   * @throws SQLite errors (what was ended before stays ended).
   */
  run(reason: string): Recovered {
    let attempts = 0;
    for (const a of this.attempts.open()) {
      immediate(this.db, () => this.endAttempt(a, reason));
      attempts++;
    }
    const legacy = this.db
      .prepare<[string], ExecutionRow>(
        "SELECT * FROM executions WHERE state = 'in_flight' AND owner = ? ORDER BY created_at",
      )
      .all(this.executions.owner);
    for (const row of legacy) immediate(this.db, () => this.sealExecution(row, reason));
    return { attempts, executions: legacy.length };
  }

  /**
   * {@link run} for a shutdown (the event loop still serves probes and answers): each entry's
   * transaction waits for a write lock held by another process by awaiting (store/sqlite/db.ts
   * immediateAsync). @throws (rejects) as {@link run}.
   */
  async runAwaited(reason: string): Promise<Recovered> {
    let attempts = 0;
    for (const a of this.attempts.open()) {
      // Its terminal entry may have committed since the read (the store worker's connection):
      // then it is not sealed a second time.
      const e = await immediateAsync(this.db, () => {
        if (!this.attempts.isOpen(a.call_id)) return null;
        return this.endAttempt(a, reason);
      });
      if (e) {
        this.interruptedAtShutdown.set(a.call_id, e);
        attempts++;
      }
    }
    const legacy = this.db
      .prepare<[string], ExecutionRow>(
        "SELECT * FROM executions WHERE state = 'in_flight' AND owner = ? ORDER BY created_at",
      )
      .all(this.executions.owner);
    for (const row of legacy) await immediateAsync(this.db, () => this.sealExecution(row, reason));
    return { attempts, executions: legacy.length };
  }

  /**
   * The terminal entry {@link runAwaited} recorded for a call, or null: what the call's
   * CALL_INTERRUPTED answer names as its evidence (docs/spec/call-path.md#shutdown).
   */
  interrupted(callId: string): AuditEntry | null {
    return this.interruptedAtShutdown.get(callId) ?? null;
  }

  private endAttempt(a: AttemptRow, reason: string): AuditEntry {
    const e = this.append(a.session_id, interruptedAttemptEntry(a, reason));
    if (a.execution_id !== null) {
      const x = this.executions.get(a.agent_id, a.execution_id);
      if (reservedByAttempt(x, a))
        this.executions.finish(a.agent_id, a.execution_id, a.call_id, 'outcome_unknown', e.entry_hash);
    }
    this.attempts.end(a.call_id);
    return e;
  }

  private sealExecution(row: ExecutionRow, reason: string): void {
    const e = this.append(row.session_id, interruptedExecutionEntry(row, reason));
    this.executions.finish(row.agent_id, row.execution_id, row.call_id, 'outcome_unknown', e.entry_hash);
  }

  /** Appends to the session's chain while it is open (and counts the call), else the gateway chain. */
  private append(sessionId: string, input: EntryInput): AuditEntry {
    const open = this.sessions.isOpen(sessionId);
    const e = this.chain.append(open ? sessionId : GATEWAY_CHAIN_ID, input);
    if (open) this.sessions.countCall(sessionId);
    return e;
  }
}
