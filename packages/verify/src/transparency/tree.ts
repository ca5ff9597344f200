/**
 * The Merkle tree of an audit chain (docs/spec/transparency.md#the-tree): RFC 9162 §2.1 hashing
 * over SHA-256, one leaf per entry in chain order, leaf input = the 32 bytes of the entry's
 * `entry_hash`. The gateway keeps a chain's tree as a {@link MerkleFrontier} (O(log n) state:
 * the roots of the perfect subtrees the leaves so far fill) and may store the perfect subtree
 * nodes each append completes ({@link TreeNode}); every proof hash is made of those nodes
 * (./proofs.ts). Leaf and node hashing are crypto/merkle.ts's, shared with batched bindings.
 */
import { merkleLeafHash, merkleNodeHash } from '../crypto/merkle.js';
import { TransparencyError } from './errors.js';

/** MTH({}) = SHA-256 of the empty string: the root of a tree of size 0 (RFC 9162 §2.1.1). */
export const EMPTY_TREE_ROOT: Buffer = Buffer.from(
  'e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855',
  'hex',
);

/**
 * A perfect, aligned subtree: the 2^level leaves [index·2^level, (index+1)·2^level).
 * Level 0 is a leaf; every hash of an inclusion or consistency proof is one of these or the
 * right-edge combination of some ({@link subtreeNodeIds}).
 */
export interface TreeNodeId {
  level: number;
  index: number;
}

/** A perfect subtree with its hash (MTH of its leaves, 32 bytes). */
export interface TreeNode extends TreeNodeId {
  hash: Buffer;
}

/** Reads the hash of a perfect subtree the caller stored (or computes it); 32 bytes. */
export type TreeNodeReader = (id: TreeNodeId) => Uint8Array;

const HEX64 = /^[0-9a-f]{64}$/;

/**
 * The leaf hash of an audit entry: SHA-256(0x00 ‖ entry_hash bytes), where the leaf input is the
 * 32 bytes the lowercase hex `entry_hash` spells (docs/spec/transparency.md#the-tree).
 * @throws TransparencyError TREE_LEAF_MALFORMED when `entryHash` is not 64 lowercase hex.
 */
export function entryLeafHash(entryHash: string): Buffer {
  if (!HEX64.test(entryHash))
    throw new TransparencyError('TREE_LEAF_MALFORMED', 'entry_hash is not 64 lowercase hex');
  return merkleLeafHash(Buffer.from(entryHash, 'hex'));
}

/** Throws unless `n` is a whole number ≥ 0 that fits a safe integer. */
export function checkTreeSize(n: number, what = 'tree size'): void {
  if (!Number.isSafeInteger(n) || n < 0)
    throw new TransparencyError('TREE_SIZE_INVALID', `${what} ${n} is not a whole number ≥ 0`);
}

/** 2^level as a plain number (exact for level ≤ 53). */
const pow2 = (level: number): number => 2 ** level;

/**
 * The perfect subtrees MTH(D[lo:hi]) is made of, largest first, for a range the RFC 9162 §2.1.1
 * recursion produces (lo a multiple of the smallest power of two ≥ hi − lo): one per set bit of
 * hi − lo. MTH(D[lo:hi]) is their right fold: H(p₁, H(p₂, … pₖ)).
 */
export function subtreeNodeIds(lo: number, hi: number): TreeNodeId[] {
  const ids: TreeNodeId[] = [];
  let start = lo;
  let rest = hi - lo;
  for (let level = 53; level >= 0 && rest > 0; level--) {
    const width = pow2(level);
    if (rest >= width) {
      ids.push({ level, index: start / width });
      start += width;
      rest -= width;
    }
  }
  return ids;
}

/** MTH(D[lo:hi]) from perfect subtree hashes ({@link subtreeNodeIds}). */
export function subtreeRoot(lo: number, hi: number, read: TreeNodeReader): Buffer {
  const ids = subtreeNodeIds(lo, hi);
  if (ids.length === 0) return EMPTY_TREE_ROOT;
  let r: Buffer = Buffer.from(read(ids[ids.length - 1] as TreeNodeId));
  for (let i = ids.length - 2; i >= 0; i--) r = merkleNodeHash(read(ids[i] as TreeNodeId), r);
  return r;
}

/** Serialised frontier as JSON: `size` and the perfect subtree roots, largest first, hex. */
export interface MerkleFrontierJson {
  size: number;
  hashes: string[];
}

/** Number of set bits of a safe integer. */
function popcount(n: number): number {
  let c = 0;
  for (let v = n; v > 0; v = Math.floor(v / 2)) c += v % 2;
  return c;
}

/**
 * The incremental state of an RFC 9162 tree: for every set bit of the size, the root of the
 * perfect subtree of that many leaves, largest (leftmost) first — O(log n) hashes. Appending a
 * leaf merges equal subtrees (as binary addition carries) and returns the perfect nodes it
 * completed, so a caller that stores them can build any proof later (./proofs.ts).
 * Source: RFC 9162 §2.1.1 (MTH), the "compact range" of the tlog literature.
 */
export class MerkleFrontier {
  private constructor(
    private treeSize: number,
    /** Perfect subtree roots, largest first; levels are the set bits of treeSize. */
    private readonly hashes: Buffer[],
  ) {}

  /** An empty tree. */
  static empty(): MerkleFrontier {
    return new MerkleFrontier(0, []);
  }

  /** Leaves appended so far. */
  get size(): number {
    return this.treeSize;
  }

