/**
 * The SQLite storage of one gateway, opened in its start-up order: the database (migrated), the
 * WAL's checkpoints (store/sqlite/wal.ts), the instance lock (store/sqlite/instance-lock.ts) before anything
 * destructive, and the store worker when the config asks for it (store/sqlite/write-client.ts).
 */
import type { Logger } from 'pino';
import type { StoreConfig } from '../../config/store.js';
import type { OperatorRecords, StorageCapabilities } from '../port.js';
import { type SqliteCallStore, sqliteCallStore } from './call-store.js';
import type { AuditChain } from './chain.js';
import { type Db, openGatewayDatabase, setGroupCommit, writesSettled } from './db.js';
import { acquireInstance, type InstanceLock } from './instance-lock.js';
import { sqliteOperatorRecords } from './operator-records.js';
import { SqliteSessionStore } from './session-store.js';
import { startCheckpoints } from './wal.js';
import { type StoreWorker, startStoreWorker } from './write-client.js';
import { sqliteWriteProbe } from './write-probe.js';

/** The settings SQLite storage reads from the gateway config. */
export interface SqliteSettings {
  /** The database file. */
  database: string;
  instance_id: string;
  store: StoreConfig;
}

/**
 * Mechanisms code may turn off to measure without them (tests that count WAL commits, benches);
 * the gateway always runs both, and no config key or environment variable reaches them.
 */
export interface SqliteStorageOptions {
  /** False: every write its own transaction, on the loop and in the store worker (default true). */
  groupCommit?: boolean;
  /** Milliseconds between the WAL checkpoint thread's checkpoints; 0: no thread (store/sqlite/wal.ts). */
  checkpointIntervalMs?: number;
}

/** An open SQLite store and what only this engine has. */
export interface SqliteStorage extends StorageCapabilities {
  readonly engine: 'sqlite';
  readonly db: Db;
  /** The instance lock this process holds (who it took over from, if anyone). */
  readonly instance: InstanceLock;
  /** The store worker, or null: the call path writes on the event loop. */
  readonly worker: StoreWorker | null;
  /** The call path's port over this database (`chain`: the runtime's own chain object). */
  callStore(chain: AuditChain): SqliteCallStore;
  /** Agent blocks and policy reloads in the gateway chain, through the same chain object. */
  operatorRecords(chain: AuditChain): OperatorRecords;
  /** This instance's sessions (the sessions' side of the port), through the same chain object. */
  sessionStore(chain: AuditChain): SqliteSessionStore;
}

/**
 * Opens the gateway's SQLite storage; on a failure what was opened is closed again.
 * @param options mechanisms turned off for a measurement ({@link SqliteStorageOptions}); none by default.
 * @throws InstanceBusyError when the instance runs elsewhere; DatabaseUnavailableError or
 *   SchemaTooNewError from the database's opening (store/sqlite/db.ts).
 */
export function openSqliteStorage(
  cfg: SqliteSettings,
  log: Logger,
  options: SqliteStorageOptions = {},
): SqliteStorage {
  const db = openGatewayDatabase(cfg.database);
  const groupCommit = options.groupCommit ?? true;
  if (!groupCommit) setGroupCommit(db, false);
  // The WAL stays bounded: journal_size_limit and a PASSIVE checkpoint on a schedule.
  const checkpoints = startCheckpoints(db, options.checkpointIntervalMs);
  let instance: InstanceLock;
  try {
    // Before anything destructive (recovery, stale-session close, measurement extend): a second
    // start of a running instance stops here.
    instance = acquireInstance(db, cfg.instance_id);
  } catch (e) {
    void checkpoints.stop().finally(() => db.close());
    throw e;
  }
  if (instance.tookOverFrom)
    log.warn(
      { previous: instance.tookOverFrom },
      'taking over the instance from a process that stopped without closing',
    );
  const worker = startStoreWorker(cfg.store, cfg.database, cfg.instance_id, groupCommit);
  if (worker)
    log.info(
      { max_queued_writes: cfg.store.max_queued_writes },
      'store worker: the call path writes in a worker thread',
    );
  let closed: Promise<void> | null = null;
  return {
    engine: 'sqlite',
    db,
    instance,
    worker,
    callStore: (chain) => sqliteCallStore(db, cfg.instance_id, chain, worker),
    operatorRecords: (chain) => sqliteOperatorRecords(db, chain),
    sessionStore: (chain) => new SqliteSessionStore(db, chain, cfg.instance_id),
    writeProbe: (writer) => sqliteWriteProbe(db, writer),
    close() {
      closed ??= (async () => {
        instance.release();
        await checkpoints.stop(); // its connection closed first: the WAL is gone when close resolves
        await worker?.close();
        await writesSettled(db); // the group commit's last writes (store/sqlite/group-commit.ts)
        db.close();
      })();
      return closed;
    },
  };
}
