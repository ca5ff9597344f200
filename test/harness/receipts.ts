/**
 * Closed sessions with version 2 claims, signed checkpoints and receipts, for the receipt and
 * checkpoint verifier tests: real chains of real entries (testing/evidence.ts), a real Ed25519
 * gateway key, proofs built from the tree's nodes.
 */
import {
  type AuditBundle,
  type BundleEntry,
  bindingDigest,
  buildReceipt,
  entryLeafHash,
  inclusionProof,
  leafNodeReader,
  type ReceiptJson,
  reportData,
  signChainCheckpoint,
  signClaim,
  subtreeRoot,
  type TreeHeadClaim,
  type TreeNodeReader,
} from '@cmcp/verify/formats';
import {
  type BoundSession,
  bindSession,
  bundleOf,
  makeChain,
  softwareEvidence,
  unsignedClaim,
} from '../../testing/evidence.js';

export const TIME = '2026-12-08T00:00:00.000Z';
export const N = 9;

export interface Session {
  id: string;
  entries: BundleEntry[];
  bundle: AuditBundle;
  read: TreeNodeReader;
  s: BoundSession;
  claim: TreeHeadClaim;
}

/** Another session bound under the same gateway key (one gateway process, two sessions). */
export function rebind(s: BoundSession, sessionId: string, chainRoot: string): BoundSession {
  const preimage = { ...s.preimage, session_id: sessionId, chain_root: chainRoot };
  return { ...s, preimage, reportData: reportData(s.thumb, bindingDigest(preimage)) };
}

/** A closed session of N entries under a fresh gateway key, with its version 2 claim. */
export function session(id: string, s?: BoundSession, salt = ''): Session {
  const { entries } = makeChain(id, N, salt);
  const read = leafNodeReader(entries.map((e) => entryLeafHash(e.entry_hash)));
  const bound = s
    ? rebind(s, id, entries[0]?.entry_hash as string)
    : bindSession({
        sessionId: id,
        chainRoot: entries[0]?.entry_hash as string,
        gatewayMeasurement: null,
        policyBundleHash: null,
        catalogHash: null,
        challenge: null,
      });
  const audit_chain = {
    chain_id: id,
    root: entries[0]?.entry_hash as string,
    tip: entries[N - 1]?.entry_hash as string,
    length: N,
  };
  const {
    transcript: _t,
    claim_version: _v,
    ...v1
  } = unsignedClaim(bound, {
    audit_chain,
    evidence: softwareEvidence(bound.reportData),
    session_id: id,
    counters: { tool_calls: N - 1, allowed: N - 1, refused: 0, faulted: 0 },
  });
  const claim = signClaim(
    {
      ...v1,
      claim_version: 2,
      tree_head: { size: N, root: subtreeRoot(0, N, read).toString('hex') },
      entry_counts: { session_open: 1, tool_call: N - 1 },
    },
    bound.privateKey,
  );
  return { id, entries, bundle: bundleOf(id, entries), read, s: bound, claim };
}

export const checkpoint = (
  x: Session,
  size: number,
  key = x.s.privateKey,
  root = subtreeRoot(0, size, x.read),
) => signChainCheckpoint({ chain_id: x.id, size, root, time: TIME }, key);

export function receipt(x: Session, index: number, size: number, note = checkpoint(x, size)): ReceiptJson {
  const body = JSON.parse(x.entries[index]?.canonical as string) as { call_id: string | null };
  return buildReceipt({
    chain_id: x.id,
    session_id: x.id,
    call_id: body.call_id,
    entry_hash: x.entries[index]?.entry_hash as string,
    sequence_number: index,
    inclusion: { tree_size: size, proof: inclusionProof(index, size, x.read), checkpoint: note },
  });
}