  /**
   * Appends one leaf hash (already {@link entryLeafHash}ed) and returns the perfect subtree
   * nodes this append completed: the leaf itself (level 0), then each merge, lowest first.
   */
  append(leafHash: Uint8Array): TreeNode[] {
    if (leafHash.length !== 32) throw new TransparencyError('TREE_LEAF_MALFORMED', 'a leaf hash is 32 bytes');
    const index = this.treeSize;
    let h: Buffer = Buffer.from(leafHash);
    const created: TreeNode[] = [{ level: 0, index, hash: h }];
    // Each trailing 1-bit of the old size is a subtree of equal width to merge with.
    let level = 0;
    for (let v = index; v % 2 === 1; v = Math.floor(v / 2)) {
      const left = this.hashes.pop() as Buffer;
      h = merkleNodeHash(left, h);
      level++;
      created.push({ level, index: Math.floor(index / pow2(level)), hash: h });
    }
    this.hashes.push(h);
    this.treeSize = index + 1;
    return created;
  }

  /** Appends the leaf of an audit entry ({@link entryLeafHash}). */
  appendEntryHash(entryHash: string): TreeNode[] {
    return this.append(entryLeafHash(entryHash));
  }

  /** MTH of the leaves so far (RFC 9162 §2.1.1), 32 bytes; {@link EMPTY_TREE_ROOT} when empty. */
  root(): Buffer {
    if (this.hashes.length === 0) return EMPTY_TREE_ROOT;
    let r = this.hashes[this.hashes.length - 1] as Buffer;
    for (let i = this.hashes.length - 2; i >= 0; i--) r = merkleNodeHash(this.hashes[i] as Buffer, r);
    return r;
  }

  /** A copy that appends independently. */
  clone(): MerkleFrontier {
    return new MerkleFrontier(this.treeSize, [...this.hashes]);
  }

  /** `{size, hashes}` with hex hashes, largest subtree first. */
  toJSON(): MerkleFrontierJson {
    return { size: this.treeSize, hashes: this.hashes.map((h) => h.toString('hex')) };
  }

  /**
   * Bytes for a BLOB/bytea column: size as 8 bytes big-endian, then the 32-byte hashes,
   * largest subtree first (as many as the size has set bits).
   */
  toBytes(): Buffer {
    const out = Buffer.alloc(8 + 32 * this.hashes.length);
    out.writeBigUInt64BE(BigInt(this.treeSize), 0);
    this.hashes.forEach((h, i) => {
      h.copy(out, 8 + 32 * i);
    });
    return out;
  }

  /**
   * Rebuilds a frontier from {@link toJSON}'s form.
   * @throws TransparencyError TREE_STATE_MALFORMED when the hash count is not the size's set bits.
   */
  static fromJSON(json: MerkleFrontierJson): MerkleFrontier {
    checkTreeSize(json?.size);
    const hashes = Array.isArray(json.hashes) ? json.hashes : [];
    if (hashes.length !== popcount(json.size) || !hashes.every((h) => HEX64.test(h)))
      throw new TransparencyError(
        'TREE_STATE_MALFORMED',
        `a frontier of size ${json.size} has ${popcount(json.size)} hashes of 64 hex`,
      );
    return new MerkleFrontier(
      json.size,
      hashes.map((h) => Buffer.from(h, 'hex')),
    );
  }

  /**
   * Rebuilds a frontier from {@link toBytes}'s form.
   * @throws TransparencyError TREE_STATE_MALFORMED on a wrong length or size.
   */
  static fromBytes(bytes: Uint8Array): MerkleFrontier {
    const b = Buffer.from(bytes);
    if (b.length < 8 || (b.length - 8) % 32 !== 0)
      throw new TransparencyError('TREE_STATE_MALFORMED', 'frontier bytes are 8 + 32·k long');
    const size = b.readBigUInt64BE(0);
    if (size > BigInt(Number.MAX_SAFE_INTEGER))
      throw new TransparencyError('TREE_STATE_MALFORMED', 'frontier size beyond 2^53 − 1');
    const n = Number(size);
    const k = (b.length - 8) / 32;
    if (k !== popcount(n))
      throw new TransparencyError(
        'TREE_STATE_MALFORMED',
        `a frontier of size ${n} has ${popcount(n)} hashes`,
      );
    const hashes: Buffer[] = [];
    for (let i = 0; i < k; i++) hashes.push(Buffer.from(b.subarray(8 + 32 * i, 40 + 32 * i)));
    return new MerkleFrontier(n, hashes);
  }
}

/**
 * MTH over given leaf hashes, by appending them to a frontier (RFC 9162 §2.1.1); 32 bytes.
 * For a bundle's entries: `treeRoot(entries.map((e) => entryLeafHash(e.entry_hash)))`.
 */
export function treeRoot(leafHashes: readonly Uint8Array[]): Buffer {
  const f = MerkleFrontier.empty();
  for (const h of leafHashes) f.append(h);
  return f.root();
}

/**
 * Every perfect subtree node over the given leaf hashes, as a reader: what a caller holding the
 * leaves (a bundle, a test) passes to the proof builders of ./proofs.ts. O(n) memory.
 */
export function leafNodeReader(leafHashes: readonly Uint8Array[]): TreeNodeReader {
  const f = MerkleFrontier.empty();
  const nodes = new Map<string, Buffer>();
  for (const h of leafHashes) for (const n of f.append(h)) nodes.set(`${n.level}:${n.index}`, n.hash);
  return (id) => {
    const h = nodes.get(`${id.level}:${id.index}`);
    if (!h)
      throw new TransparencyError(
        'TREE_NODE_MISSING',
        `no perfect subtree at level ${id.level}, index ${id.index} among ${leafHashes.length} leaves`,
      );
    return h;
  };
}
