/**
 * Replica leases with fencing tokens (docs/replicas.md#leases-and-fencing-tokens): one
 * `replica_leases` row per replica, renewed by heartbeat; its `lease_token` grows at every
 * acquire and takeover, and every write transaction of the replica begins with
 * {@link checkFence}, so a replica whose lease expired or was taken over cannot commit
 * afterwards. Time is the database's (`clock_timestamp()`, PostgreSQL 15 docs §9.9.5): replica
 * clocks never decide who is alive.
 *
 * Lock modes (PostgreSQL 15 docs §13.3.2): the fence check takes FOR KEY SHARE on the row; a
 * renewal is a plain UPDATE of a non-key column (FOR NO KEY UPDATE), which does not wait for
 * writes; a takeover locks the row FOR UPDATE first, which waits for every write transaction
 * that already passed the check, and every later check sees the new token.
 */
import type { KeyObject } from 'node:crypto';
import { ed25519PublicJwk, jwkThumbprint } from '@cmcp/verify/formats';
import type pg from 'pg';
import { CmcpError } from '../../errors/index.js';
import type { EntryWriter } from '../entries/next-entry.js';
import { InstanceBusyError } from '../port.js';

/** The database's clock as epoch milliseconds (BIGINT). */
export const DB_NOW_MS = '(extract(epoch from clock_timestamp()) * 1000)::bigint';

/** Who writes: a replica and the fencing token of its lease. Carried by every write. */
export interface Fence {
  replicaId: string;
  leaseToken: number;
  /**
   * The replica's gateway key as the writer of its entries (docs/spec/audit-entries.md#writers):
   * every entry appended under this fence names the replica and is signed by it. Absent: the
   * entries name no writer (the store-level tests that predate writers).
   */
  writer?: EntryWriter;
}

/** Thrown when a replica's lease is no longer live under its token. `code` is stable. */
export class LeaseLostError extends CmcpError {
  declare readonly code: 'LEASE_LOST';
  constructor(readonly fence: Fence) {
    super(
      'LEASE_LOST',
      `replica ${fence.replicaId}: lease token ${fence.leaseToken} is no longer live (expired or taken over); nothing was written`,
    );
    this.name = 'LeaseLostError';
  }
}

/** What a replica states about itself when it acquires its lease. */
export interface LeaseRequest {
  replicaId: string;
  /** Host, pid, start time: for operators. */
  holder: string;
  /** base64url RFC 7638 thumbprint of the replica's gateway key (binding.md). */
  keyThumbprint: string;
  /** How long the lease lives without renewal, milliseconds. */
  ttlMs: number;
  /**
   * The gateway key itself (Ed25519 private key whose thumbprint is `keyThumbprint`): given, the
   * fence carries it as the writer of every entry (Fence.writer).
   */
  key?: KeyObject;
}

/** The fence of `replicaId` under `leaseToken`, with its writer when the request has the key. */
function fenceOf(req: LeaseRequest, leaseToken: number): Fence {
  if (!req.key) return { replicaId: req.replicaId, leaseToken };
  const thumb = jwkThumbprint(ed25519PublicJwk(req.key)).toString('base64url');
  if (thumb !== req.keyThumbprint)
    throw new Error(
      `replica ${req.replicaId}: key_thumbprint ${req.keyThumbprint} is not the key's (${thumb})`,
    );
  return {
    replicaId: req.replicaId,
    leaseToken,
    writer: { replicaId: req.replicaId, keyThumbprint: thumb, key: req.key },
  };
}

/** An acquired lease, and what the row said before. */
export interface AcquiredLease {
  fence: Fence;
  /**
   * `new`: no row before; `expired`: this replica's previous lease expired without being
   * sealed (its unfinished work is this replica's to recover, as at a SQLite start-up);
   * `sealed`: another replica (or a release) sealed the previous lease.
   */
  previous: 'new' | 'expired' | 'sealed';
}

interface LeaseRow {
  lease_token: string;
  state: 'live' | 'sealing' | 'sealed';
  live: boolean;
  /** Milliseconds until `expires_ms` on the database clock (0 once past), as text (bigint). */
  expires_in_ms: string;
}

