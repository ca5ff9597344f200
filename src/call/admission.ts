/**
 * The admission stage (docs/spec/execution.md): for a call with an execution_id, one write
 * (store/port.ts `admission`) reserves the (agent, execution_id) key with its action binding
 * and records the call's attempt, or classifies the existing row — and records the refusal in
 * the same transaction. Without an execution_id nothing is reserved.
 */
import { toolCallBinding } from '../execution/binding.js';

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
