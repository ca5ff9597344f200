/**
 * Receipts (docs/spec/transparency.md#receipts): the evidence an answer carries for the entry
 * that recorded it — in `result._meta["dev.cmcp/evidence"]`, or `error.data.evidence` on a
 * refusal. It keeps the pointer members answers carried before (`call_id`, `session_id`,
 * `chain_id`, `entry_hash`, `sequence_number`) and adds the entry's leaf index and either an
 * RFC 9162 inclusion proof against a signed checkpoint, or the path to fetch that proof once
 * the checkpoint covering the entry is signed. Also the answer of the consistency route.
 */
import { TransparencyError } from './errors.js';

/** The `_meta` key (and `error.data` member name `evidence`) answers carry a receipt under. */
export const EVIDENCE_META_KEY = 'dev.cmcp/evidence';

/** The receipt format version. */
export const RECEIPT_VERSION = 1;

/** An inclusion proof of a receipt's entry against a signed checkpoint. */
export interface ReceiptInclusionJson {
  /** The tree size the proof is for: the checkpoint's size. */
  tree_size: number;
  /** RFC 9162 §2.1.3.1 PATH(leaf_index, D[0:tree_size]), leaf end first, lowercase hex of 32 bytes. */
  inclusion_proof: string[];
  /** The C2SP signed note of the checkpoint (./checkpoint.ts), as the gateway signed it. */
  checkpoint: string;
}

/** A receipt (docs/spec/transparency.md#receipts). */
export interface ReceiptJson {
  receipt_version: typeof RECEIPT_VERSION;
  /** The chain the entry is in: the session id, or `gateway`. */
  chain_id: string;
  /** The session the entry names (for the gateway chain: the session a refusal named, or null). */
  session_id: string | null;
  /** The call (attempt) the entry ends, or null for entries without one. */
  call_id: string | null;
  /** The entry's entry_hash, lowercase hex (docs/spec/audit-entries.md#entry-hash). */
  entry_hash: string;
  /** The entry's sequence_number in its chain. */
  sequence_number: number;
  /** The entry's leaf index in its chain's tree: always equal to sequence_number. */
  leaf_index: number;
  /** The proof, or null while no signed checkpoint covers the entry. */
  inclusion: ReceiptInclusionJson | null;
  /**
   * While `inclusion` is null: the path to GET the complete receipt,
   * `/sessions/{session_id}/receipts/{call_id}`; null when `inclusion` is given.
   */
  fetch: string | null;
}

/** The answer of `GET /sessions/{id}/consistency?from=&to=` (RFC 9162 §2.1.4). */
export interface ConsistencyProofJson {
  session_id: string;
  from: number;
  to: number;
  /** RFC 9162 §2.1.4.1 PROOF(from, D[0:to]), lowercase hex of 32 bytes; empty when from is 0 or to. */
  consistency_proof: string[];
  /** The newest signed checkpoint note of size `to`, or null when no checkpoint of that size was signed. */
  checkpoint: string | null;
}

/**
 * The path a pending receipt names: `/sessions/{sessionId}/receipts/{callId}`, each segment
 * percent-encoded.
 */
export function receiptPath(sessionId: string, callId: string): string {
  return `/sessions/${encodeURIComponent(sessionId)}/receipts/${encodeURIComponent(callId)}`;
}

/** What {@link buildReceipt} takes: the entry's pointer and, when signed already, its proof. */
export interface ReceiptInput {
  chain_id: string;
  session_id: string | null;
  call_id: string | null;
  entry_hash: string;
  sequence_number: number;
  /** Proof hashes (32 bytes each) and the checkpoint note; omit while none covers the entry. */
  inclusion?: { tree_size: number; proof: readonly Uint8Array[]; checkpoint: string };
}

/**
 * Builds a receipt. Without `inclusion` the receipt is pending: it names
 * {@link receiptPath} when the entry has a session and a call id, else `fetch` is null too.
 * @throws TransparencyError RECEIPT_MALFORMED for a bad hash, index or tree size.
 */
export function buildReceipt(r: ReceiptInput): ReceiptJson {
  if (!/^[0-9a-f]{64}$/.test(r.entry_hash))
    throw new TransparencyError('RECEIPT_MALFORMED', 'entry_hash is 64 lowercase hex');
  if (!Number.isSafeInteger(r.sequence_number) || r.sequence_number < 0)
    throw new TransparencyError('RECEIPT_MALFORMED', 'sequence_number is a whole number ≥ 0');
  if (r.inclusion && !(r.inclusion.tree_size > r.sequence_number))
    throw new TransparencyError('RECEIPT_MALFORMED', 'the proof is for a tree that does not hold the entry');
  return {
    receipt_version: RECEIPT_VERSION,
    chain_id: r.chain_id,
    session_id: r.session_id,
    call_id: r.call_id,
    entry_hash: r.entry_hash,
    sequence_number: r.sequence_number,
    leaf_index: r.sequence_number,
    inclusion: r.inclusion
      ? {
          tree_size: r.inclusion.tree_size,
          inclusion_proof: r.inclusion.proof.map((h) => Buffer.from(h).toString('hex')),
          checkpoint: r.inclusion.checkpoint,
        }
      : null,
    fetch:
      r.inclusion || r.session_id === null || r.call_id === null
        ? null
        : receiptPath(r.session_id, r.call_id),
  };
}
