/**
 * The call path's side of the storage port on SQLite (store/port.ts CallStore): each write runs
 * on the event loop's connection through its group commit, or in the store worker when one is
 * running (store/sqlite/write-client.ts) — the adapter's choice, the same commands either way.
 */

import type { CallStore, WriteCommand, WriteResults, WriteStore } from '../port.js';
import type { AuditChain } from './chain.js';
import type { Db } from './db.js';
import { inProcessWrites } from './write-client.js';
import { type SqliteWriteContext, sqliteWriteContext } from './writes.js';

/** What the store worker adds to a write store: closing its own attempt log in its queue. */
export interface WorkerWrites extends WriteStore {
  closeAttempts(): Promise<void>;
}

/** The SQLite call store and the loop connection's context it reads attempts through. */
export interface SqliteCallStore extends CallStore {
  /** The loop connection's chain, registry and attempt log (recovery and reads use them too). */
  readonly local: SqliteWriteContext;
}

/**
 * The call store of one SQLite gateway.
 * @param owner this gateway's instance_id (its attempts' and executions' owner).
 * @param chain the loop connection's audit chain (the runtime's own), shared so one object appends.
 * @param worker the store worker, or null: writes on the event loop.
 */
export function sqliteCallStore(
  db: Db,
  owner: string,
  chain: AuditChain,
  worker: WorkerWrites | null,
): SqliteCallStore {
  const local = sqliteWriteContext(db, owner, chain);
  const writes = worker ?? inProcessWrites(db, local);
  return {
    local,
    write: <C extends WriteCommand>(cmd: C): Promise<WriteResults[C['kind']]> => writes.write(cmd),
    async closeAttempts() {
      local.attempts.close();
      await worker?.closeAttempts();
    },
    // Read on the loop's connection: the store worker may have ended it meanwhile.
    attemptOpen: (callId) => local.attempts.isOpen(callId),
  };
}
