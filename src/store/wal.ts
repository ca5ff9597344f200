/**
 * Keeping the write-ahead log bounded (issue 11 item 7; docs/operations.md#the-wal-and-the-disk): SQLite
 * checkpoints on its own once the WAL passes `wal_autocheckpoint` pages at a commit, but a
 * checkpoint cannot pass a reader's snapshot, and with no further writes nothing resets the
 * file. So: readers hold short transactions (paged export, audit/chain.ts), a PASSIVE
 * checkpoint runs on a schedule (it never waits for a reader or a writer, so it never blocks
 * the event loop on a lock), and `journal_size_limit` truncates the file each time the log
 * restarts after a complete checkpoint.
 */
import type { Db } from './db.js';

/** The WAL file is truncated to at most this many bytes whenever it restarts. */
export const JOURNAL_SIZE_LIMIT_BYTES = 16 * 1024 * 1024;

export interface Checkpoints {
  /** One PASSIVE checkpoint now. @returns frames in the WAL and frames checkpointed. */
  tick(): { log: number; checkpointed: number };
  stop(): void;
}

/**
 * Sets `journal_size_limit` and starts a PASSIVE checkpoint every `intervalMs` (unref'd).
 * @param intervalMs milliseconds between checkpoints (0: none, `tick` only).
 */
export function startCheckpoints(db: Db, intervalMs = 10_000): Checkpoints {
  db.pragma(`journal_size_limit = ${JOURNAL_SIZE_LIMIT_BYTES}`);
  const tick = () => {
    const r = db.pragma('wal_checkpoint(PASSIVE)') as { busy: number; log: number; checkpointed: number }[];
    return { log: r[0]?.log ?? 0, checkpointed: r[0]?.checkpointed ?? 0 };
  };
  const timer =
    intervalMs > 0
      ? setInterval(() => {
          try {
            if (db.open) tick();
          } catch {
            // a busy or closing database: the next tick tries again
          }
        }, intervalMs)
      : null;
  timer?.unref();
  return {
    tick,
    stop() {
      if (timer) clearInterval(timer);
    },
  };
}
