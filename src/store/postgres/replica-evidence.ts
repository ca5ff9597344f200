/**
 * Each replica's start-up evidence on PostgreSQL (docs/replicas.md#replica-identity-in-entries):
 * the `replica_start` entry in the gateway chain and the `replica_evidence` row — the member a
 * `/2` claim lists for this replica (docs/spec/claims.md#replicas) — written together in one
 * fenced transaction, and read back by key thumbprint when a close lists its chain's writers.
 */
import type { AuditEntry, ReplicaMember } from '@cmcp/verify/formats';
import { GATEWAY_CHAIN_ID } from '@cmcp/verify/formats';
import type pg from 'pg';
import type { MicroClock } from '../entries/clock.js';
import { appendEntry } from './chain.js';
import type { Fence } from './leases.js';
import { fencedTransaction } from './transaction.js';

/**
 * Records `member` (this replica's binding of its key at start) under `fence`, whose writer
 * must be the member's key: the `replica_start` entry (signed by that key like every entry)
 * and the row.
 * @returns (resolves) the `replica_start` entry.
 * @throws (rejects) Error when the fence has no writer or another key; LeaseLostError; pg errors
 *   (the key already recorded: 23505) — nothing written.
 */
export function recordReplicaStart(
  pool: pg.Pool,
  fence: Fence,
  member: ReplicaMember,
  clock?: MicroClock,
): Promise<AuditEntry> {
  const writer = fence.writer;
  const thumb = member.binding.preimage.key_thumbprint;
  if (!writer || writer.keyThumbprint !== thumb)
    throw new Error(`replica ${fence.replicaId}: its fence's writer is not the key ${thumb} it attests`);
  return fencedTransaction(pool, fence, async (client) => {
    const ev = member.evidence;
    const e = await appendEntry(
      client,
      GATEWAY_CHAIN_ID,
      {
        entry_type: 'replica_start',
        detail: {
          replica_id: member.replica_id,
          lease_token: member.lease_token,
          key_thumbprint: thumb,
          provider: ev.provider,
          status: ev.status,
          reason: ev.reason,
          report_data: ev.report_data,
        },
      },
      clock,
      writer,
    );
    await client.query(
      `INSERT INTO replica_evidence (key_thumbprint, replica_id, lease_token, entry_hash, member)
       VALUES ($1,$2,$3,$4,$5)`,
      [thumb, member.replica_id, member.lease_token, e.entry_hash, JSON.stringify(member)],
    );
    return e;
  });
}

/**
 * The recorded members of the replicas with these key thumbprints, in the order given; a key
 * with no row is left out (a claim then does not list it, and its entries fail the verifier's
 * `audit.writers`). Reads only (inside the caller's transaction when given a client).
 */
export async function replicaMembers(
  db: pg.Pool | pg.ClientBase,
  thumbprints: readonly string[],
): Promise<ReplicaMember[]> {
  if (!thumbprints.length) return [];
  const r = await db.query<{ key_thumbprint: string; member: string }>(
    'SELECT key_thumbprint, member FROM replica_evidence WHERE key_thumbprint = ANY($1::text[])',
    [thumbprints],
  );
  const byKey = new Map(r.rows.map((row) => [row.key_thumbprint, JSON.parse(row.member) as ReplicaMember]));
  return thumbprints.flatMap((t) => {
    const m = byKey.get(t);
    return m ? [m] : [];
  });
}
