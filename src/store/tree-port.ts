/**
 * The trees' side of the storage port (./port.ts re-exports it): what checkpoints, receipts and
 * proofs read of each chain's Merkle tree, and where signed checkpoints are kept. Plain data, as
 * the rest of the port.
 */
import type { TreeNode, TreeNodeId } from '@cmcp/verify/formats';

/** A tree head: the size of a chain's Merkle tree and its root (lowercase hex of 32 bytes). */
export interface TreeHead {
  size: number;
  root: string;
}

/** A signed checkpoint of a chain's tree as stored (docs/spec/transparency.md#checkpoints). */
export interface StoredCheckpoint {
  chain_id: string;
  tree_size: number;
  /** The tree's root at that size, lowercase hex. */
  root_hash: string;
  /** The C2SP signed note, exactly as signed. */
  note: string;
  /** RFC 3339 UTC: when it was signed. */
  signed_at: string;
}

/** A call's entry as a receipt reads it. */
export interface CallEntry {
  canonical: string;
  entry_hash: string;
  sequence_number: number;
}

/**
 * Every chain is also an RFC 9162 Merkle tree (docs/spec/transparency.md#the-tree) whose
 * frontier and perfect subtree nodes each append stores in its own transaction; this is what
 * checkpoints, receipts and proofs read of it, and where signed checkpoints are kept.
 * SQLite: store/sqlite/tree.ts; PostgreSQL: store/postgres/tree.ts.
 */
export interface TreeStore {
  /** The chain's tree head as committed, or undefined for an empty chain. */
  treeHead(chainId: string): Promise<TreeHead | undefined>;
  /**
   * The stored perfect subtree nodes `ids` of the chain (level 0: the entries' leaf hashes);
   * a node not stored (a chain written before trees were kept, not appended to since) is left out.
   */
  treeNodes(chainId: string, ids: readonly TreeNodeId[]): Promise<TreeNode[]>;
  /**
   * Stores `cp` unless a checkpoint of that chain and size is stored already.
   * @returns the checkpoint stored for that size (`cp`, or the one stored before it).
   */
  recordCheckpoint(cp: StoredCheckpoint): Promise<StoredCheckpoint>;
  /** The smallest stored checkpoint whose tree holds leaf `leafIndex`, or undefined. */
  checkpointCovering(chainId: string, leafIndex: number): Promise<StoredCheckpoint | undefined>;
  /** The stored checkpoint of that size, or undefined. */
  checkpointOfSize(chainId: string, size: number): Promise<StoredCheckpoint | undefined>;
  /** The chain's stored checkpoints, smallest first. */
  checkpoints(chainId: string): Promise<StoredCheckpoint[]>;
  /** The newest entry of the chain recorded under `callId`, or undefined. */
  callEntry(chainId: string, callId: string): Promise<CallEntry | undefined>;
}