/** A lease's renewal period when none is configured, milliseconds: ttl/3 (at least 50), so two renewals may be lost before expiry. */
export function defaultRenewEveryMs(ttlMs: number): number {
  return Math.max(50, Math.floor(ttlMs / 3));
}

/**
 * Acquires `replicaId`'s lease: inserts its row, or takes over its expired row, with a token
 * one above the row's last. A live lease (state `live` or `sealing`, not expired) refuses; a
 * `sealed` row is taken at once.
 * @throws InstanceBusyError (INSTANCE_RUNNING) while another holder's lease is live or the
 *   row is being sealed; pg errors.
 */
export async function acquireLease(pool: pg.Pool, req: LeaseRequest): Promise<AcquiredLease> {
  const client = await pool.connect();
  try {
    await client.query('BEGIN');
    try {
      const inserted = await client.query<{ lease_token: string }>(
        `INSERT INTO replica_leases (replica_id, lease_token, holder, key_thumbprint, expires_ms, state)
         VALUES ($1, 1, $2, $3, ${DB_NOW_MS} + $4, 'live') ON CONFLICT (replica_id) DO NOTHING
         RETURNING lease_token::text`,
        [req.replicaId, req.holder, req.keyThumbprint, req.ttlMs],
      );
      let acquired: AcquiredLease;
      if (inserted.rows[0]) {
        acquired = { fence: fenceOf(req, 1), previous: 'new' };
      } else {
        const row = await lockLease(client, req.replicaId);
        if (row.live)
          throw new InstanceBusyError(
            row.state === 'live'
              ? `replica ${req.replicaId} holds a live lease in the shared database (another process of this instance_id is running, or one that stopped without releasing it: its lease expires in ${row.expires_in_ms} ms, then this start succeeds)`
              : `replica ${req.replicaId}'s lease is being sealed by another replica; start again in a moment`,
          );
        const token = await newToken(client, req.replicaId, 'live', req.ttlMs, req);
        acquired = {
          fence: fenceOf(req, token),
          previous: row.state === 'sealed' ? 'sealed' : 'expired',
        };
      }
      await client.query('COMMIT');
      return acquired;
    } catch (e) {
      await client.query('ROLLBACK').catch(() => undefined);
      throw e;
    }
  } finally {
    client.release();
  }
}

/** The lease row FOR UPDATE (waits for every write transaction that passed the fence check). */
async function lockLease(client: pg.ClientBase, replicaId: string): Promise<LeaseRow> {
  const r = await client.query<LeaseRow>(
    `SELECT lease_token::text, state, (state <> 'sealed' AND expires_ms > ${DB_NOW_MS}) AS live,
            GREATEST(expires_ms - ${DB_NOW_MS}, 0)::text AS expires_in_ms FROM replica_leases
     WHERE replica_id = $1 FOR UPDATE`,
    [replicaId],
  );
  const row = r.rows[0];
  if (!row) throw new Error(`replica ${replicaId} has no lease row`);
  return row;
}

/** Sets the row's next token and state, inside the caller's transaction holding the row lock. */
async function newToken(
  client: pg.ClientBase,
  replicaId: string,
  state: 'live' | 'sealing',
  ttlMs: number,
  who?: { holder: string; keyThumbprint: string },
): Promise<number> {
  const r = await client.query<{ lease_token: string }>(
    `UPDATE replica_leases SET lease_token = lease_token + 1, state = $2, expires_ms = ${DB_NOW_MS} + $3,
       holder = COALESCE($4, holder), key_thumbprint = COALESCE($5, key_thumbprint)
     WHERE replica_id = $1 RETURNING lease_token::text`,
    [replicaId, state, ttlMs, who?.holder ?? null, who?.keyThumbprint ?? null],
  );
  return Number(r.rows[0]?.lease_token);
}

/**
 * Renews a live lease for `ttlMs` more (a heartbeat). Never waits for writes.
 * @throws LeaseLostError when the lease expired or was taken over (the replica must stop
 *   writing); pg errors.
 */
