/**
 * A chain's Merkle tree on PostgreSQL (docs/spec/transparency.md#the-tree): the frontier is kept
 * on the chain's `chain_tips` row, which every append locks FOR UPDATE, so the frontier moves with
 * the tip in the append's own transaction, whichever replica appends (./chain.ts); the perfect
 * subtree nodes each append completes above the leaves are `tree_nodes` rows, inserted in the
 * statement that moves the tip (no extra round trip). Leaves are read from `audit_entries`.
 * Signed checkpoints are `checkpoints` rows (store/port.ts TreeStore).
 */
import { entryLeafHash, MerkleFrontier, type TreeNode, type TreeNodeId } from '@cmcp/verify/formats';
import type pg from 'pg';
import type { StoredCheckpoint, TreeHead, TreeStore } from '../port.js';

/**
 * The frontier of a chain whose tip row holds none (a chain written before trees were kept):
 * rebuilt from its entries, its nodes stored. Inside the append's transaction, the tip row locked.
 */
export async function rebuildFrontier(client: pg.ClientBase, chainId: string): Promise<MerkleFrontier> {
  const r = await client.query<{ entry_hash: string }>(
    'SELECT entry_hash FROM audit_entries WHERE chain_id = $1 ORDER BY sequence_number',
    [chainId],
  );
  const f = MerkleFrontier.empty();
  const nodes: TreeNode[] = [];
  for (const row of r.rows) for (const n of f.appendEntryHash(row.entry_hash)) if (n.level > 0) nodes.push(n);
  await client.query(
    `INSERT INTO tree_nodes (chain_id, level, node_index, hash)
     SELECT $1, l, i, h FROM unnest($2::bigint[], $3::bigint[], $4::bytea[]) AS t(l, i, h) ON CONFLICT DO NOTHING`,
    [chainId, ...nodeColumns(nodes)],
  );
  return f;
}

/** The columns of `nodes` above the leaves, as `unnest` takes them: levels, indexes, hashes. */
export function nodeColumns(nodes: readonly TreeNode[]): [string[], string[], Buffer[]] {
  const above = nodes.filter((n) => n.level > 0);
  return [above.map((n) => String(n.level)), above.map((n) => String(n.index)), above.map((n) => n.hash)];
}

interface CheckpointRow {
  chain_id: string;
  tree_size: string;
  root_hash: string;
  note: string;
  signed_at: string;
}

// Read as text (BIGINT); sorted by the stored number, not the text (`c.tree_size`).
const CHECKPOINT_COLUMNS = 'c.chain_id, c.tree_size::text AS tree_size, c.root_hash, c.note, c.signed_at';

function checkpointOf(r: CheckpointRow | undefined): StoredCheckpoint | undefined {
  return r && { ...r, tree_size: Number(r.tree_size) };
}

/** The trees and checkpoints of one PostgreSQL database. Reads only, but for {@link recordCheckpoint}. */
export class PostgresTreeStore implements TreeStore {
  constructor(private readonly pool: pg.Pool) {}

  async treeHead(chainId: string): Promise<TreeHead | undefined> {
    const r = await this.pool.query<{ tree_frontier: Buffer | null; tip_sequence: string }>(
      'SELECT tree_frontier, tip_sequence::text FROM chain_tips WHERE chain_id = $1',
      [chainId],
    );
    const row = r.rows[0];
    if (!row || Number(row.tip_sequence) < 0) return undefined;
    const f = row.tree_frontier
      ? MerkleFrontier.fromBytes(row.tree_frontier)
      : await this.frontierOf(chainId);
    return { size: f.size, root: f.root().toString('hex') };
  }

  /** A chain's frontier computed from its entries (one written before trees were kept). */
  private async frontierOf(chainId: string): Promise<MerkleFrontier> {
    const r = await this.pool.query<{ entry_hash: string }>(
      'SELECT entry_hash FROM audit_entries WHERE chain_id = $1 ORDER BY sequence_number',
      [chainId],
    );
    const f = MerkleFrontier.empty();
    for (const row of r.rows) f.appendEntryHash(row.entry_hash);
    return f;
  }

