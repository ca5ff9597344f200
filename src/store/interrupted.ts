/**
 * The terminal entry of a call that may have run upstream without one
 * (docs/spec/execution.md#recovery, docs/spec/audit-entries.md#terminal-entries): a `tool_call`
 * entry, `outcome_unknown` with CALL_INTERRUPTED. One builder for both engines — start-up and
 * shutdown recovery on SQLite (store/sqlite/recovery.ts) and a replica's sealing on PostgreSQL
 * (store/postgres/sealing.ts) — so the entry a relying party sees does not depend on which one
 * wrote it.
 */
import type { EntryInput } from './entries/next-entry.js';
import type { AttemptRow, ExecutionRow } from './port.js';

/**
 * The entry ending an open attempt. `detail` is `{ reason, method, attempt_started_at }`, then
 * `extra` (a sealing replica names the sealed one and itself).
 * @param reason the `detail.reason`, e.g. `startup_recovery` or `replica_lease_expired`.
 */
export function interruptedAttemptEntry(
  a: AttemptRow,
  reason: string,
  extra: Record<string, string> = {},
): EntryInput {
  return {
    entry_type: 'tool_call',
    call_id: a.call_id,
    agent_id: a.agent_id,
    session_id: a.session_id,
    workflow_id: a.workflow_id,
    execution_id: a.execution_id,
    tool_name: a.tool_name,
    server_identity: a.upstream,
    request_payload_hash: a.request_payload_hash,
    disposition: 'outcome_unknown',
    error_code: 'CALL_INTERRUPTED',
    detail: { reason, method: a.method, attempt_started_at: a.started_at, ...extra },
  };
}

/**
 * The entry ending an in-flight execution row no attempt covers (databases from before
 * attempts): method `tools/call`, started when the row was reserved. `detail` as
 * {@link interruptedAttemptEntry}.
 */
export function interruptedExecutionEntry(
  row: ExecutionRow,
  reason: string,
  extra: Record<string, string> = {},
): EntryInput {
  return {
    entry_type: 'tool_call',
    call_id: row.call_id,
    agent_id: row.agent_id,
    session_id: row.session_id,
    execution_id: row.execution_id,
    tool_name: row.tool_name,
    disposition: 'outcome_unknown',
    error_code: 'CALL_INTERRUPTED',
    detail: { reason, method: 'tools/call', attempt_started_at: row.created_at, ...extra },
  };
}

/**
 * True when `x` is the reservation the attempt `a` made and it is still in flight: the
 * reservation and the attempt were committed together, so only this call's row moves with
 * the attempt's terminal entry (a later call under the same key is not touched).
 */
export function reservedByAttempt(x: ExecutionRow | undefined, a: AttemptRow): x is ExecutionRow {
  return x !== undefined && x.state === 'in_flight' && x.call_id === a.call_id;
}
