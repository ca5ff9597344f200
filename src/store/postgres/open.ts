/**
 * A replica's PostgreSQL storage: the pool on the shared database (./transaction.ts, its
 * server-side cuts derived from the lease's timing) and the schema at the latest version. The
 * lease itself is taken by the runtime, which signs its evidence with the replica's key; every
 * write of the call path is fenced by it ({@link PostgresStorage.callStore}).
 */
import type pg from 'pg';
import type { ReplicasConfig } from '../../config/replicas.js';
import { DatabaseUnavailableError, redactPostgresUrl } from '../migrations/index.js';
import { migratePostgres } from '../migrations/postgres.js';
import type { OperatorRecords, SessionStore, StorageCapabilities } from '../port.js';
import type { Fence } from './leases.js';
import { postgresOperatorRecords } from './operator-records.js';
import { PostgresSessionStore } from './session-store.js';
import { openReplicaPool } from './transaction.js';
import { PostgresTreeStore } from './tree.js';
import { postgresWriteProbe } from './write-probe.js';
import { PostgresWriteStore } from './write-store.js';

/** The settings PostgreSQL storage reads from the gateway config. */
export interface PostgresSettings {
  /** The database URL. */
  database: string;
  replicas: Pick<ReplicasConfig, 'lease_ttl_ms' | 'renew_every_ms'>;
}

/** An open PostgreSQL store and what only this engine has. */
export interface PostgresStorage extends StorageCapabilities {
  readonly engine: 'postgres';
  readonly pool: pg.Pool;
  /**
   * Brings the schema to the latest version (every replica runs the same migrations under one lock).
   * @throws (rejects) DatabaseUnavailableError when the server cannot be reached; SchemaTooNewError.
   */
  migrate(): Promise<void>;
  /** The call path's port, every write fenced by the replica's lease. */
  callStore(fence: Fence): PostgresWriteStore;
  /** Sessions, their bindings and claims, written under the lease. */
  sessionStore(fence: Fence): SessionStore;
  /** Agent blocks and policy reloads in the gateway chain, written under the lease. */
  operatorRecords(fence: Fence): OperatorRecords;
}

/** Opens the pool (no connection is made until the first query). */
export function openPostgresStorage(cfg: PostgresSettings): PostgresStorage {
  const pool = openReplicaPool(cfg.database, {
    leaseTtlMs: cfg.replicas.lease_ttl_ms,
    renewEveryMs: cfg.replicas.renew_every_ms,
  });
  const shown = redactPostgresUrl(cfg.database);
  let closed: Promise<void> | null = null;
  return {
    engine: 'postgres',
    pool,
    trees: new PostgresTreeStore(pool),
    async migrate() {
      let client: pg.PoolClient;
      try {
        client = await pool.connect();
      } catch (e) {
        throw new DatabaseUnavailableError(`cannot reach ${shown}: ${(e as Error).message}`);
      }
      try {
        await migratePostgres(client, shown);
      } finally {
        client.release();
      }
    },
    callStore: (fence) => new PostgresWriteStore(pool, fence),
    sessionStore: (fence) => new PostgresSessionStore(pool, fence),
    operatorRecords: (fence) => postgresOperatorRecords(pool, fence),
    writeProbe: (writer) => postgresWriteProbe(pool, writer),
    close() {
      closed ??= pool.end();
      return closed;
    },
  };
}
