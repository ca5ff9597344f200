/**
 * Signed policy reloads on a shared PostgreSQL (docs/replicas.md#serving-as-a-replica): as on
 * SQLite, an accepted reload is its `policy_reload` entry in the gateway chain with the
 * bundle's files and signature (docs/spec/policy.md#signed-reload). Every replica reads the
 * entries newer than the last it saw and installs the newest one whose version is higher than
 * its running bundle's; a reload is appended only when its version is higher than the newest
 * recorded one, checked under the gateway chain's tip lock in one fenced transaction.
 */
import { GATEWAY_CHAIN_ID } from '@cmcp/verify/formats';
import type pg from 'pg';
import type { EntryInput } from '../entries/next-entry.js';
import type { RecordedReload } from '../port.js';
import { appendEntry, lockChainTip } from './chain.js';
import type { Fence } from './leases.js';
import { fencedTransaction } from './transaction.js';

export type { RecordedReload } from '../port.js';

/** The gateway chain's `policy_reload` entries after `afterSequence` (-1: all), in order. Reads only. */
export async function reloadsSince(db: pg.Pool, afterSequence: number): Promise<RecordedReload[]> {
  const r = await db.query<{ seq: string; canonical: string }>(
    `SELECT sequence_number::text AS seq, canonical FROM audit_entries
      WHERE chain_id = $1 AND sequence_number > $2 AND entry_type = 'policy_reload' ORDER BY sequence_number`,
    [GATEWAY_CHAIN_ID, afterSequence],
  );
  return r.rows.map((x) => ({
    sequence: Number(x.seq),
    detail: (JSON.parse(x.canonical) as { detail: RecordedReload['detail'] }).detail,
  }));
}

/**
 * Appends `entry` (a `policy_reload`) unless a reload of `version` or higher is recorded
 * already, under the gateway chain's tip lock.
 * @returns (resolves) the entry's hash and sequence_number, or null (not newer).
 * @throws (rejects) LeaseLostError (nothing written); pg errors.
 */
export function recordReload(
  pool: pg.Pool,
  fence: Fence,
  entry: EntryInput,
  version: number,
): Promise<{ entry_hash: string; sequence: number } | null> {
  return fencedTransaction(pool, fence, async (client) => {
    await lockChainTip(client, GATEWAY_CHAIN_ID);
    const last = await client.query<{ canonical: string }>(
      `SELECT canonical FROM audit_entries WHERE chain_id = $1 AND entry_type = 'policy_reload'
        ORDER BY sequence_number DESC LIMIT 1`,
      [GATEWAY_CHAIN_ID],
    );
    const recorded = last.rows[0]
      ? (JSON.parse(last.rows[0].canonical) as { detail?: { version?: number } }).detail?.version
      : undefined;
    if (typeof recorded === 'number' && recorded >= version) return null;
    const e = await appendEntry(client, GATEWAY_CHAIN_ID, entry, undefined, fence.writer);
    return { entry_hash: e.entry_hash, sequence: e.sequence_number };
  });
}

/**
 * Open sessions (every replica's) whose recorded binding names another policy bundle than
 * `bundleHash`; sessions whose binding is not recorded yet are left out. Reads only.
 */
export async function sessionsBoundToOtherPolicy(
  db: pg.Pool,
  bundleHash: string,
): Promise<{ session_id: string; agent_id: string }[]> {
  const r = await db.query<{ session_id: string; agent_id: string }>(
    `SELECT session_id, agent_id FROM sessions
      WHERE status = 'open' AND binding_json <> '{}'
        AND (binding_json::jsonb -> 'preimage' ->> 'policy_bundle_hash') IS DISTINCT FROM $1
      ORDER BY created_ms`,
    [bundleHash],
  );
  return r.rows;
}
