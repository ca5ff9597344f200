/**
 * The terminal audit entry of one relayed MCP request that carries data (docs/spec/audit-entries.md#relayed-requests):
 * `resources/read`, `prompts/get`, `completion/complete`, `resources/subscribe`,
 * `resources/unsubscribe`, `tasks/result` from the client, and `sampling/createMessage`, `elicitation/create`,
 * `roots/list` from an upstream to the client. Each ends in exactly one entry in the session's
 * chain (the gateway chain when no session could be resolved, or the session closed meanwhile),
 * with its own entry type, the method and target in `detail`, the upstream as
 * `server_identity`, SHA-256 digests of JCS of the request params and of the response (never
 * their content), the disposition and the policy decision. Relayed entries do not count as
 * tool calls (the claim's counters and transcript are about `tools/call`); the claim's
 * `entry_counts` counts them by type.
 */
import { randomUUID } from 'node:crypto';
import { type AuditEntry, jcsDigest } from '@cmcp/verify/formats';
import type { Logger } from 'pino';
import type { ErrorCode } from '../errors/index.js';
import type { EntryInput, RelayEntrySink } from '../store/port.js';

export type { RelayEntrySink } from '../store/port.js';

/** Entry type of each evidenced method. */
export const RELAY_ENTRY_TYPES = {
  'resources/read': 'resource_read',
  'resources/subscribe': 'resource_subscribe',
  'resources/unsubscribe': 'resource_unsubscribe',
  'prompts/get': 'prompt_get',
  'completion/complete': 'completion',
  'sampling/createMessage': 'sampling_relay',
  'elicitation/create': 'elicitation_relay',
  'roots/list': 'roots_relay',
  'tasks/result': 'task_result',
} as const;

export type EvidencedMethod = keyof typeof RELAY_ENTRY_TYPES;

/** Disposition of a relayed request (the words of docs/spec/execution.md). */
export type RelayDisposition = 'completed' | 'refused' | 'not_attempted' | 'outcome_unknown';

/** One relayed request's terminal facts. */
export interface RelayRecord {
  method: EvidencedMethod;
  agentId: string;
  /** The gateway session it belongs to, or null (gateway chain). */
  sessionId: string | null;
  upstream: string | null;
  /** The URI, gateway prompt name or completion ref; null for server-to-client requests. */
  target: string | null;
  /** The params as received (JCS-digested; never stored). */
  params: unknown;
  /** The result as answered (JCS-digested), or undefined. */
  result?: unknown;
  disposition: RelayDisposition;
  errorCode: ErrorCode | null;
  policy: Pick<EntryInput, 'policy_decision' | 'policy_rule_matched'>;
  detail?: Record<string, unknown>;
  /** process.hrtime.bigint() at receipt. */
  startedAt: bigint;
}

/** `sha256:` of JCS of a value, or null with the reason in `detail` when JCS cannot carry it. */
function digest(v: unknown, key: string, detail: Record<string, unknown>): string | null {
  if (v === undefined) return null;
  try {
    return jcsDigest(v);
  } catch (e) {
    detail[`${key}_error`] = (e as Error).message.slice(0, 200);
    return null;
  }
}

/** Appends the terminal entries of relayed requests. */
export class RelayRecorder {
  constructor(
    private readonly entries: RelayEntrySink,
    private readonly log: Logger,
    /** Told the code of every refusal recorded (metrics). */
    private readonly onRefusal: (code: string) => void = () => undefined,
  ) {}

  /**
   * Appends one relayed request's terminal entry, in its own transaction ({@link RelayEntrySink}):
   * the chain (the session's, or the gateway chain once it closed) is chosen inside it.
   * @returns (resolves to) the entry, or null when it could not be committed (logged; the
   *   caller answers with an error rather than pass data that left no trace).
   */
  async record(r: RelayRecord): Promise<AuditEntry | null> {
    const detail: Record<string, unknown> = { method: r.method, target: r.target, ...(r.detail ?? {}) };
    const input: EntryInput = {
      entry_type: RELAY_ENTRY_TYPES[r.method],
      call_id: randomUUID(),
      session_id: r.sessionId,
      agent_id: r.agentId,
      server_identity: r.upstream,
      ...r.policy,
      disposition: r.disposition,
      error_code: r.errorCode,
      latency_us: Number((process.hrtime.bigint() - r.startedAt) / 1000n),
      request_payload_hash: digest(r.params ?? {}, 'request_hash', detail),
      response_payload_hash: digest(r.result, 'response_hash', detail),
      detail,
    };
    if (r.disposition === 'refused' && r.errorCode) this.onRefusal(r.errorCode);
    try {
      return await this.entries(r.sessionId, input);
    } catch (e) {
      this.log.error(
        { method: r.method, err: (e as Error).message },
        'relayed request could not be recorded',
      );
      return null;
    }
  }
}
