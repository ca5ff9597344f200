/**
 * The call path's durable writes as data: each command names one write that commits atomically on its
 * own, in the order it was sent, and is answered only once durable. {@link executeWrite} is the
 * one implementation of their meaning, over the domain objects (audit chain, execution
 * registry, attempt log, session counters); it runs inside the engine's write transaction
 * (SQLite: a SAVEPOINT of the group commit's `BEGIN IMMEDIATE`, store/sqlite/group-commit.ts), either on
 * the event loop (in-process) or in the store worker (store/sqlite/write-worker.ts). The commands
 * themselves are the storage port's (store/port.ts).
 *
 * Engine-neutral on purpose: commands and results are plain JSON-cloneable data, no statement,
 * no connection, no SQL.
 */
import { type AuditEntry, GATEWAY_CHAIN_ID } from '@cmcp/verify/formats';
import type { EntryInput } from './entries/next-entry.js';
import { maybeFail } from './faults.js';
import type {
  Admission,
  AttemptStart,
  Refusal,
  Reservation,
  TerminalState,
  WriteCommand,
  WriteResults,
} from './port.js';

export type { AdmissionResult, ExecutionKey, WriteCommand, WriteResults, WriteStore } from './port.js';

/** What a write does to one connection's records, inside its transaction (store/sqlite/writes.ts). */
export interface WriteContext {
  chain: { append(chainId: string, input: EntryInput): AuditEntry };
  executions: {
    admit(r: Reservation): Admission;
    finish(
      agentId: string,
      executionId: string,
      callId: string,
      state: TerminalState,
      entryHash: string,
    ): void;
  };
  attempts: { begin(a: AttemptStart): void; end(callId: string): void };
  sessionIsOpen(sessionId: string): boolean;
  countCall(sessionId: string): void;
  /** Raises the session's durable sensitivity to at least `level` (never lowers it). */
  raiseSensitivity(sessionId: string, level: number): void;
  /** Runs `fn` atomically inside the open transaction (SQLite: a nested SAVEPOINT). */
  atomic<T>(fn: () => T): T;
}

/**
 * The refusal of an admission that found the key taken (docs/spec/execution.md#admission).
 */
export function admissionRefusal(a: Exclude<Admission, { kind: 'admitted' }>, executionId: string): Refusal {
  const x = a.existing;
  const terminal = x.state === 'in_flight' ? null : x.terminal_entry_hash;
  return {
    code: a.kind,
    message:
      a.kind === 'EXECUTION_COLLISION'
        ? 'this execution_id is bound to a different action'
        : a.kind === 'EXECUTION_IN_FLIGHT'
          ? 'this execution_id is in flight'
          : `this execution_id is terminal (${x.state}) and is never run again`,
    entry: { detail: { execution_state: x.state, first_call_id: x.call_id, terminal_entry_hash: terminal } },
    data: { execution_id: executionId, execution_state: x.state, terminal_entry_hash: terminal },
  };
}

/**
 * The terminal entry of a refused admission: the call's entry as sent, with the refusal's
 * detail and code (both engines, store/postgres/write-store.ts).
 */
export function admissionRefusalEntry(refusalEntry: EntryInput, why: Refusal): EntryInput {
  return { ...refusalEntry, ...why.entry, error_code: why.code };
}

/**
 * Runs one command inside the caller's write transaction (module doc).
 * @throws what the domain objects throw (SQLite errors, an attempt already ended, …): the
 *   command's savepoint rolls back and it fails alone.
 */
export function executeWrite(ctx: WriteContext, cmd: WriteCommand): WriteResults[WriteCommand['kind']] {
  const liveChain = (sessionId: string) => (ctx.sessionIsOpen(sessionId) ? sessionId : GATEWAY_CHAIN_ID);
  const refusal = (sessionId: string | null, entry: EntryInput) => {
    const e = ctx.chain.append(sessionId ? liveChain(sessionId) : GATEWAY_CHAIN_ID, {
      ...entry,
      disposition: 'refused',
    });
    if (sessionId) ctx.countCall(sessionId);
    return e;
  };
  switch (cmd.kind) {
    case 'attempt':
      begin(ctx, cmd.attempt, cmd.raiseSensitivity);
      return null;
    case 'admission': {
      const r = ctx.executions.admit(cmd.admission);
      if (r.kind === 'admitted') {
        begin(ctx, cmd.attempt, cmd.raiseSensitivity);
        return { kind: 'admitted' };
      }
      const why = admissionRefusal(r, cmd.admission.executionId);
      const entry = admissionRefusalEntry(cmd.refusalEntry, why);
      try {
        const e = ctx.atomic(() => refusal(cmd.admission.sessionId, entry));
        return { kind: 'refused', refusal: why, entry: e };
      } catch (e) {
        return { kind: 'refusal-not-recorded', refusal: why, message: (e as Error).message };
      }
    }
    case 'terminal': {
      const e = ctx.chain.append(liveChain(cmd.sessionId), { ...cmd.entry, disposition: cmd.disposition });
      const x = cmd.execution;
      if (x) ctx.executions.finish(x.agentId, x.executionId, x.callId, cmd.disposition, e.entry_hash);
      ctx.countCall(cmd.sessionId);
      ctx.attempts.end(cmd.entry.call_id as string);
      maybeFail('terminal_commit');
      return e;
    }
    case 'refusal':
      return refusal(cmd.sessionId, cmd.entry);
  }
}

/** The attempt row and the session's sensitivity raise, together (call/orchestrator.ts begin). */
function begin(ctx: WriteContext, attempt: AttemptStart, level: number | null): void {
  ctx.attempts.begin(attempt);
  if (level !== null) ctx.raiseSensitivity(attempt.sessionId, level);
}
