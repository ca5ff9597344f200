/**
 * Receipts, checkpoints and claims version 2 as a relying party checks them (packages/verify/src/
 * receipt.ts, checkpoints.ts, bundle-tree-head.ts): real chains of real entries, a real Ed25519
 * gateway key bound in a claim's preimage, checkpoints signed as C2SP notes, proofs built from
 * the tree's nodes. Each tampering the spec names has its own reason code: a tampered leaf, a
 * wrong index, a wrong root, a proof from another session, a checkpoint signed by another key,
 * a forked checkpoint pair.
 */
import { generateKeyPairSync } from 'node:crypto';
import { type VerificationReport, verifyCheckpoints, verifyClaim, verifyReceipt } from '@cmcp/verify';
import {
  type BundleEntry,
  buildReceipt,
  type ConsistencyProofJson,
  consistencyProof,
  type ReceiptJson,
  signClaim,
  subtreeRoot,
} from '@cmcp/verify/formats';
import { describe, expect, it } from 'vitest';
import { checkpoint, N, receipt, type Session, session } from './harness/receipts.js';

const A = session('0b8f6b0e-1f0e-4a43-9b1c-6f1d2e3a4b5c');
const B = session('1c9a7c1f-2a1f-4b54-8c2d-7a2e3f4b5c6d', A.s, 'b');
const claimOptions = { require: 'signed-only' as const };
const reasonOf = (r: VerificationReport, id: string) => r.checks.find((c) => c.id === id)?.reason_code;
const failed = (r: VerificationReport) =>
  r.checks.filter((c) => c.status === 'fail').map((c) => c.reason_code);

