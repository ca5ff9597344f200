/**
 * Keeping the write-ahead log bounded (docs/operations.md#the-wal-and-the-disk): a
 * checkpoint cannot pass a reader's snapshot, and with no further writes nothing resets the
 * file. So: readers hold short transactions (paged export, store/sqlite/chain.ts), PASSIVE checkpoints
 * run on a schedule (they never wait for a reader or a writer), and `journal_size_limit`
 * truncates the file each time the log restarts after a complete checkpoint.
 *
 * The scheduled checkpoints run in a worker thread on a connection of their own: a checkpoint
 * copies the WAL's pages into the database file, ~15 ms of CPU for the 1,000 pages (16 MB) at
 * which SQLite checkpoints on its own, inside whichever commit passes them — on the event loop,
 * in a request's commit (a long session's close among them). SQLite's own checkpoint stays (it
 * runs while no other write can, so it is the one that always completes and lets the log
 * restart), but it then finds the pages the worker copied already in place and copies only
 * those written since the worker's last checkpoint.
 *
 * `startCheckpoints(db, 0)` starts no thread and leaves the checkpoints to SQLite alone: for
 * tests that count the WAL's frames (a restarted log has lost them).
 */
import { createRequire } from 'node:module';
import { OffloadThread } from '../../offload/thread.js';
import type { Db } from './db.js';

/** The WAL file is truncated to at most this many bytes whenever it restarts. */
export const JOURNAL_SIZE_LIMIT_BYTES = 16 * 1024 * 1024;

/** Milliseconds between the worker's checkpoints (each copies only the pages written since). */
export const CHECKPOINT_INTERVAL_MS = 250;

export interface Checkpoints {
  /** One PASSIVE checkpoint now. @returns frames in the WAL and frames checkpointed. */
  tick(): { log: number; checkpointed: number };
  /**
   * Stops the checkpoint thread and resolves once it has exited, its connection closed (so the
   * caller's own close is the file's last: SQLite's final checkpoint and the WAL's removal happen
   * there, before the gateway's close resolves); after offload/thread.ts STOP_GRACE_MS the
   * thread is terminated instead.
   */
  stop(): Promise<void>;
}

/**
 * Sets `journal_size_limit` and starts a PASSIVE checkpoint every `intervalMs` in a worker
 * thread on its own connection to the same file (it keeps no process alive; a `:memory:`
 * database has none).
 * @param intervalMs milliseconds between checkpoints (0: none, `tick` only).
 */
export function startCheckpoints(db: Db, intervalMs = CHECKPOINT_INTERVAL_MS): Checkpoints {
  db.pragma(`journal_size_limit = ${JOURNAL_SIZE_LIMIT_BYTES}`);
  const tick = () => {
    const r = db.pragma('wal_checkpoint(PASSIVE)') as { busy: number; log: number; checkpointed: number }[];
    return { log: r[0]?.log ?? 0, checkpointed: r[0]?.checkpointed ?? 0 };
  };
  const on = intervalMs > 0 && !db.memory;
  // A thread that fails is left so: SQLite's own checkpoint still bounds the WAL.
  const thread = on
    ? new OffloadThread(
        { fn: checkpointLoop },
        {
          name: 'the WAL checkpoint thread',
          workerData: {
            path: db.name,
            intervalMs,
            driver: createRequire(import.meta.url).resolve('better-sqlite3'),
          },
        },
      )
    : null;
  return { tick, stop: async () => thread?.close() };
}

/* c8 ignore start — runs on the checkpoint thread as CommonJS source (OffloadThread `{ fn }`),
   so the tests' TypeScript sources need no build. */
/**
 * A PASSIVE checkpoint of `path` every `intervalMs` (a busy database is tried again at the
 * next); on `{ stop: true }` the connection is closed and the thread exits.
 */
function checkpointLoop(): void {
  const { workerData, parentPort } = require('node:worker_threads');
  const Sqlite = require(workerData.driver);
  const db = new Sqlite(workerData.path, { fileMustExist: true });
  db.pragma('busy_timeout = 0');
  const timer = setInterval(() => {
    try {
      db.pragma('wal_checkpoint(PASSIVE)');
    } catch {
      // busy, or the file is going away: the next tick tries again
    }
  }, workerData.intervalMs);
  parentPort.once('message', () => {
    clearInterval(timer);
    db.close();
    parentPort.close();
  });
}
/* c8 ignore stop */
