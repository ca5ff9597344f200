/**
 * The `replicas` section of the gateway configuration: the lease settings of a replica serving
 * on a shared PostgreSQL (docs/replicas.md#leases-and-fencing-tokens; src/store/postgres/
 * replica-lease.ts reads them). Ignored with a SQLite database, whose instance lock is the lease.
 */
import { z } from 'zod';

/**
 * Defaults: a lease lives 15 s from its last renewal, renewed every 5 s; a failed renewal is
 * tried again within 250 ms, so a database outage of up to ttl - renewal - 0.25 s (9.75 s) keeps
 * the lease (docs/replicas.md#the-database-going-away).
 */
export const REPLICA_DEFAULTS = { lease_ttl_ms: 15_000, renew_every_ms: 5_000 } as const;

export const replicasSchema = z
  .strictObject({
    /**
     * How long a replica's lease lives after its last renewal, milliseconds (the database's clock
     * decides). Another replica seals its open calls as outcome_unknown only after this; its
     * connections' statements and idle transactions are cut by the server well within the
     * ttl minus the renewal period (store/postgres/transaction.ts replicaTimeouts).
     */
    lease_ttl_ms: z.number().int().min(1000).max(600_000).default(REPLICA_DEFAULTS.lease_ttl_ms),
    /** How often the lease is renewed, milliseconds; at most half the ttl (a missed renewal is survived). */
    renew_every_ms: z.number().int().min(100).max(300_000).default(REPLICA_DEFAULTS.renew_every_ms),
  })
  .refine((r) => r.renew_every_ms * 2 <= r.lease_ttl_ms, {
    path: ['renew_every_ms'],
    message: 'must be at most half of lease_ttl_ms (a lease must survive one missed renewal)',
  })
  .default(REPLICA_DEFAULTS);

export type ReplicasConfig = z.infer<typeof replicasSchema>;