describe('a receipt', () => {
  it('verifies with the entry and a claim binding the gateway key, for every leaf of a signed tree', () => {
    for (let i = 0; i < 6; i++) {
      const r = verifyReceipt(receipt(A, i, 6), { claim: A.claim, claimOptions, entry: A.entries[i] });
      expect(failed(r)).toEqual([]);
      expect(r.verdict).toBe('signed-only');
      expect(r.accepted).toBe(true);
      expect(reasonOf(r, 'receipt.inclusion')).toBe('OK');
    }
  });

  it('verifies under a pinned key without a claim, and a claim of another session of the same key binds it too', () => {
    const pinned = verifyReceipt(receipt(A, 3, 8), { pinnedKeys: [A.s.jwk] });
    expect([pinned.verdict, pinned.signer, pinned.accepted]).toEqual(['signed-only', 'pinned-key', true]);
    const viaB = verifyReceipt(receipt(A, 3, 8), { claim: B.claim, claimOptions });
    expect(failed(viaB)).toEqual([]);
  });

  it('a tampered leaf: the entry no longer hashes to entry_hash, or entry_hash no longer proves', () => {
    const entry = {
      ...A.entries[4],
      canonical: (A.entries[4] as BundleEntry).canonical.replace('"completed"', '"refused"'),
    };
    expect(failed(verifyReceipt(receipt(A, 4, 8), { claim: A.claim, claimOptions, entry }))).toEqual([
      'RECEIPT_ENTRY_MISMATCH',
    ]);
    const bent = { ...receipt(A, 4, 8), entry_hash: A.entries[5]?.entry_hash as string };
    expect(failed(verifyReceipt(bent, { claim: A.claim, claimOptions }))).toEqual(['RECEIPT_ROOT_MISMATCH']);
  });

  it('a wrong index', () => {
    const moved = { ...receipt(A, 4, 8), leaf_index: 5 };
    expect(failed(verifyReceipt(moved, { claim: A.claim, claimOptions }))).toContain(
      'RECEIPT_LEAF_INDEX_MISMATCH',
    );
    const both = { ...receipt(A, 4, 8), leaf_index: 5, sequence_number: 5 };
    expect(failed(verifyReceipt(both, { claim: A.claim, claimOptions, entry: A.entries[4] }))).toEqual([
      'RECEIPT_ENTRY_MISMATCH',
      'RECEIPT_ROOT_MISMATCH',
    ]);
  });

  it('a wrong root: a checkpoint the key signed over another tree', () => {
    const forged = checkpoint(A, 8, A.s.privateKey, subtreeRoot(0, 8, B.read));
    expect(failed(verifyReceipt(receipt(A, 2, 8, forged), { claim: A.claim, claimOptions }))).toEqual([
      'RECEIPT_ROOT_MISMATCH',
    ]);
  });

  it("a proof from another session: B's checkpoint and proof under A's receipt", () => {
    const fromB = receipt(B, 2, 8);
    const r = verifyReceipt(
      { ...receipt(A, 2, 8), inclusion: fromB.inclusion },
      { claim: A.claim, claimOptions },
    );
    expect(failed(r)).toContain('RECEIPT_SESSION_MISMATCH');
  });

  it('a checkpoint signed by another key, or altered after signing', () => {
    const other = generateKeyPairSync('ed25519').privateKey;
    const r = verifyReceipt(receipt(A, 2, 8, checkpoint(A, 8, other)), { claim: A.claim, claimOptions });
    expect(failed(r)).toEqual(['CHECKPOINT_SIGNER_UNKNOWN']);
    expect(r.accepted).toBe(false);
    const altered = receipt(A, 2, 8);
    const inc = altered.inclusion as NonNullable<ReceiptJson['inclusion']>;
    const r2 = verifyReceipt(
      { ...altered, inclusion: { ...inc, checkpoint: inc.checkpoint.replace('\n8\n', '\n9\n') } },
      {
        pinnedKeys: [A.s.jwk],
      },
    );
    expect(failed(r2)).toEqual(['CHECKPOINT_SIGNER_UNKNOWN']);
  });

  it('a pending receipt proves nothing yet and is not accepted', () => {
    const pending = buildReceipt({
      chain_id: A.id,
      session_id: A.id,
      call_id: 'c-1',
      entry_hash: A.entries[1]?.entry_hash as string,
      sequence_number: 1,
    });
    expect(pending.fetch).toBe(`/sessions/${A.id}/receipts/c-1`);
    // The gateway chain has no receipt route: a refusal recorded there names none.
    const { inclusion: _i, ...pointer } = pending;
    const inGatewayChain = buildReceipt({ ...pointer, chain_id: 'gateway' });
    expect([inGatewayChain.fetch, inGatewayChain.inclusion]).toEqual([null, null]);
    const r = verifyReceipt(pending, { pinnedKeys: [A.s.jwk] });
    expect(reasonOf(r, 'receipt.proof')).toBe('RECEIPT_PENDING');
    expect(r.accepted).toBe(false);
  });

  it('a malformed receipt, and no key at all, fail with their codes', () => {
    expect(failed(verifyReceipt({ receipt_version: 1 }, { pinnedKeys: [A.s.jwk] }))).toEqual([
      'RECEIPT_MALFORMED',
    ]);
    expect(failed(verifyReceipt(receipt(A, 1, 8), {}))).toContain('DEPENDENCY_FAILED');
  });
});

