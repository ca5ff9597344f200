/** The `call_attempts` row of an attempt, one mapping for both engines (store/sqlite/attempts.ts, store/postgres/attempts.ts). */
import type { AttemptStart } from './port.js';

/**
 * The columns of a `call_attempts` row, in the order of {@link attemptRowValues}: the one
 * mapping of an {@link AttemptStart} to its row, for both engines (store/postgres/attempts.ts).
 */
export const ATTEMPT_COLUMNS =
  'call_id, method, upstream, agent_id, session_id, execution_id, tool_name, request_payload_hash, workflow_id, owner, started_at';

/**
 * The values of the row recording `a`, in {@link ATTEMPT_COLUMNS} order.
 * @param owner the instance (SQLite) or replica (PostgreSQL) that made the attempt.
 * @param startedAt ISO 8601 UTC, when the row is written.
 */
export function attemptRowValues(a: AttemptStart, owner: string, startedAt: string): (string | null)[] {
  return [
    a.callId,
    a.method,
    a.upstream,
    a.agentId,
    a.sessionId,
    a.executionId,
    a.toolName,
    a.requestPayloadHash,
    a.workflowId,
    owner,
    startedAt,
  ];
}
