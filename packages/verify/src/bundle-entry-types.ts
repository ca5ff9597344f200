/**
 * `audit.entry_types`: the terminal entries of relayed MCP requests have the shape
 * docs/spec/audit-entries.md#relayed-requests gives them, and the count of entries by type.
 *
 * For each `resource_read`, `resource_subscribe`, `resource_unsubscribe`, `prompt_get`,
 * `completion`, `sampling_relay`, `elicitation_relay`, `roots_relay` and `task_result` entry: `detail.method`
 * is the method of its type; `agent_id` and `call_id` are present, and `policy_decision` unless the
 * request was refused before the policy ran;
 * `disposition` is completed, refused, not_attempted or outcome_unknown; a refusal names its
 * `error_code`; `request_payload_hash` is a `sha256:` digest and `response_payload_hash` one or
 * null, present for a completed answer without error. A self-consistent chain whose entries a
 * producer got wrong (or a forger built by hand) fails here with `ENTRY_TYPE_INVALID`.
 */
import type { AuditEntryBody } from './format/entry.js';
import { type CheckResult, fail, pass, quoteUntrusted } from './result.js';

/** Entry type → the MCP method it records. */
export const RELAYED_ENTRY_METHODS: Readonly<Record<string, string>> = {
  resource_read: 'resources/read',
  resource_subscribe: 'resources/subscribe',
  resource_unsubscribe: 'resources/unsubscribe',
  prompt_get: 'prompts/get',
  completion: 'completion/complete',
  sampling_relay: 'sampling/createMessage',
  elicitation_relay: 'elicitation/create',
  roots_relay: 'roots/list',
  task_result: 'tasks/result',
};

/**
 * Entry types that always name the agent they were written for: a session's open, binding and
 * close, each `tools/call` and each relayed request (refusals included). Written with
 * `agent_id: null`, such an entry would hide whose call it records from `audit.agent`. Other
 * types (gateway-level records, an unauthenticated request's refusal, a gateway-chain
 * binding failure) may name none.
 */
export const AGENT_ENTRY_TYPES: ReadonlySet<string> = new Set([
  'session_open',
  'attestation_bound',
  'tool_call',
  'session_close',
  ...Object.keys(RELAYED_ENTRY_METHODS),
]);

const DIGEST = /^sha256:[0-9a-f]{64}$/;
const DISPOSITIONS = new Set(['completed', 'refused', 'not_attempted', 'outcome_unknown']);

/** What is wrong with one relayed entry, or null. */
export function relayedEntryProblem(e: AuditEntryBody): string | null {
  const method = RELAYED_ENTRY_METHODS[e.entry_type];
  if (method === undefined) return null;
  if (e.detail?.method !== method) return `detail.method is not ${method}`;
  if (!e.agent_id || !e.call_id) return 'agent_id or call_id missing';
  if (!e.disposition || !DISPOSITIONS.has(e.disposition)) return 'disposition is not a terminal state';
  // Only a request refused before the policy ran (no such prompt, no upstream offers the method)
  // has no decision; every other outcome was decided.
  if (!e.policy_decision && e.disposition !== 'refused')
    return 'policy_decision missing (only a refusal before the policy may lack one)';
  if (e.disposition === 'refused' && !e.error_code) return 'a refusal without error_code';
  if (!e.request_payload_hash || !DIGEST.test(e.request_payload_hash))
    return 'request_payload_hash is not a sha256: digest';
  if (e.response_payload_hash !== null && !DIGEST.test(e.response_payload_hash))
    return 'response_payload_hash is not a sha256: digest';
  if (e.disposition === 'completed' && !e.error_code && e.response_payload_hash === null)
    return 'a completed answer without response_payload_hash';
  return null;
}

/** Entries counted by `entry_type` (sorted by type). */
export function countByType(entries: readonly AuditEntryBody[]): Record<string, number> {
  const counts: Record<string, number> = {};
  for (const e of [...entries].sort((a, b) => (a.entry_type < b.entry_type ? -1 : 1)))
    counts[e.entry_type] = (counts[e.entry_type] ?? 0) + 1;
  return counts;
}

/** Pushes `audit.entry_types` for the parsed entries. */
export function entryTypesCheck(entries: readonly AuditEntryBody[], checks: CheckResult[]): void {
  for (const e of entries) {
    const problem = relayedEntryProblem(e);
    if (problem) {
      checks.push(
        fail(
          'audit.entry_types',
          'ENTRY_TYPE_INVALID',
          `entry ${e.sequence_number} (${quoteUntrusted(e.entry_type)}): ${problem}`,
        ),
      );
      return;
    }
  }
  const relayed = entries.filter((e) => RELAYED_ENTRY_METHODS[e.entry_type] !== undefined).length;
  checks.push(
    pass('audit.entry_types', `${relayed} relayed-request entr${relayed === 1 ? 'y' : 'ies'} well formed`),
  );
}