describe('checkpoints of one session', () => {
  const proof = (x: Session, from: number, to: number): ConsistencyProofJson => ({
    session_id: x.id,
    from,
    to,
    consistency_proof: consistencyProof(from, to, x.read).map((h) => h.toString('hex')),
    checkpoint: null,
  });

  it('a growing series verifies with its consistency proofs, and without them says so', () => {
    const notes = [checkpoint(A, 3), checkpoint(A, 6), checkpoint(A, 8)];
    const r = verifyCheckpoints(notes, {
      pinnedKeys: [A.s.jwk],
      consistency: [proof(A, 3, 6), proof(A, 6, 8)],
    });
    expect(failed(r)).toEqual([]);
    expect(reasonOf(r, 'checkpoint.consistency')).toBe('OK');
    expect(reasonOf(verifyCheckpoints(notes, { pinnedKeys: [A.s.jwk] }), 'checkpoint.consistency')).toBe(
      'CONSISTENCY_NOT_PROVEN',
    );
    // Another session's answers for the same sizes say nothing about this one: not an accusation.
    const foreign = [proof(B, 3, 6), proof(B, 6, 8)];
    expect(
      reasonOf(
        verifyCheckpoints(notes, { pinnedKeys: [A.s.jwk], consistency: foreign }),
        'checkpoint.consistency',
      ),
    ).toBe('CONSISTENCY_NOT_PROVEN');
    expect(
      reasonOf(
        verifyCheckpoints(notes, { pinnedKeys: [A.s.jwk], bundle: A.bundle }),
        'checkpoint.consistency',
      ),
    ).toBe('OK');
  });

  it('equivocation: the same size with two roots, or a larger tree that does not extend the smaller', () => {
    const forkAt6 = checkpoint(A, 6, A.s.privateKey, subtreeRoot(0, 6, B.read));
    const same = verifyCheckpoints([checkpoint(A, 6), forkAt6], { pinnedKeys: [A.s.jwk] });
    expect(failed(same)).toEqual(['CHECKPOINT_EQUIVOCATION']);
    // B's tree under A's name at size 8: A's honest proof 3→8 does not show it extends A's 3.
    const forkAt8 = checkpoint(A, 8, A.s.privateKey, subtreeRoot(0, 8, B.read));
    const grown = verifyCheckpoints([checkpoint(A, 3), forkAt8], {
      pinnedKeys: [A.s.jwk],
      consistency: [proof(A, 3, 8)],
    });
    expect(failed(grown)).toEqual(['CHECKPOINT_EQUIVOCATION']);
    expect(
      failed(verifyCheckpoints([checkpoint(A, 3), forkAt8], { pinnedKeys: [A.s.jwk], bundle: A.bundle })),
    ).toEqual(['CHECKPOINT_EQUIVOCATION']);
    // The receipt check sees the fork too when given the other checkpoint.
    const r = verifyReceipt(receipt(A, 1, 6), { pinnedKeys: [A.s.jwk], checkpoints: [forkAt6] });
    expect(failed(r)).toEqual(['CHECKPOINT_EQUIVOCATION']);
  });

  it("a checkpoint beyond the claim's final tree head, or of another size than the claim's at N", () => {
    const beyond = checkpoint(A, N + 1, A.s.privateKey, subtreeRoot(0, N, B.read));
    expect(failed(verifyCheckpoints([checkpoint(A, 4), beyond], { claim: A.claim, claimOptions }))).toEqual([
      'CHECKPOINT_EQUIVOCATION',
    ]);
    const atN = checkpoint(A, N, A.s.privateKey, subtreeRoot(0, N, B.read));
    expect(failed(verifyCheckpoints([atN], { claim: A.claim, claimOptions }))).toEqual([
      'CHECKPOINT_EQUIVOCATION',
    ]);
    expect(failed(verifyCheckpoints([checkpoint(A, N)], { claim: A.claim, claimOptions }))).toEqual([]);
  });

  it('checkpoints of two sessions are not compared', () => {
    expect(
      failed(verifyCheckpoints([checkpoint(A, 3), checkpoint(B, 3)], { pinnedKeys: [A.s.jwk] })),
    ).toEqual(['RECEIPT_SESSION_MISMATCH']);
  });
});

describe('claim version 2', () => {
  it('verifies with its bundle: the root recomputed from the entries is the tree head', () => {
    const r = verifyClaim(A.claim, { ...claimOptions, bundle: A.bundle });
    expect(failed(r)).toEqual([]);
    expect(reasonOf(r, 'audit.tree_head')).toBe('OK');
    expect(reasonOf(r, 'audit.transcript')).toBe('NOT_SUPPLIED');
    expect(JSON.stringify(A.claim)).not.toContain('transcript');
  });

  it("fails a tree head that is not the entries' root, and one whose size is not the chain's length", () => {
    const { signature: _s, ...rest } = A.claim;
    const wrongRoot = signClaim(
      { ...rest, tree_head: { size: N, root: subtreeRoot(0, N, B.read).toString('hex') } },
      A.s.privateKey,
    );
    expect(failed(verifyClaim(wrongRoot, { ...claimOptions, bundle: A.bundle }))).toEqual([
      'TREE_HEAD_MISMATCH',
    ]);
    const wrongSize = signClaim({ ...rest, tree_head: { ...rest.tree_head, size: N - 1 } }, A.s.privateKey);
    expect(reasonOf(verifyClaim(wrongSize, claimOptions), 'claim.shape')).toBe('TREE_HEAD_SIZE_MISMATCH');
  });

  it('a version 2 claim without entry counts does not parse', () => {
    const { signature: _s, entry_counts: _e, ...rest } = A.claim;
    const noCounts = signClaim(rest as never, A.s.privateKey);
    expect(reasonOf(verifyClaim(noCounts, claimOptions), 'claim.shape')).toBe('CLAIM_MALFORMED');
  });
});
