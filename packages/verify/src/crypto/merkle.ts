/**
 * RFC 6962 Merkle tree hashing over SHA-256 (RFC 6962 §2.1, restated in RFC 9162 §2.1): leaf
 * hash SHA-256(0x00 ‖ d), node hash SHA-256(0x01 ‖ left ‖ right), the tree split at the largest
 * power of two below n, audit paths as in RFC 6962 §2.1.1 (leaf end first) and the root
 * recomputed from an audit path as in RFC 9162 §2.1.3.2. The session binding batches
 * (docs/spec/binding.md#batched-bindings) are its one user; trees here are small (a batch).
 */
import { CmcpError } from '../errors/index.js';
import { digest } from './hash.js';

/** An index or tree size outside what a tree can have (codes LEAF_INDEX_OUT_OF_RANGE, TREE_SIZE_OUT_OF_RANGE). */
export class MerkleError extends CmcpError {
  declare readonly code: 'LEAF_INDEX_OUT_OF_RANGE' | 'TREE_SIZE_OUT_OF_RANGE';
  constructor(code: 'LEAF_INDEX_OUT_OF_RANGE' | 'TREE_SIZE_OUT_OF_RANGE', message: string) {
    super(code, message);
    this.name = 'MerkleError';
  }
}

const LEAF_PREFIX = Uint8Array.of(0x00);
const NODE_PREFIX = Uint8Array.of(0x01);

/** RFC 6962 §2.1 leaf hash: SHA-256(0x00 ‖ data), 32 bytes. */
export function merkleLeafHash(data: Uint8Array): Buffer {
  return digest('sha256', LEAF_PREFIX, data);
}

/** RFC 6962 §2.1 interior node hash: SHA-256(0x01 ‖ left ‖ right), 32 bytes. */
export function merkleNodeHash(left: Uint8Array, right: Uint8Array): Buffer {
  return digest('sha256', NODE_PREFIX, left, right);
}

/** The largest power of two strictly below n (n ≥ 2): RFC 6962 §2.1's k, where MTH splits D[n]. */
export function splitPoint(n: number): number {
  let k = 1;
  while (k * 2 < n) k *= 2;
  return k;
}

/** Throws unless `n` is a whole number ≥ 1 that fits a safe integer. */
function checkSize(n: number): void {
  if (!Number.isSafeInteger(n) || n < 1)
    throw new MerkleError('TREE_SIZE_OUT_OF_RANGE', `tree size ${n} is not a whole number ≥ 1`);
}

/** Throws unless 0 ≤ index < size. */
function checkIndex(index: number, size: number): void {
  if (!Number.isSafeInteger(index) || index < 0 || index >= size)
    throw new MerkleError(
      'LEAF_INDEX_OUT_OF_RANGE',
      `leaf index ${index} is outside a tree of ${size} leaves`,
    );
}

/**
 * A tree over given leaf hashes (RFC 6962 §2.1 MTH), with the audit path of every leaf.
 * Subtree hashes are computed once (memoised), so all paths of an n-leaf tree cost O(n log n).
 */
export class MerkleTree {
  private readonly memo = new Map<string, Buffer>();
  /** @param leafHashes the leaf hashes (each {@link merkleLeafHash} of its data), at least one. */
  constructor(private readonly leafHashes: readonly Buffer[]) {
    checkSize(leafHashes.length);
  }

  get size(): number {
    return this.leafHashes.length;
  }

  /** MTH(D[0:n]), 32 bytes. */
  root(): Buffer {
    return this.subtree(0, this.leafHashes.length);
  }

  /**
   * RFC 6962 §2.1.1 PATH(m, D[n]): sibling hashes from the leaf up to the root.
   * @throws MerkleError LEAF_INDEX_OUT_OF_RANGE.
   */
  auditPath(index: number): Buffer[] {
    checkIndex(index, this.size);
    const path: Buffer[] = [];
    let [lo, hi, m] = [0, this.size, index];
    // Walk down from the root; each step's sibling is prepended (the path is leaf end first).
    while (hi - lo > 1) {
      const k = splitPoint(hi - lo);
      if (m < k) {
        path.unshift(this.subtree(lo + k, hi));
        hi = lo + k;
      } else {
        path.unshift(this.subtree(lo, lo + k));
        lo += k;
        m -= k;
      }
    }
    return path;
  }

  /** MTH(D[lo:hi]) for 0 ≤ lo < hi ≤ n. */
  private subtree(lo: number, hi: number): Buffer {
    if (hi - lo === 1) return this.leafHashes[lo] as Buffer;
    const key = `${lo}:${hi}`;
    let h = this.memo.get(key);
    if (!h) {
      const k = splitPoint(hi - lo);
      h = merkleNodeHash(this.subtree(lo, lo + k), this.subtree(lo + k, hi));
      this.memo.set(key, h);
    }
    return h;
  }
}

/** How many hashes the audit path of leaf `index` in a tree of `size` leaves has (RFC 6962 §2.1.1). */
export function auditPathLength(index: number, size: number): number {
  checkSize(size);
  checkIndex(index, size);
  let [n, m, len] = [size, index, 0];
  while (n > 1) {
    const k = splitPoint(n);
    if (m < k) n = k;
    else {
      m -= k;
      n -= k;
    }
    len++;
  }
  return len;
}

/**
 * The root an audit path leads to from a leaf hash (RFC 9162 §2.1.3.2), or null when the path
 * has the wrong number of hashes for (index, size). Compare the result with the expected root.
 * @throws MerkleError TREE_SIZE_OUT_OF_RANGE | LEAF_INDEX_OUT_OF_RANGE.
 */
export function rootFromAuditPath(
  leafHash: Uint8Array,
  index: number,
  size: number,
  path: readonly Uint8Array[],
): Buffer | null {
  checkSize(size);
  checkIndex(index, size);
  // Plain numbers: sizes are safe integers, so halving stays exact (no 32-bit bit operators).
  let fn = index;
  let sn = size - 1;
  let r: Buffer = Buffer.from(leafHash);
  for (const p of path) {
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
