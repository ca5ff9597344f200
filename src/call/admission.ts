/**
 * The admission stage (docs/spec/execution.md): for a call with an execution_id, one IMMEDIATE transaction
 * reserves the (agent, execution_id) key with its action binding and records the call's
 * attempt (attempts.ts), or classifies the existing row — and records the refusal in the same
 * transaction. Without an execution_id nothing is reserved.
 */
import { toolCallBinding } from '../execution/binding.js';
import { type Db, immediateAsync } from '../store/db.js';
import type { ExecutionRegistry } from '../store/sqlite/executions.js';
import { admissionRefusal } from '../store/writes.js';
import type { CallResponse, Refusal } from './types.js';

export interface AdmissionInput {
  agentId: string;
  executionId: string;
  callId: string;
  sessionId: string;
  serverIdentity: string;
  toolName: string;
  arguments: Record<string, unknown>;
  actionTimestamp: string | null;
}

export type Admitted = { kind: 'admitted' } | { kind: 'refused'; response: CallResponse };

/** The action binding the execution_id is reserved with (execution/binding.ts). */
export function actionBinding(a: AdmissionInput): string {
  return toolCallBinding({
    agentId: a.agentId,
    serverIdentity: a.serverIdentity,
    toolName: a.toolName,
    arguments: a.arguments,
    actionTimestamp: a.actionTimestamp,
  });
}

/**
 * Admits a call under its {@link actionBinding}. `record` writes a refusal's terminal entry
 * inside the admission transaction and answers for it; `attempt` records the admitted call's
 * attempt inside it (the reservation and the attempt commit together). A write lock held by
 * another process is waited for by awaiting (store/db.ts immediateAsync).
 * @throws what the transaction throws (the admission could not be recorded).
 */
export function admit(
  db: Db,
  executions: ExecutionRegistry,
  a: AdmissionInput,
  binding: string,
  record: (r: Refusal) => CallResponse,
  attempt: () => void,
): Promise<Admitted> {
  return immediateAsync(db, () => {
    const r = executions.admit({
      agentId: a.agentId,
      executionId: a.executionId,
      binding,
      callId: a.callId,
      sessionId: a.sessionId,
      toolName: a.toolName,
    });
    if (r.kind === 'admitted') {
      attempt();
      return { kind: 'admitted' } as const;
    }
    return { kind: 'refused', response: record(admissionRefusal(r, a.executionId)) } as const;
  });
}
