/**
 * Inclusion and consistency proofs of an RFC 9162 tree (RFC 9162 §2.1.3, §2.1.4), built from
 * perfect subtree hashes (./tree.ts {@link TreeNodeReader}) and verified from the proof alone.
 * Proof hashes are 32 bytes each; in JSON they are lowercase hex (docs/spec/transparency.md).
 * A caller whose nodes live in a database asks the `…NodeIds` functions what to read first,
 * reads them in one query, then builds the proof from what it read.
 */
import { merkleNodeHash } from '../crypto/merkle.js';
import { TransparencyError } from './errors.js';
import { checkTreeSize, subtreeNodeIds, subtreeRoot, type TreeNodeId, type TreeNodeReader } from './tree.js';

/** The largest power of two strictly below n (n ≥ 2): RFC 9162 §2.1.1's k. */
function split(n: number): number {
  let k = 1;
  while (k * 2 < n) k *= 2;
  return k;
}

/** A half-open leaf range [lo, hi). */
type Range = readonly [number, number];

/** The subtree ranges of PATH(m, D[0:n]) (RFC 9162 §2.1.3.1), leaf end first. */
function inclusionRanges(index: number, size: number): Range[] {
  const out: Range[] = [];
  let [lo, hi, m] = [0, size, index];
  while (hi - lo > 1) {
    const k = split(hi - lo);
    if (m < k) {
      out.unshift([lo + k, hi]);
      hi = lo + k;
    } else {
      out.unshift([lo, lo + k]);
      lo += k;
      m -= k;
    }
  }
  return out;
}

/** The subtree ranges of PROOF(m, D[0:n]) = SUBPROOF(m, D[0:n], true) (RFC 9162 §2.1.4.1). */
function consistencyRanges(from: number, to: number): Range[] {
  const out: Range[] = [];
  const sub = (m: number, lo: number, hi: number, b: boolean): void => {
    if (m === hi - lo) {
      if (!b) out.push([lo, hi]);
      return;
    }
    const k = split(hi - lo);
    if (m <= k) {
      sub(m, lo, lo + k, b);
      out.push([lo + k, hi]);
    } else {
      sub(m - k, lo + k, hi, false);
      out.push([lo, lo + k]);
    }
  };
  if (from > 0 && from < to) sub(from, 0, to, true);
  return out;
}

function checkInclusionArgs(index: number, size: number): void {
  checkTreeSize(size);
  checkTreeSize(index, 'leaf index');
  if (index >= size)
    throw new TransparencyError('PROOF_RANGE_INVALID', `leaf index ${index} is not below tree size ${size}`);
}

function checkConsistencyArgs(from: number, to: number): void {
  checkTreeSize(from, 'first tree size');
  checkTreeSize(to, 'second tree size');
  if (from > to) throw new TransparencyError('PROOF_RANGE_INVALID', `tree size ${from} is larger than ${to}`);
}

/** The distinct perfect subtrees the given ranges are made of. */
function nodeIdsOf(ranges: Range[]): TreeNodeId[] {
  const seen = new Map<string, TreeNodeId>();
  for (const [lo, hi] of ranges)
    for (const id of subtreeNodeIds(lo, hi)) seen.set(`${id.level}:${id.index}`, id);
  return [...seen.values()];
}

/**
 * The perfect subtree nodes {@link inclusionProof} reads for leaf `index` of a tree of `size`.
 * @throws TransparencyError TREE_SIZE_INVALID | PROOF_RANGE_INVALID.
 */
export function inclusionProofNodeIds(index: number, size: number): TreeNodeId[] {
  checkInclusionArgs(index, size);
  return nodeIdsOf(inclusionRanges(index, size));
}

/**
 * RFC 9162 §2.1.3.1 inclusion proof PATH(index, D[0:size]): sibling hashes from the leaf up to
 * the root, 32 bytes each (⌈log₂ size⌉ at most).
 * @throws TransparencyError TREE_SIZE_INVALID | PROOF_RANGE_INVALID, or what `read` throws.
 */
export function inclusionProof(index: number, size: number, read: TreeNodeReader): Buffer[] {
  checkInclusionArgs(index, size);
  return inclusionRanges(index, size).map(([lo, hi]) => subtreeRoot(lo, hi, read));
}

/**
 * The perfect subtree nodes {@link consistencyProof} reads between sizes `from` and `to`.
 * @throws TransparencyError TREE_SIZE_INVALID | PROOF_RANGE_INVALID.
 */
export function consistencyProofNodeIds(from: number, to: number): TreeNodeId[] {
  checkConsistencyArgs(from, to);
  return nodeIdsOf(consistencyRanges(from, to));
}