  async treeNodes(chainId: string, ids: readonly TreeNodeId[]): Promise<TreeNode[]> {
    const leaves = ids.filter((id) => id.level === 0).map((id) => String(id.index));
    const inner = ids.filter((id) => id.level > 0);
    const [l, n] = await Promise.all([
      this.pool.query<{ sequence_number: string; entry_hash: string }>(
        `SELECT sequence_number::text, entry_hash FROM audit_entries
         WHERE chain_id = $1 AND sequence_number = ANY($2::bigint[])`,
        [chainId, leaves],
      ),
      this.pool.query<{ level: string; node_index: string; hash: Buffer }>(
        `SELECT n.level::text, n.node_index::text, n.hash FROM tree_nodes n
         JOIN unnest($2::bigint[], $3::bigint[]) AS w(l, i) ON n.level = w.l AND n.node_index = w.i
         WHERE n.chain_id = $1`,
        [chainId, inner.map((id) => String(id.level)), inner.map((id) => String(id.index))],
      ),
    ]);
    return [
      ...l.rows.map((r) => ({
        level: 0,
        index: Number(r.sequence_number),
        hash: entryLeafHash(r.entry_hash),
      })),
      ...n.rows.map((r) => ({ level: Number(r.level), index: Number(r.node_index), hash: r.hash })),
    ];
  }

  async recordCheckpoint(cp: StoredCheckpoint): Promise<StoredCheckpoint> {
    await this.pool.query(
      `INSERT INTO checkpoints (chain_id, tree_size, root_hash, note, signed_at) VALUES ($1, $2, $3, $4, $5)
       ON CONFLICT (chain_id, tree_size) DO NOTHING`,
      [cp.chain_id, cp.tree_size, cp.root_hash, cp.note, cp.signed_at],
    );
    return (await this.checkpointOfSize(cp.chain_id, cp.tree_size)) ?? cp;
  }

  async checkpointCovering(chainId: string, leafIndex: number): Promise<StoredCheckpoint | undefined> {
    const r = await this.pool.query<CheckpointRow>(
      `SELECT ${CHECKPOINT_COLUMNS} FROM checkpoints c WHERE c.chain_id = $1 AND c.tree_size > $2
       ORDER BY c.tree_size LIMIT 1`,
      [chainId, leafIndex],
    );
    return checkpointOf(r.rows[0]);
  }

  async checkpointOfSize(chainId: string, size: number): Promise<StoredCheckpoint | undefined> {
    const r = await this.pool.query<CheckpointRow>(
      `SELECT ${CHECKPOINT_COLUMNS} FROM checkpoints c WHERE c.chain_id = $1 AND c.tree_size = $2`,
      [chainId, size],
    );
    return checkpointOf(r.rows[0]);
  }

  async checkpoints(chainId: string): Promise<StoredCheckpoint[]> {
    const r = await this.pool.query<CheckpointRow>(
      `SELECT ${CHECKPOINT_COLUMNS} FROM checkpoints c WHERE c.chain_id = $1 ORDER BY c.tree_size`,
      [chainId],
    );
    return r.rows.map((row) => checkpointOf(row) as StoredCheckpoint);
  }

  async callEntry(
    chainId: string,
    callId: string,
  ): Promise<{ canonical: string; entry_hash: string; sequence_number: number } | undefined> {
    const r = await this.pool.query<{ canonical: string; entry_hash: string; sequence_number: string }>(
      `SELECT canonical, entry_hash, sequence_number::text FROM audit_entries
       WHERE chain_id = $1 AND call_id = $2 ORDER BY sequence_number DESC LIMIT 1`,
      [chainId, callId],
    );
    const row = r.rows[0];
    return row && { ...row, sequence_number: Number(row.sequence_number) };
  }
}
