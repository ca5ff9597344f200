/**
 * Operator agent blocks on a shared PostgreSQL (docs/replicas.md#serving-as-a-replica): as on
 * SQLite, a block is its `agent_blocked` entry in the gateway chain and an unblock its
 * `agent_unblocked` entry (docs/spec/policy.md#operator-controls), so the chain is the one record of
 * who is blocked. Every replica reads the entries newer than the last it saw (a range of the
 * gateway chain's primary key) and applies them; a block or unblock is checked against the
 * agent's newest such entry and appended in one fenced transaction holding the gateway chain's
 * tip lock, so two replicas cannot both record the same block.
 */
import { GATEWAY_CHAIN_ID } from '@cmcp/verify/formats';
import type pg from 'pg';
import type { BlockEntryType, BlockEvent } from '../port.js';
import { appendEntry, lockChainTip } from './chain.js';
import type { Fence } from './leases.js';
import { fencedTransaction } from './transaction.js';

export type { BlockEntryType, BlockEvent } from '../port.js';

/**
 * The gateway chain's block and unblock entries after `afterSequence` (-1: all), in order.
 * Reads only.
 */
export async function blockEventsSince(db: pg.Pool, afterSequence: number): Promise<BlockEvent[]> {
  const r = await db.query<{ seq: string; entry_type: BlockEntryType; agent_id: string }>(
    `SELECT sequence_number::text AS seq, entry_type, agent_id FROM audit_entries
      WHERE chain_id = $1 AND sequence_number > $2 AND entry_type IN ('agent_blocked', 'agent_unblocked')
      ORDER BY sequence_number`,
    [GATEWAY_CHAIN_ID, afterSequence],
  );
  return r.rows.map((x) => ({ sequence: Number(x.seq), type: x.entry_type, agentId: x.agent_id }));
}

/**
 * Records a block (`agent_blocked`) or unblock (`agent_unblocked`) of `agentId` unless the
 * agent's newest such entry already says so, under the gateway chain's tip lock.
 * @returns (resolves) the entry's hash and sequence_number, or null when nothing changed.
 * @throws (rejects) LeaseLostError (nothing written); pg errors.
 */
export function recordAgentBlock(
  pool: pg.Pool,
  fence: Fence,
  type: BlockEntryType,
  agentId: string,
  detail: Record<string, unknown>,
): Promise<{ entry_hash: string; sequence: number } | null> {
  return fencedTransaction(pool, fence, async (client) => {
    await lockChainTip(client, GATEWAY_CHAIN_ID);
    const last = await client.query<{ entry_type: BlockEntryType }>(
      `SELECT entry_type FROM audit_entries WHERE chain_id = $1 AND agent_id = $2
          AND entry_type IN ('agent_blocked', 'agent_unblocked')
        ORDER BY sequence_number DESC LIMIT 1`,
      [GATEWAY_CHAIN_ID, agentId],
    );
    const blocked = last.rows[0]?.entry_type === 'agent_blocked';
    if (blocked === (type === 'agent_blocked')) return null;
    const e = await appendEntry(
      client,
      GATEWAY_CHAIN_ID,
      { entry_type: type, agent_id: agentId, detail },
      undefined,
      fence.writer,
    );
    return { entry_hash: e.entry_hash, sequence: e.sequence_number };
  });
}

/** Open sessions of `agentId`, whichever replica opened them, oldest first. Reads only. */
export async function openSessionsOf(db: pg.Pool, agentId: string): Promise<string[]> {
  const r = await db.query<{ session_id: string }>(
    "SELECT session_id FROM sessions WHERE agent_id = $1 AND status = 'open' ORDER BY created_ms",
    [agentId],
  );
  return r.rows.map((x) => x.session_id);
}

/** Whether `agentId` ever opened a session (a token agent operators may block). Reads only. */
export async function agentHasSessions(db: pg.Pool, agentId: string): Promise<boolean> {
  const r = await db.query('SELECT 1 FROM sessions WHERE agent_id = $1 LIMIT 1', [agentId]);
  return (r.rowCount ?? 0) > 0;
}
