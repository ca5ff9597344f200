/**
 * Building a chain's next entry after a known tip (docs/spec/audit-entries.md): the one place
 * both engines fill in the chain fields (`sequence_number`, `prev_entry_hash`, the clamped
 * `timestamp_utc`) and hash the body with `@cmcp/verify/format/entry`. The SQLite chain
 * (./chain.ts) and the PostgreSQL chain (store/postgres/chain.ts) both call
 * {@link buildNextEntry} inside the transaction that holds the chain's tip, so the byte layout
 * of an entry keeps one owner.
 */
import { type KeyObject, randomUUID } from 'node:crypto';
import type { EntryReplica } from '@cmcp/verify/formats';
import { type AuditEntryBody, hashEntryBody } from '@cmcp/verify/formats';

/** Fields a caller supplies; everything else is filled in (null when not given). */
export type EntryInput = Pick<AuditEntryBody, 'entry_type'> & Partial<Omit<AuditEntryBody, 'entry_type'>>;

/** A chain's last entry: what the next entry is built after. */
export interface ChainTip {
  sequence_number: number;
  entry_hash: string;
  timestamp_utc: string;
}

/**
 * A replica as the writer of its entries (PostgreSQL only, docs/spec/audit-entries.md#writers):
 * each entry it writes names it (`replica`) and carries its writer signature.
 */
export interface EntryWriter {
  replicaId: string;
  /** base64url RFC 7638 thumbprint of `key`'s public JWK. */
  keyThumbprint: string;
  /** The replica's Ed25519 gateway key. */
  key: KeyObject;
}

/** An entry built after a known tip, with its canonical text and hash, not yet written. */
export interface PreparedEntry {
  body: AuditEntryBody;
  canonical: string;
  entry_hash: string;
}

/**
 * The entry that follows `tip` in `chainId` (sequence 0 after `genesis` when `tip` is
 * undefined), stamped `nowUtc` or the tip's timestamp when the clock is behind it (timestamps
 * never decrease, C-CHAIN-2), with its JCS text (RFC 8785) and SHA-256 entry hash.
 * @param nowUtc RFC 3339 UTC with microseconds (store/entries/clock.ts formatMicros).
 * @param replica the writing replica (PostgreSQL replicas only), hashed with the body.
 * @throws CanonicalJsonError if a field holds a value JCS cannot carry.
 */
export function buildNextEntry(
  chainId: string,
  input: EntryInput,
  tip: ChainTip | undefined,
  nowUtc: string,
  replica?: EntryReplica,
): PreparedEntry {
  let ts = nowUtc;
  if (tip && ts < tip.timestamp_utc) ts = tip.timestamp_utc; // never decreasing (C-CHAIN-2)
  const body: AuditEntryBody = {
    entry_version: 1,
    entry_id: randomUUID(),
    chain_id: chainId,
    sequence_number: tip ? tip.sequence_number + 1 : 0,
    timestamp_utc: ts,
    entry_type: input.entry_type,
    session_id: input.session_id ?? null,
    call_id: input.call_id ?? null,
    agent_id: input.agent_id ?? null,
    workflow_id: input.workflow_id ?? null,
    execution_id: input.execution_id ?? null,
    tool_name: input.tool_name ?? null,
    server_identity: input.server_identity ?? null,
    policy_decision: input.policy_decision ?? null,
    policy_rule_matched: input.policy_rule_matched ?? null,
    disposition: input.disposition ?? null,
    error_code: input.error_code ?? null,
    latency_us: input.latency_us ?? null,
    request_payload_hash: input.request_payload_hash ?? null,
    response_payload_hash: input.response_payload_hash ?? null,
    detail: input.detail ?? null,
    prev_entry_hash: tip ? tip.entry_hash : 'genesis',
    // Only a replica's entries name their writer: a single gateway's bodies stay as they were.
    ...(replica ? { replica } : {}),
  };
  const { canonical, entry_hash } = hashEntryBody(body);
  return { body, canonical, entry_hash };
}
