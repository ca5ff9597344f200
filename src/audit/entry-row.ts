/**
 * An entry's `audit_entries` row, for both engines (./chain.ts on SQLite,
 * store/postgres/chain.ts): the indexed columns beside the exact canonical text
 * (docs/spec/audit-entries.md), and what is read back from that text. The chain is verified
 * from the stored text alone; the other columns are for lookups and the unique keys.
 */
import type { AuditBundle, AuditEntry, AuditEntryBody } from '@cmcp/verify/format/entry';
import type { PreparedEntry } from './next-entry.js';

/** The columns of an `audit_entries` row, in the order of {@link entryRowValues}. */
export const ENTRY_COLUMNS =
  'chain_id, sequence_number, prev_entry_hash, entry_hash, entry_type, session_id, execution_id, agent_id, timestamp_utc, canonical';

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