/**
 * RFC 9162 §2.1.4.1 consistency proof PROOF(from, D[0:to]); empty when from = 0 or from = to
 * (every tree extends the empty tree and itself).
 * @throws TransparencyError TREE_SIZE_INVALID | PROOF_RANGE_INVALID, or what `read` throws.
 */
export function consistencyProof(from: number, to: number, read: TreeNodeReader): Buffer[] {
  checkConsistencyArgs(from, to);
  return consistencyRanges(from, to).map(([lo, hi]) => subtreeRoot(lo, hi, read));
}

const eq = (a: Uint8Array, b: Uint8Array): boolean => a.length === b.length && Buffer.from(a).equals(b);

/**
 * RFC 9162 §2.1.3.2: the root an inclusion proof leads to from `leafHash` at `index` in a tree
 * of `size`, or null when the proof has the wrong number of hashes for (index, size).
 * @throws TransparencyError TREE_SIZE_INVALID | PROOF_RANGE_INVALID.
 */
export function rootFromInclusionProof(
  leafHash: Uint8Array,
  index: number,
  size: number,
  proof: readonly Uint8Array[],
): Buffer | null {
  checkInclusionArgs(index, size);
  let fn = index;
  let sn = size - 1;
  let r: Buffer = Buffer.from(leafHash);
  for (const p of proof) {
    if (sn === 0) return null;
    if (fn % 2 === 1 || fn === sn) {
      r = merkleNodeHash(p, r);
      while (fn % 2 === 0 && fn !== 0) {
        fn = Math.floor(fn / 2);
        sn = Math.floor(sn / 2);
      }
    } else {
      r = merkleNodeHash(r, p);
    }
    fn = Math.floor(fn / 2);
    sn = Math.floor(sn / 2);
  }
  return sn === 0 ? r : null;
}

/**
 * RFC 9162 §2.1.3.2: whether `proof` proves `leafHash` is leaf `index` of the tree of `size`
 * whose root is `root`. False for a proof of the wrong length, the wrong index or the wrong root.
 * @throws TransparencyError TREE_SIZE_INVALID | PROOF_RANGE_INVALID on impossible (index, size).
 */
export function verifyInclusion(
  leafHash: Uint8Array,
  index: number,
  size: number,
  proof: readonly Uint8Array[],
  root: Uint8Array,
): boolean {
  const r = rootFromInclusionProof(leafHash, index, size, proof);
  return r !== null && eq(r, root);
}

/**
 * RFC 9162 §2.1.4.2: whether `proof` shows the tree of `to` leaves with root `toRoot` extends the
 * tree of `from` leaves with root `fromRoot`. With from = to the proof must be empty and the
 * roots equal; with from = 0 the proof must be empty (the empty tree is a prefix of every tree).
 * @throws TransparencyError TREE_SIZE_INVALID | PROOF_RANGE_INVALID when from > to.
 */
export function verifyConsistency(
  from: number,
  to: number,
  proof: readonly Uint8Array[],
  fromRoot: Uint8Array,
  toRoot: Uint8Array,
): boolean {
  checkConsistencyArgs(from, to);
  if (from === to) return proof.length === 0 && eq(fromRoot, toRoot);
  if (from === 0) return proof.length === 0;
  if (proof.length === 0) return false;
  // Step 2: a power-of-two first tree is itself a node of the second; its root starts the path.
  const path = isPow2(from) ? [fromRoot, ...proof] : [...proof];
  let fn = from - 1;
  let sn = to - 1;
  while (fn % 2 === 1) {
    fn = Math.floor(fn / 2);
    sn = Math.floor(sn / 2);
  }
  let fr: Buffer = Buffer.from(path[0] as Uint8Array);
  let sr: Buffer = Buffer.from(path[0] as Uint8Array);
  for (const c of path.slice(1)) {
    if (sn === 0) return false;
    if (fn % 2 === 1 || fn === sn) {
      fr = merkleNodeHash(c, fr);
      sr = merkleNodeHash(c, sr);
      while (fn % 2 === 0 && fn !== 0) {
        fn = Math.floor(fn / 2);
        sn = Math.floor(sn / 2);
      }
    } else {
      sr = merkleNodeHash(sr, c);
    }
    fn = Math.floor(fn / 2);
    sn = Math.floor(sn / 2);
  }
  return sn === 0 && eq(fr, fromRoot) && eq(sr, toRoot);
}

/** Whether a safe integer ≥ 1 is a power of two (no 32-bit bit operators: sizes may exceed 2^31). */
function isPow2(n: number): boolean {
  let v = n;
  while (v > 1 && v % 2 === 0) v /= 2;
  return v === 1;
}
