/**
 * testing/long-session.ts's long session on a replica serving from PostgreSQL: opened through
 * the replica, its chain filled with the same tool_call entries, each named and signed by the
 * replica as its writer (docs/spec/audit-entries.md#writers), as the replica's own calls write
 * them. The entries are built by the one shared builder (store/entries/next-entry.ts) and written 64 to
 * a fenced transaction, several rows per statement, so that 10,000 fill in seconds: the close
 * or the export is what is measured, not the fill. The chain's tree is kept as an append keeps
 * it (its frontier on the tip row, its nodes in `tree_nodes`, store/postgres/tree.ts), so the
 * close's append does not rebuild it.
 */
import { MerkleFrontier, signEntryWriter, type TreeNode } from '@cmcp/verify/formats';
import type { ReplicaGateway } from '../src/gateway/lifecycle/start.js';
import { formatMicros, systemMicroClock } from '../src/store/entries/clock.js';
import { ENTRY_COLUMNS, entryRowValues } from '../src/store/entries/entry-row.js';
import { buildNextEntry, type ChainTip } from '../src/store/entries/next-entry.js';
import { lockChainTip } from '../src/store/postgres/chain.js';
import { fencedTransaction } from '../src/store/postgres/transaction.js';
import { nodeColumns } from '../src/store/postgres/tree.js';
import { type LongSessionAgent, longSessionEntry, openLongSession } from './long-session.js';

/** Entries per transaction (as group commits write them). */
const FILL_BATCH = 64;

/**
 * Opens a session of `agent` through the replica `gw` and appends `n` tool_call entries to its
 * chain under the replica's fence and writer key. @returns the session_id.
 * @throws Error when the replica refuses to open the session or has no writer key; pg errors.
 */
export async function longSessionPostgres(
  gw: ReplicaGateway,
  agent: LongSessionAgent,
  n: number,
): Promise<string> {
  const sid = await openLongSession(gw, agent);
  const fence = gw.lease.fence;
  const writer = fence.writer;
  if (!writer) throw new Error('the replica has no writer key');
  const replica = { replica_id: writer.replicaId, key_thumbprint: writer.keyThumbprint };
  for (let from = 0; from < n; from += FILL_BATCH)
    await fencedTransaction(gw.pool, fence, async (client) => {
      let tip: ChainTip | undefined = await lockChainTip(client, sid);
      const stored = await client.query<{ tree_frontier: Buffer | null }>(
        'SELECT tree_frontier FROM chain_tips WHERE chain_id = $1',
        [sid],
      );
      const saved = stored.rows[0]?.tree_frontier;
      const frontier = saved ? MerkleFrontier.fromBytes(saved) : MerkleFrontier.empty();
      if (frontier.size !== (tip?.sequence_number ?? -1) + 1)
        throw new Error(`chain ${sid}: its tree frontier does not reach its tip`);
      const nodes: TreeNode[] = [];
      const rows: (string | number | null)[][] = [];
      const signatures: string[][] = [];
      for (let i = from; i < Math.min(n, from + FILL_BATCH); i++) {
        const e = buildNextEntry(
          sid,
          longSessionEntry(sid, agent.agentId, i),
          tip,
          formatMicros(systemMicroClock()),
          replica,
        );
        rows.push(entryRowValues(e));
        signatures.push([e.entry_hash, writer.replicaId, signEntryWriter(e.entry_hash, writer.key)]);
        nodes.push(...frontier.appendEntryHash(e.entry_hash));
        tip = {
          sequence_number: e.body.sequence_number,
          entry_hash: e.entry_hash,
          timestamp_utc: e.body.timestamp_utc,
        };
      }
      const columns = (rows[0] ?? []).length;
      await client.query(
        `INSERT INTO audit_entries (${ENTRY_COLUMNS}) VALUES ${placeholders(rows.length, columns)}`,
        rows.flat(),
      );
      await client.query(
        `INSERT INTO entry_writers (entry_hash, replica_id, writer_signature) VALUES ${placeholders(signatures.length, 3)}`,
        signatures.flat(),
      );
      if (tip)
        await client.query(
          `WITH n AS (INSERT INTO tree_nodes (chain_id, level, node_index, hash)
             SELECT $1, l, i, h FROM unnest($6::bigint[], $7::bigint[], $8::bytea[]) AS t(l, i, h) ON CONFLICT DO NOTHING)
           UPDATE chain_tips SET tip_sequence = $2, tip_hash = $3, tip_timestamp = $4, tree_frontier = $5 WHERE chain_id = $1`,
          [
            sid,
            tip.sequence_number,
            tip.entry_hash,
            tip.timestamp_utc,
            frontier.toBytes(),
            ...nodeColumns(nodes),
          ],
        );
    });
  return sid;
}

/** `($1,$2,…),($k+1,…)…`: `rows` groups of `columns` numbered parameters. */
function placeholders(rows: number, columns: number): string {
  return Array.from(
    { length: rows },
    (_, r) => `(${Array.from({ length: columns }, (_, c) => `$${r * columns + c + 1}`).join(',')})`,
  ).join(',');
}
