/**
 * An entry's `audit_entries` row, for both engines (store/sqlite/chain.ts on SQLite,
 * store/postgres/chain.ts): the indexed columns beside the exact canonical text
 * (docs/spec/audit-entries.md), and what is read back from that text. The chain is verified
 * from the stored text alone; the other columns are for lookups and the unique keys.
 */
import type { AuditBundle, AuditEntry, AuditEntryBody } from '@cmcp/verify/formats';
import type { PreparedEntry } from './next-entry.js';

/** The columns of an `audit_entries` row, in the order of {@link entryRowValues}. */
export const ENTRY_COLUMNS =
  'chain_id, sequence_number, prev_entry_hash, entry_hash, entry_type, session_id, execution_id, agent_id, timestamp_utc, canonical, call_id';

/** The values of the row storing `entry`, in {@link ENTRY_COLUMNS} order. */
export function entryRowValues({ body, canonical, entry_hash }: PreparedEntry): (string | number | null)[] {
  return [
    body.chain_id,
    body.sequence_number,
    body.prev_entry_hash,
    entry_hash,
    body.entry_type,
    body.session_id,
    body.execution_id,
    body.agent_id,
    body.timestamp_utc,
    canonical,
    body.call_id,
  ];
}

/** A stored row's entry: its canonical text (JCS, RFC 8785) parsed, with its hash. */
export function storedEntry(row: { canonical: string; entry_hash: string }): AuditEntry {
  return { ...(JSON.parse(row.canonical) as AuditEntryBody), entry_hash: row.entry_hash };
}

/**
 * A chain's export: the stored canonical texts in sequence order, as a verifier re-hashes them,
 * with each entry's writer signature when the row has one (PostgreSQL replicas,
 * docs/spec/audit-entries.md#writers; a single gateway's rows have none and export as before).
 */
export function chainBundleOf(
  chainId: string,
  sessionId: string | null,
  rows: readonly { canonical: string; entry_hash: string; writer_signature?: string | null }[],
): AuditBundle {
  return {
    bundle_version: 1,
    chain_id: chainId,
    session_id: sessionId,
    exported_at: new Date().toISOString(),
    entries: rows.map((r) =>
      r.writer_signature
        ? { canonical: r.canonical, entry_hash: r.entry_hash, writer_signature: r.writer_signature }
        : { canonical: r.canonical, entry_hash: r.entry_hash },
    ),
  };
}

/** What a claim reads of an entry (AuditChain.claimPage). */
export type ClaimPageEntry = Pick<
  AuditEntry,
  | 'sequence_number'
  | 'entry_type'
  | 'entry_hash'
  | 'timestamp_utc'
  | 'tool_name'
  | 'policy_decision'
  | 'policy_rule_matched'
  | 'disposition'
  | 'error_code'
>;

/** A row of a claim page's query (the same columns on SQLite and PostgreSQL). */
export interface ClaimPageRow {
  sequence_number: number;
  entry_type: string;
  entry_hash: string;
  timestamp_utc: string;
  /** The stored text when it holds a `\u` escape (then parsed whole), else null. */
  escaped: string | null;
  tool_name: string | null;
  policy_decision: string | null;
  /** JSON text of the array, or null. */
  rules: string | null;
  disposition: string | null;
  error_code: string | null;
}

/**
 * A claim page's row as the entry it stands for: the extracted fields, or, when the stored text
 * holds a `\u` escape, the whole text parsed (then every field of the entry is there).
 * @throws SyntaxError when a stored text or its rules are not JSON (a damaged row).
 */
export function claimPageEntry(r: ClaimPageRow): ClaimPageEntry {
  if (r.escaped !== null) return { ...(JSON.parse(r.escaped) as AuditEntryBody), entry_hash: r.entry_hash };
  return {
    sequence_number: r.sequence_number,
    entry_type: r.entry_type,
    entry_hash: r.entry_hash,
    timestamp_utc: r.timestamp_utc,
    tool_name: r.tool_name,
    policy_decision: r.policy_decision,
    policy_rule_matched: r.rules === null ? null : (JSON.parse(r.rules) as string[]),
    disposition: r.disposition,
    error_code: r.error_code,
  };
}
