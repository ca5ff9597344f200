/**
 * One live gateway process per `instance_id` on a database. Start-up recovery (sealing
 * in-flight executions, closing stale sessions) and the measurement extend are destructive
 * for a process that is still running, so a second start of the same instance must stop
 * before any of them — not only when it later fails to bind its port.
 *
 * The lock is a row with the holder's pid, host and a heartbeat. A row is stale (and taken
 * over) when its process is gone on this host, or its heartbeat is older than
 * {@link STALE_AFTER_MS} (another host, or a hung process).
 */
import { hostname } from 'node:os';
import { InstanceBusyError } from '../port.js';
import { type Db, immediate } from './db.js';

/** A heartbeat older than this frees the lock, milliseconds. */
export const STALE_AFTER_MS = 30_000;
const HEARTBEAT_MS = 5_000;

interface Row {
  pid: number;
  hostname: string;
  started_at: string;
  heartbeat_ms: number;
}

function alive(pid: number): boolean {
  try {
    process.kill(pid, 0);
    return true;
  } catch (e) {
    return (e as NodeJS.ErrnoException).code === 'EPERM';
  }
}

/** True when `row` is held by a live process other than this one (the module doc's rule). */
function heldElsewhere(row: Row, host: string): boolean {
  const fresh = Date.now() - row.heartbeat_ms < STALE_AFTER_MS;
  const sameHost = row.hostname === host;
  return row.pid !== process.pid && (sameHost ? alive(row.pid) && fresh : fresh);
}

/**
 * The live process holding `instanceId` on `db`, or null; reads only (`cmcp start --check`).
 * A database made before the instances table has no holder.
 */
export function liveHolder(db: Db, instanceId: string): { pid: number; hostname: string } | null {
  const has = db.prepare("SELECT 1 FROM sqlite_schema WHERE type = 'table' AND name = 'instances'").get();
  if (!has) return null;
  const row = db.prepare<[string], Row>('SELECT * FROM instances WHERE instance_id = ?').get(instanceId);
  return row && heldElsewhere(row, hostname()) ? { pid: row.pid, hostname: row.hostname } : null;
}

/** A held instance lock; `release()` is idempotent. */
export interface InstanceLock {
  /** The previous holder when the lock was taken over from a stopped process, else null. */
  tookOverFrom: { pid: number; hostname: string; started_at: string } | null;
  release(): void;
}

/**
 * Takes the lock for `instanceId`.
 * @throws InstanceBusyError when a live process holds it.
 */
export function acquireInstance(db: Db, instanceId: string): InstanceLock {
  const host = hostname();
  const prev = immediate(db, () => {
    const row = db.prepare<[string], Row>('SELECT * FROM instances WHERE instance_id = ?').get(instanceId);
    if (row && heldElsewhere(row, host)) {
      throw new InstanceBusyError(
        `instance "${instanceId}" is already running (pid ${row.pid} on ${row.hostname}); use another instance_id to share this database`,
      );
    }
    db.prepare(
      `INSERT INTO instances (instance_id, pid, hostname, started_at, heartbeat_ms) VALUES (?,?,?,?,?)
       ON CONFLICT(instance_id) DO UPDATE SET pid = excluded.pid, hostname = excluded.hostname,
         started_at = excluded.started_at, heartbeat_ms = excluded.heartbeat_ms`,
    ).run(instanceId, process.pid, host, new Date().toISOString(), Date.now());
    return row ?? null;
  });
  const beat = setInterval(() => {
    try {
      db.prepare('UPDATE instances SET heartbeat_ms = ? WHERE instance_id = ? AND pid = ?').run(
        Date.now(),
        instanceId,
        process.pid,
      );
    } catch {
      // a busy or closed database: the next beat tries again
    }
  }, HEARTBEAT_MS);
  beat.unref();
  let released = false;
  return {
    tookOverFrom: prev ? { pid: prev.pid, hostname: prev.hostname, started_at: prev.started_at } : null,
    release() {
      if (released) return;
      released = true;
      clearInterval(beat);
      try {
        db.prepare('DELETE FROM instances WHERE instance_id = ? AND pid = ?').run(instanceId, process.pid);
      } catch {
        // closing anyway; a stale row is taken over by the next start
      }
    },
  };
}
