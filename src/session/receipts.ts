/**
 * Receipts and consistency proofs of session chains (docs/spec/transparency.md), served from
 * what the store keeps (store/port.ts TreeStore): a call's terminal entry, the oldest signed
 * checkpoint of its session whose tree holds that entry, and the inclusion proof of the entry's
 * leaf against it, built from O(log n) stored tree nodes; between two tree sizes, the
 * consistency proof (RFC 9162 §2.1.4) with the session's checkpoint of the larger size.
 */
import {
  buildReceipt,
  type ConsistencyProofJson,
  consistencyProof,
  consistencyProofNodeIds,
  inclusionProof,
  inclusionProofNodeIds,
  type ReceiptJson,
  type TreeNodeId,
  type TreeNodeReader,
} from '@cmcp/verify/formats';
import { CmcpError } from '../errors/index.js';
import type { Answer, SessionRow, TreeStore } from '../store/port.js';
import type { CheckpointSigner } from './checkpoints.js';

/** The owner check of a session read: its row if it is `agentId`'s. */
export type OwnSession = (agentId: string, sessionId: string) => Answer<SessionRow | undefined>;

const unknownSession = () => new CmcpError('UNKNOWN_SESSION', 'unknown session');

export class ReceiptService {
  constructor(
    private readonly store: TreeStore,
    private readonly signer: CheckpointSigner,
    private readonly own: OwnSession,
  ) {}

  /**
   * The complete receipt of call `callId`'s entry in `sessionId`, waiting for the window that
   * signs its checkpoint when none covers it yet. An unknown call answers as an unknown session.
   * @throws (rejects) CmcpError UNKNOWN_SESSION; the store's errors.
   */
  async receipt(agentId: string, sessionId: string, callId: string): Promise<ReceiptJson> {
    await this.owned(agentId, sessionId);
    const entry = await this.store.callEntry(sessionId, callId);
    if (!entry) throw unknownSession();
    const index = entry.sequence_number;
    const cp = await this.signer.covering(sessionId, index);
    const read = await this.reader(sessionId, inclusionProofNodeIds(index, cp.tree_size));
    return buildReceipt({
      chain_id: sessionId,
      session_id: sessionId,
      call_id: callId,
      entry_hash: entry.entry_hash,
      sequence_number: index,
      inclusion: {
        tree_size: cp.tree_size,
        proof: inclusionProof(index, cp.tree_size, read),
        checkpoint: cp.note,
      },
    });
  }

  /**
   * The consistency proof from tree size `from` to `to` (default: the newest signed checkpoint's
   * size), with the session's checkpoint of size `to` when one was signed.
   * @throws (rejects) CmcpError UNKNOWN_SESSION | INVALID_PARAMS (not 0 ≤ from ≤ to ≤ the newest
   *   signed size).
   */
  async consistency(
    agentId: string,
    sessionId: string,
    from: number,
    to: number | undefined,
  ): Promise<ConsistencyProofJson> {
    await this.owned(agentId, sessionId);
    const newest = (await this.store.checkpoints(sessionId)).at(-1)?.tree_size ?? 0;
    const upTo = to ?? newest;
    if (
      !(
        Number.isSafeInteger(from) &&
        Number.isSafeInteger(upTo) &&
        from >= 0 &&
        from <= upTo &&
        upTo <= newest
      )
    )
      throw new CmcpError(
        'INVALID_PARAMS',
        `from and to must be tree sizes with 0 ≤ from ≤ to ≤ ${newest} (the newest signed checkpoint)`,
      );
    const [read, cp] = await Promise.all([
      this.reader(sessionId, consistencyProofNodeIds(from, upTo)),
      this.store.checkpointOfSize(sessionId, upTo),
    ]);
    return {
      session_id: sessionId,
      from,
      to: upTo,
      consistency_proof: consistencyProof(from, upTo, read).map((h) => h.toString('hex')),
      checkpoint: cp?.note ?? null,
    };
  }

  private async owned(agentId: string, sessionId: string): Promise<void> {
    if (!(await this.own(agentId, sessionId))) throw unknownSession();
  }

  /** The stored tree nodes `ids` of a chain, read in one go, as a proof builder reads them. */
  private async reader(chainId: string, ids: TreeNodeId[]): Promise<TreeNodeReader> {
    const nodes = new Map<string, Buffer>();
    for (const n of await this.store.treeNodes(chainId, ids)) nodes.set(`${n.level}:${n.index}`, n.hash);
    return (id) => {
      const h = nodes.get(`${id.level}:${id.index}`);
      if (!h) throw new Error(`chain ${chainId}: tree node ${id.level}:${id.index} is not stored`);
      return h;
    };
  }
}
