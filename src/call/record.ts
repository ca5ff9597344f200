/**
 * The terminal record of one `tools/call` (docs/spec/audit-entries.md): every call that reaches the call path
 * ends in exactly one `tool_call` entry — in its session's chain, or in the gateway chain when
 * no session could be resolved — committed with the session's call count and the execution
 * registry's terminal state in one IMMEDIATE transaction.
 */
import { type AuditEntry, GATEWAY_CHAIN_ID } from '@cmcp/verify/format/entry';
import type { AuditChain, EntryInput } from '../audit/chain.js';
import type { SessionService } from '../session/service.js';
import { type Db, immediate, immediateAsync } from '../store/db.js';
import { maybeFail } from '../store/faults.js';
import type { AttemptLog } from '../store/sqlite/attempts.js';
import type { ExecutionRegistry } from '../store/sqlite/executions.js';
import type { Disposition } from './forward.js';

/** The execution a forwarded call moves to its terminal state. */
export interface ExecutionKey {
  agentId: string;
  executionId: string;
  callId: string;
}

export class TerminalRecorder {
  constructor(
    private readonly db: Db,
    private readonly chain: AuditChain,
    private readonly sessions: Pick<SessionService, 'countCall' | 'isOpen'>,
    private readonly executions: ExecutionRegistry,
    private readonly attempts: AttemptLog,
  ) {}

  /**
   * Appends a refusal as the call's terminal entry; with a session it goes to the session's
   * live chain and counts as one of its calls. A lock held by another process is waited for
   * without holding the event loop (store/db.ts immediateAsync).
   * @throws what the append throws (SQLite, CanonicalJsonError).
   */
  refusal(sessionId: string | null, input: EntryInput): Promise<AuditEntry> {
    return immediateAsync(this.db, () => this.refusalNow(sessionId, input));
  }

  /**
   * {@link refusal} inside the caller's open transaction (admission refusals), which it joins.
   * @throws what the append throws (SQLite, CanonicalJsonError).
   */
  refusalNow(sessionId: string | null, input: EntryInput): AuditEntry {
    return immediate(this.db, () => {
      const e = this.chain.append(sessionId ? this.liveChain(sessionId) : GATEWAY_CHAIN_ID, {
        ...input,
        disposition: 'refused',
      });
      if (sessionId) this.sessions.countCall(sessionId);
      return e;
    });
  }

  /**
   * Appends a forwarded call's terminal entry; the registry state and the audit disposition
   * are the same word, in one commit, which also ends the call's attempt (attempts.ts).
   * @throws what the append or the registry throws; when the attempt was already ended (a
   *   shutdown recorded it outcome_unknown); the `terminal_commit` fault seam; SQLITE_BUSY when
   *   another process held the write lock for the whole busy timeout (waited for by awaiting).
   */
  outcome(
    sessionId: string,
    input: EntryInput,
    disposition: Disposition,
    execution: ExecutionKey | null,
  ): Promise<AuditEntry> {
    return immediateAsync(this.db, () => {
      const e = this.chain.append(this.liveChain(sessionId), { ...input, disposition });
      if (execution)
        this.executions.finish(
          execution.agentId,
          execution.executionId,
          execution.callId,
          disposition,
          e.entry_hash,
        );
      this.sessions.countCall(sessionId);
      this.attempts.end(input.call_id as string);
      maybeFail('terminal_commit');
      return e;
    });
  }

  /**
   * The chain a call's terminal entry goes to: its session's, unless the session was closed
   * (by the agent or by rotation) while the call ran — its claim already fixed the chain's
   * tip, so the entry goes to the gateway chain instead (it still names the session).
   */
  private liveChain(sessionId: string): string {
    return this.sessions.isOpen(sessionId) ? sessionId : GATEWAY_CHAIN_ID;
  }
}