export async function renewLease(pool: pg.Pool | pg.ClientBase, fence: Fence, ttlMs: number): Promise<void> {
  const r = await pool.query(
    `UPDATE replica_leases SET expires_ms = ${DB_NOW_MS} + $3
     WHERE replica_id = $1 AND lease_token = $2 AND state = 'live' AND expires_ms > ${DB_NOW_MS}`,
    [fence.replicaId, fence.leaseToken, ttlMs],
  );
  if (r.rowCount !== 1) throw new LeaseLostError(fence);
}

/**
 * Ends a live lease at a graceful stop, once the replica recorded what it had open: the row is
 * `sealed` and expired, so the next acquire needs no recovery. Waits for the replica's own
 * write transactions still open (FOR UPDATE).
 * @throws LeaseLostError when the lease was no longer this replica's.
 */
export async function releaseLease(pool: pg.Pool, fence: Fence): Promise<void> {
  const r = await pool.query(
    `UPDATE replica_leases SET state = 'sealed', expires_ms = ${DB_NOW_MS}
     WHERE replica_id = $1 AND lease_token = $2 AND state = 'live'`,
    [fence.replicaId, fence.leaseToken],
  );
  if (r.rowCount !== 1) throw new LeaseLostError(fence);
}

/**
 * The fence: the first statement of every write transaction. Holds FOR KEY SHARE on the
 * replica's lease row until the transaction ends, so a takeover waits for this transaction.
 * @throws LeaseLostError when the lease is not live under this token (the caller rolls back).
 */
export async function checkFence(client: pg.ClientBase, fence: Fence): Promise<void> {
  const r = await client.query(
    `SELECT 1 FROM replica_leases WHERE replica_id = $1 AND lease_token = $2 AND state = 'live'
       AND expires_ms > ${DB_NOW_MS} FOR KEY SHARE`,
    [fence.replicaId, fence.leaseToken],
  );
  if (r.rowCount !== 1) throw new LeaseLostError(fence);
}

/**
 * Takes over one expired lease of another replica for sealing (module doc): the row moves to
 * `sealing` under a new token (which fences its old holder from this commit on) and a fresh
 * expiry, so a sealer that dies leaves it to the next sweep. Rows locked by another sweeper
 * are skipped (FOR UPDATE SKIP LOCKED).
 * @param sealer the sweeping replica's live fence (checked in the same transaction).
 * @returns the expired replica's id and the sealing token, or null when none is expired.
 * @throws LeaseLostError when the sealer's own lease is not live; pg errors.
 */
export async function takeExpiredLease(
  pool: pg.Pool,
  sealer: Fence,
  ttlMs: number,
): Promise<{ replicaId: string; sealingToken: number } | null> {
  const client = await pool.connect();
  try {
    await client.query('BEGIN');
    try {
      await checkFence(client, sealer);
      const r = await client.query<{ replica_id: string }>(
        `SELECT replica_id FROM replica_leases WHERE replica_id <> $1 AND state IN ('live','sealing')
           AND expires_ms <= ${DB_NOW_MS} ORDER BY expires_ms LIMIT 1 FOR UPDATE SKIP LOCKED`,
        [sealer.replicaId],
      );
      const replicaId = r.rows[0]?.replica_id;
      const taken = replicaId
        ? { replicaId, sealingToken: await newToken(client, replicaId, 'sealing', ttlMs) }
        : null;
      await client.query('COMMIT');
      return taken;
    } catch (e) {
      await client.query('ROLLBACK').catch(() => undefined);
      throw e;
    }
  } finally {
    client.release();
  }
}

/**
 * Marks a lease sealed once its work was sealed, if it still carries the sealing token.
 * @returns false when another sweeper or the replica itself took the row meanwhile.
 */
export async function markSealed(pool: pg.Pool, replicaId: string, sealingToken: number): Promise<boolean> {
  const r = await pool.query(
    `UPDATE replica_leases SET state = 'sealed' WHERE replica_id = $1 AND lease_token = $2 AND state = 'sealing'`,
    [replicaId, sealingToken],
  );
  return r.rowCount === 1;
}
