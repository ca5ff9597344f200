/**
 * The store worker: a thread (offload/thread.ts) that owns a write connection to the gateway's
 * database and runs the call path's write commands (store/writes.ts) there, through the same
 * group commit (store/sqlite/group-commit.ts), so that the COMMIT, its fsync and the entries' JCS
 * hashing do not stop the event loop. A request is `{ cmd }`, or `{ close: true }` (no new
 * attempt after it).
 */
import { workerData } from 'node:worker_threads';
import { serveRequests } from '../../offload/serve.js';
import { executeWrite, type WriteCommand } from '../writes.js';
import { immediateAsync, openDatabase, setGroupCommit } from './db.js';
import { sqliteWriteContext } from './writes.js';

/** What the gateway hands the worker at start. */
export interface WriteWorkerData {
  path: string;
  busyTimeoutMs: number;
  owner: string;
  /** False: each write its own transaction (store/sqlite/open.ts `SqliteStorageOptions`). */
  groupCommit: boolean;
}

/** One request to the store worker. */
export type WriteRequest = { cmd: WriteCommand } | { close: true };

const data = workerData as WriteWorkerData;
const db = openDatabase(data.path, data.busyTimeoutMs);
if (!data.groupCommit) setGroupCommit(db, false);
const ctx = sqliteWriteContext(db, data.owner);
const { attempts } = ctx;

serveRequests(
  (body) => {
    const r = body as WriteRequest;
    // The close runs in the write queue, after every command sent before it (write-client.ts).
    return immediateAsync(db, 'close' in r ? () => attempts.close() : () => executeWrite(ctx, r.cmd));
  },
  () => db.close(),
);
