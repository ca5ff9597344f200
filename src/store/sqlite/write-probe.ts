/**
 * SQLite's readiness write probe (`GET /readyz` database check): the database open and
 * writable, enough free space on its filesystem, and the writer's row of `readiness_probe`
 * committed through the group commit (so it reaches the disk: a full disk fails its WAL append).
 */
import { statfs } from 'node:fs/promises';
import { dirname } from 'node:path';
import { type Db, immediateAsync } from './db.js';

/**
 * Free space below which the SQLite database counts as full, bytes. The write probe alone can
 * pass on a full disk: once the WAL restarted after a checkpoint its small commit overwrites
 * frames the file already has, while a write that must grow the WAL or the database fails.
 */
export const MIN_FREE_BYTES = 1024 * 1024;

/**
 * How long the probe waits for the write lock, ms: awaited (store/sqlite/db.ts immediateAsync, each
 * try at most BUSY_STEP_MS of the event loop), so a probe never stalls the gateway.
 */
const PROBE_WAIT_MS = 250;

/** The probe: its writer's row, written and committed (store/migrations, version 6). */
const PROBE_UPSERT =
  'INSERT INTO readiness_probe (writer, probed_at) VALUES (?, ?) ' +
  'ON CONFLICT (writer) DO UPDATE SET probed_at = excluded.probed_at';

/**
 * The write probe over `db`: null once the write committed, else `closed`, `read-only`,
 * `ENOSPC` (less than {@link MIN_FREE_BYTES} free) or the SQLite code (SQLITE_BUSY: another
 * connection held the write lock for the whole wait; SQLITE_FULL / SQLITE_IOERR_*: the disk
 * refused the write).
 * @param writer the probe row's writer (the gateway's instance_id).
 */
export function sqliteWriteProbe(db: Db, writer: string): () => Promise<string | null> {
  return async () => {
    if (!db.open) return 'closed';
    if (db.readonly) return 'read-only';
    if (!db.memory) {
      const fs = await statfs(dirname(db.name));
      // root may write into the blocks reserved for it (ext4), others only into the available.
      const free = (process.getuid?.() === 0 ? fs.bfree : fs.bavail) * fs.bsize;
      if (free < MIN_FREE_BYTES) return 'ENOSPC';
    }
    try {
      await immediateAsync(
        db,
        () => db.prepare(PROBE_UPSERT).run(writer, new Date().toISOString()),
        PROBE_WAIT_MS,
      );
      return null;
    } catch (e) {
      return (e as { code?: string }).code ?? 'not writable';
    }
  };
}
