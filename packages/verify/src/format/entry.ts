/**
 * Audit entry format (docs/spec/audit-entries.md), shared by the gateway's store and the verifier.
 */
import { canonicalJson, sha256Hex } from './canonical.js';
import type { EntryReplica } from './replica.js';

/** Entry types the gateway writes. Unknown types are still hashed and verified. */
export type EntryType =
  | 'gateway_start'
  | 'attestation_provider'
  | 'execution_sealed'
  | 'session_open'
  | 'attestation_bound'
  | 'attestation_binding_failed'
  | 'tool_call'
  | 'request_refused'
  | 'session_close'
  | 'policy_load'
  | 'policy_reload'
  | 'policy_reload_refused'
  | 'catalog_load'
  | 'catalog_drift'
  | 'catalog_drift_cleared'
  | 'agent_blocked'
  | 'agent_unblocked'
  // relayed MCP requests that carry data (docs/spec/audit-entries.md#relayed-requests)
  | 'resource_read'
  | 'resource_subscribe'
  | 'resource_unsubscribe'
  | 'prompt_get'
  | 'completion'
  | 'sampling_relay'
  | 'elicitation_relay'
  | 'roots_relay'
  | 'task_result'
  | 'upstream_session_renewed'
  | 'client_session_open'
  // a replica's binding of its key at start, in the gateway chain (docs/spec/audit-entries.md#writers)
  | 'replica_start';

/** The chain id of gateway-level events (docs/spec/audit-entries.md). */
export const GATEWAY_CHAIN_ID = 'gateway';

/** Every field is always present; `null` when not applicable (docs/spec/audit-entries.md). */
export interface AuditEntryBody {
  entry_version: 1;
  /** UUID v4. */
  entry_id: string;
  chain_id: string;
  /** 0-based, contiguous within a chain. */
  sequence_number: number;
  /** RFC 3339 UTC with microseconds, never decreasing within a chain. */
  timestamp_utc: string;
  entry_type: EntryType | string;
  session_id: string | null;
  call_id: string | null;
  agent_id: string | null;
  workflow_id: string | null;
  execution_id: string | null;
  tool_name: string | null;
  server_identity: string | null;
  policy_decision: string | null;
  policy_rule_matched: string[] | null;
  disposition: string | null;
  error_code: string | null;
  /** Microseconds from receipt of the request to the terminal decision. */
  latency_us: number | null;
  request_payload_hash: string | null;
  response_payload_hash: string | null;
  detail: Record<string, unknown> | null;
  /** Bare hex of the predecessor, or `"genesis"` for sequence 0. */
  prev_entry_hash: string;
  /**
   * The replica that wrote the entry (PostgreSQL replicas only, docs/spec/audit-entries.md#writers);
   * absent in a single gateway's entries. Hashed like every member.
   */
  replica?: EntryReplica;
}

/** A stored entry: the body plus its hash. */
export interface AuditEntry extends AuditEntryBody {
  /** Lowercase hex SHA-256 of JCS(body), 64 chars. */
  entry_hash: string;
}

/** The exact order of fields (only for readability of stored rows; JCS sorts anyway). */
export const ENTRY_FIELDS: readonly (keyof AuditEntryBody)[] = [
  'entry_version',
  'entry_id',
  'chain_id',
  'sequence_number',
  'timestamp_utc',
  'entry_type',
  'session_id',
  'call_id',
  'agent_id',
  'workflow_id',
  'execution_id',
  'tool_name',
  'server_identity',
  'policy_decision',
  'policy_rule_matched',
  'disposition',
  'error_code',
  'latency_us',
  'request_payload_hash',
  'response_payload_hash',
  'detail',
  'prev_entry_hash',
];

/**
 * Canonical text and hash of an entry body: `entry_hash` = hex SHA-256 of
 * JCS(entry without `entry_hash`) (docs/spec/audit-entries.md). The canonical text is what must be stored.
 * @throws CanonicalJsonError if the body holds a value JCS cannot carry.
 */
export function hashEntryBody(body: AuditEntryBody): { canonical: string; entry_hash: string } {
  const canonical = canonicalJson(body);
  return { canonical, entry_hash: sha256Hex(canonical) };
}

/**
 * One entry as exported in an audit bundle: the stored canonical text that was hashed,
 * and the hash. A verifier hashes `canonical` itself and parses it for the chain fields.
 */
export interface BundleEntry {
  canonical: string;
  entry_hash: string;
  /**
   * base64url Ed25519 signature of the entry's writer over `"cmcp.entry-writer/1:" ‖ entry_hash`
   * (format/replica.ts); present only for entries that name a `replica`.
   */
  writer_signature?: string;
}

/** Audit bundle export of one chain (a session's, or the gateway's). */
export interface AuditBundle {
  bundle_version: 1;
  chain_id: string;
  session_id: string | null;
  exported_at: string;
  /** Entries in sequence order. */
  entries: BundleEntry[];
}
