/**
 * Batched session bindings (docs/spec/binding.md#batched-bindings): sessions opened while a
 * quote is in flight share the next one. Their binding digests are the leaves of an RFC 6962
 * tree; REPORT_DATA = key_thumbprint ‖ batch digest(root, size); each session keeps its leaf
 * index and audit path. A session that finds nothing in flight is bound at once (a tree of
 * one, no timer), so batching never delays a lone session; under load, everything that
 * arrived during one quote goes into the next (at most `maxBatch` per quote).
 */
import {
  BATCH_MAX_TREE_SIZE,
  batchDigest,
  MerkleTree,
  merkleLeafHash,
  reportData,
  type SessionBatchJson,
} from '@cmcp/verify/formats';
import { type AttestationProvider, BindingError, type BoundEvidence } from '../tee/provider.js';

/** Sessions per quote unless configured otherwise. */
export const DEFAULT_BATCH_LIMIT = 64;

/** One session's share of a quote: the REPORT_DATA bound, its place in the tree, and the outcome. */
export type BatchedBinding = { reportData: Buffer; batch: SessionBatchJson } & (
  | { ok: true; evidence: BoundEvidence }
  | { ok: false; error: unknown }
);

interface Waiter {
  digest: Buffer;
  /** Bindings that name different gateway measurements never share a quote. */
  measurement: string | null;
  resolve: (b: BatchedBinding) => void;
}

export class BindingBatcher {
  private readonly queue: Waiter[] = [];
  private inFlight = false;
  /** Quotes requested so far (for tests and the bench: sessions per quote). */
  quotes = 0;

  /**
   * @param keyThumbprint the gateway key's 32-byte RFC 7638 thumbprint (REPORT_DATA[0:32]).
   * @param maxBatch sessions per quote, 1..1024 (1: every session has its own quote, a tree of one).
   */
  constructor(
    private readonly provider: AttestationProvider,
    private readonly keyThumbprint: Buffer,
    private readonly maxBatch = DEFAULT_BATCH_LIMIT,
  ) {
    if (!Number.isInteger(maxBatch) || maxBatch < 1 || maxBatch > BATCH_MAX_TREE_SIZE)
      throw new RangeError(`batch limit ${maxBatch} is not 1..${BATCH_MAX_TREE_SIZE}`);
  }

  /**
   * Binds one session's binding digest: at once when no quote is in flight, else in the batch
   * that starts when the current quote returns. Never rejects: a provider failure is returned
   * (`ok: false`) to every session of its batch, with the REPORT_DATA that was to be bound.
   * @param digest the 32-byte binding digest (SHA-256(JCS(preimage)), docs/spec/binding.md).
   * @param measurement the preimage's gateway_measurement.
   */
  bind(digest: Buffer, measurement: string | null): Promise<BatchedBinding> {
    return new Promise((resolve) => {
      this.queue.push({ digest, measurement, resolve });
      if (!this.inFlight) this.next();
    });
  }

  /** Starts the next quote over the longest run of waiters (same measurement, ≤ maxBatch). */
  private next(): void {
    const head = this.queue[0];
    if (!head) return;
    let n = 1;
    while (n < this.queue.length && n < this.maxBatch && this.queue[n]?.measurement === head.measurement) n++;
    const batch = this.queue.splice(0, n);
    const tree = new MerkleTree(batch.map((w) => merkleLeafHash(w.digest)));
    const root = tree.root();
    const rd = reportData(this.keyThumbprint, batchDigest(root, tree.size));
    const shares = batch.map((w, i) => ({
      w,
      reportData: rd,
      batch: {
        leaf_index: i,
        tree_size: tree.size,
        root: root.toString('hex'),
        audit_path: tree.auditPath(i).map((h) => h.toString('hex')),
      },
    }));
    this.inFlight = true;
    this.quotes++;
    const done = (outcome: { ok: true; evidence: BoundEvidence } | { ok: false; error: unknown }) => {
      // The next quote is requested before this batch's sessions go on to write their binding
      // records, so the TPM is not idle while they do.
      this.inFlight = false;
      this.next();
      for (const s of shares)
        s.w.resolve({ reportData: s.reportData, batch: s.batch, ...measuredAs(outcome, s.w.measurement) });
    };
    // A provider that throws synchronously is a failed binding like any other.
    let bound: Promise<BoundEvidence>;
    try {
      bound = this.provider.bind(rd);
    } catch (error) {
      bound = Promise.reject(error);
    }
    bound.then(
      (evidence) => done({ ok: true, evidence }),
      (error: unknown) => done({ ok: false, error }),
    );
  }
}

/**
 * A session waits for a batch, so a policy reload can re-measure the gateway between its preimage
 * and its quote: evidence carrying another measurement than the preimage names would make its
 * claim invalid, so the binding fails honestly instead (MEASUREMENT_CHANGED; the session serves
 * signed-only, or is refused under minimum_tier).
 */
function measuredAs(
  outcome: { ok: true; evidence: BoundEvidence } | { ok: false; error: unknown },
  measurement: string | null,
): { ok: true; evidence: BoundEvidence } | { ok: false; error: unknown } {
  const bound = outcome.ok ? outcome.evidence.measurement?.digest : undefined;
  if (bound === undefined || measurement === null || bound === measurement) return outcome;
  return {
    ok: false,
    error: new BindingError(
      'MEASUREMENT_CHANGED',
      `the gateway was re-measured (${bound}) while this binding waited for its quote; the preimage names ${measurement}`,
    ),
  };
}
