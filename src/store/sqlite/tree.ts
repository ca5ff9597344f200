/**
 * A chain's Merkle tree on SQLite (docs/spec/transparency.md#the-tree): every append
 * (./chain.ts) moves the chain's `chain_tips` row with the tree's frontier and inserts the
 * perfect subtree nodes it completes above the leaves (`tree_nodes`), inside the append's own
 * IMMEDIATE transaction, so the tree survives a restart exactly as the chain does. Leaves are
 * read from `audit_entries`. Signed checkpoints are `checkpoints` rows (store/port.ts TreeStore).
 * A chain whose tip row holds no frontier, or one of another size (written before trees were
 * kept), has its frontier and nodes rebuilt from its entries at its next append.
 */
import { entryLeafHash, MerkleFrontier, type TreeNode, type TreeNodeId } from '@cmcp/verify/formats';
import type { StoredCheckpoint, TreeHead, TreeStore } from '../port.js';
import { type Db, immediateAsync } from './db.js';
import { prepared } from './statements.js';

/** The frontier row of a chain, or undefined. */
function frontierRow(db: Db, chainId: string): { tree_frontier: Buffer | null } | undefined {
  return prepared<[string], { tree_frontier: Buffer | null }>(
    db,
    'SELECT tree_frontier FROM chain_tips WHERE chain_id = ?',
  ).get(chainId);
}

function insertNodes(db: Db, chainId: string, nodes: readonly TreeNode[]): void {
  const stmt = prepared(
    db,
    'INSERT OR IGNORE INTO tree_nodes (chain_id, level, node_index, hash) VALUES (?,?,?,?)',
  );
  for (const n of nodes) if (n.level > 0) stmt.run(chainId, n.level, n.index, n.hash);
}

/**
 * A chain's frontier over its first `size` entries, computed from them. The hashes are read in
 * full first: the node inserts cannot run on the connection while a read iterates it.
 */
function frontierFromEntries(db: Db, chainId: string, size: number, store: boolean): MerkleFrontier {
  const f = MerkleFrontier.empty();
  const rows = prepared<[string, number], { entry_hash: string }>(
    db,
    'SELECT entry_hash FROM audit_entries WHERE chain_id = ? AND sequence_number < ? ORDER BY sequence_number',
  ).all(chainId, size);
  for (const r of rows) {
    const nodes = f.appendEntryHash(r.entry_hash);
    if (store) insertNodes(db, chainId, nodes);
  }
  return f;
}

/**
 * Adds the entry of `sequence` (`entryHash`, stamped `timestamp`) to its chain's tree and moves
 * the chain's tip row. Inside the append's IMMEDIATE transaction, after the entry's insert.
 */
export function appendToTree(
  db: Db,
  chainId: string,
  sequence: number,
  entryHash: string,
  timestamp: string,
): void {
  const stored = frontierRow(db, chainId)?.tree_frontier;
  let f = stored ? MerkleFrontier.fromBytes(stored) : undefined;
  if (f?.size !== sequence) f = frontierFromEntries(db, chainId, sequence, true);
  insertNodes(db, chainId, f.appendEntryHash(entryHash));
  prepared(
    db,
    `INSERT INTO chain_tips (chain_id, tip_sequence, tip_hash, tip_timestamp, tree_frontier) VALUES (?,?,?,?,?)
     ON CONFLICT (chain_id) DO UPDATE SET tip_sequence = excluded.tip_sequence, tip_hash = excluded.tip_hash,
       tip_timestamp = excluded.tip_timestamp, tree_frontier = excluded.tree_frontier`,
  ).run(chainId, sequence, entryHash, timestamp, f.toBytes());
}

/** The trees and checkpoints of one SQLite database. Reads answer at once; only checkpoints are written. */
export class SqliteTreeStore implements TreeStore {
  constructor(private readonly db: Db) {}

  async treeHead(chainId: string): Promise<TreeHead | undefined> {
    const stored = frontierRow(this.db, chainId)?.tree_frontier;
    const tip = prepared<[string], { n: number | null }>(
      this.db,
      'SELECT max(sequence_number) AS n FROM audit_entries WHERE chain_id = ?',
    ).get(chainId)?.n;
    if (tip === null || tip === undefined) return undefined;
    let f = stored ? MerkleFrontier.fromBytes(stored) : undefined;
    if (f?.size !== tip + 1) f = frontierFromEntries(this.db, chainId, tip + 1, false);
    return { size: f.size, root: f.root().toString('hex') };
  }

  async treeNodes(chainId: string, ids: readonly TreeNodeId[]): Promise<TreeNode[]> {
    const leaf = prepared<[string, number], { entry_hash: string }>(
      this.db,
      'SELECT entry_hash FROM audit_entries WHERE chain_id = ? AND sequence_number = ?',
    );
    const node = prepared<[string, number, number], { hash: Buffer }>(
      this.db,
      'SELECT hash FROM tree_nodes WHERE chain_id = ? AND level = ? AND node_index = ?',
    );
    const out: TreeNode[] = [];
    for (const id of ids) {
      const hash =
        id.level === 0
          ? (() => {
              const e = leaf.get(chainId, id.index);
              return e && entryLeafHash(e.entry_hash);
            })()
          : node.get(chainId, id.level, id.index)?.hash;
      if (hash) out.push({ ...id, hash });
    }
    return out;
  }

  /** @throws (rejects) SQLITE_BUSY once the busy timeout has passed (the write lock waited for by awaiting). */
  async recordCheckpoint(cp: StoredCheckpoint): Promise<StoredCheckpoint> {
    await immediateAsync(this.db, () =>
      prepared(
        this.db,
        'INSERT OR IGNORE INTO checkpoints (chain_id, tree_size, root_hash, note, signed_at) VALUES (?,?,?,?,?)',
      ).run(cp.chain_id, cp.tree_size, cp.root_hash, cp.note, cp.signed_at),
    );
    return (await this.checkpointOfSize(cp.chain_id, cp.tree_size)) ?? cp;
  }

  async checkpointCovering(chainId: string, leafIndex: number): Promise<StoredCheckpoint | undefined> {
    return prepared<[string, number], StoredCheckpoint>(
      this.db,
      'SELECT * FROM checkpoints WHERE chain_id = ? AND tree_size > ? ORDER BY tree_size LIMIT 1',
    ).get(chainId, leafIndex);
  }

  async checkpointOfSize(chainId: string, size: number): Promise<StoredCheckpoint | undefined> {
    return prepared<[string, number], StoredCheckpoint>(
      this.db,
      'SELECT * FROM checkpoints WHERE chain_id = ? AND tree_size = ?',
    ).get(chainId, size);
  }

  async checkpoints(chainId: string): Promise<StoredCheckpoint[]> {
    return prepared<[string], StoredCheckpoint>(
      this.db,
      'SELECT * FROM checkpoints WHERE chain_id = ? ORDER BY tree_size',
    ).all(chainId);
  }

  async callEntry(
    chainId: string,
    callId: string,
  ): Promise<{ canonical: string; entry_hash: string; sequence_number: number } | undefined> {
    return prepared<[string, string], { canonical: string; entry_hash: string; sequence_number: number }>(
      this.db,
      `SELECT canonical, entry_hash, sequence_number FROM audit_entries
       WHERE chain_id = ? AND call_id = ? ORDER BY sequence_number DESC LIMIT 1`,
    ).get(chainId, callId);
  }
}
