/**
 * A replica's lease at the HTTP edge (docs/replicas.md#leases-and-fencing-tokens): while the
 * lease is live the replica serves; once a renewal finds it lost (expired, or taken over by
 * another holder of the same `instance_id`) every write of the replica already fails its fence
 * (LEASE_LOST), and from then on the gate refuses every new request but the health probes with
 * LEASE_LOST (503; a JSON-RPC error on /mcp) and readiness reports it (health/readiness.ts), so
 * a load balancer moves the traffic to the other replicas. The replica never serves a request it
 * cannot record. A `cmcp start` replica then acquires a lease again by itself (a new token, its
 * own open work sealed first: store/postgres/replica-lease.ts `regain`) and reopens the gate.
 */
import type { KeyObject } from 'node:crypto';
import { hostname } from 'node:os';
import type { FastifyInstance, FastifyReply, FastifyRequest } from 'fastify';
import type pg from 'pg';
import type { Logger } from 'pino';
import type { ReplicasConfig } from '../../config/replicas.js';
import { ReplicaLease } from '../../store/postgres/replica-lease.js';
import { isJsonRpc, sendError, sendRpcError } from '../edge/replies.js';

/** Routes still answered once the lease is lost: a load balancer must see the replica go unready. */
const PROBES = new Set(['/healthz', '/readyz']);

/** The admission gate of a replica's lease. */
export class LeaseGate {
  private lostBecause: string | null = null;

  /** True until the lease is found lost. */
  get live(): boolean {
    return this.lostBecause === null;
  }

  /** Why the lease is lost (the error's message), or null while live. */
  get reason(): string | null {
    return this.lostBecause;
  }

  /** Closes the gate (until {@link regain}). */
  lose(e: Error): void {
    this.lostBecause ??= e.message;
  }

  /** Opens the gate again: the replica holds a lease again, its previous work sealed. */
  regain(): void {
    this.lostBecause = null;
  }

  /** Adds the gate to `app` (before its routes are registered). */
  attach(app: FastifyInstance): void {
    app.addHook('onRequest', async (req: FastifyRequest, reply: FastifyReply) => {
      if (this.live || PROBES.has(req.url.split('?')[0] ?? '')) return;
      const message = "this replica's lease is lost: it admits no request (another replica serves)";
      reply.header('connection', 'close');
      return isJsonRpc(req)
        ? sendRpcError(reply, 'LEASE_LOST', message)
        : sendError(reply, 'LEASE_LOST', message);
    });
  }
}

/**
 * Acquires the replica's lease for `instanceId` with the configured ttl and renewal, starts its
 * heartbeat, and closes `gate` when the lease is found lost. Nothing is sealed yet: the replica
 * records its key's evidence, then calls the lease's `begin()` (its own previous work recovered,
 * then the sweep), so every entry its key signs has evidence (docs/replicas.md#start-up-order).
 * @param keyThumbprint base64url RFC 7638 thumbprint of the replica's gateway key.
 * @param key that key's Ed25519 private key: the writer of every entry the lease's fence writes
 *   (docs/spec/audit-entries.md#writers); left out, entries name no writer (store-level tests).
 * @throws InstanceBusyError (INSTANCE_RUNNING) while another holder's lease of `instanceId` is
 *   live; pg errors (the database unreachable).
 */
export function startReplicaLease(
  pool: pg.Pool,
  o: {
    instanceId: string;
    replicas: ReplicasConfig;
    keyThumbprint: string;
    key?: KeyObject;
    gate: LeaseGate;
    log: Logger;
    /** Acquire the lease again by itself once lost, and reopen the gate (ReplicaLeaseOptions.regain). */
    regain?: boolean;
  },
): Promise<ReplicaLease> {
  return ReplicaLease.acquire(pool, {
    replicaId: o.instanceId,
    holder: `${hostname()} pid ${process.pid} started ${new Date().toISOString()}`,
    keyThumbprint: o.keyThumbprint,
    ...(o.key ? { key: o.key } : {}),
    ttlMs: o.replicas.lease_ttl_ms,
    renewEveryMs: o.replicas.renew_every_ms,
    onLost: (e) => {
      o.gate.lose(e);
      o.log.error({ err: e.message, code: 'LEASE_LOST' }, 'replica lease lost: admitting no request');
    },
    onSealed: (s) => o.log.warn({ ...s }, "sealed an expired replica's open calls as outcome_unknown"),
    onError: (e) => o.log.warn({ err: e.message }, 'replica lease renewal or sweep failed'),
    regain: o.regain ?? false,
    onRegained: (fence, sealed) => {
      o.gate.regain();
      o.log.warn(
        { lease_token: fence.leaseToken, ...(sealed ?? {}) },
        'replica lease acquired again: admitting requests',
      );
    },
  });
}
