/**
 * What the crash test's checks (./check.ts) read of a gateway's database, taken once after the
 * last gateway stopped: every audit entry in chain order, every stored claim's text, the session
 * ids, what is left in flight, the execution rows and (PostgreSQL only) the replicas' leases.
 * This file reads a SQLite file (read-only); ./postgres-snapshot.ts reads a PostgreSQL database.
 */
import Database from 'better-sqlite3';
import { storedClaimText } from '../../src/store/sqlite/claims.js';

/** One `audit_entries` row as the checks need it. */
export interface SnapshotEntry {
  chain_id: string;
  sequence_number: number;
  entry_hash: string;
  canonical: string;
  /** A PostgreSQL replica's writer signature (`entry_writers`), exported in bundles; absent on SQLite. */
  writer_signature?: string | null;
}

/** One `executions` row as the checks need it. */
export interface SnapshotExecution {
  agent_id: string;
  execution_id: string;
  state: string;
  terminal_entry_hash: string | null;
}

export interface CrashSnapshot {
  /** Ordered by chain_id (bytewise), then sequence_number. */
  entries: SnapshotEntry[];
  /** Each stored claim's canonical text (UTF-8). */
  claims: { session_id: string; text: string }[];
  /** Every session's id (a chain whose id is not one is a gateway chain). */
  sessionIds: string[];
  /** Call attempts left, executions in flight, sessions open. */
  left: { attempts: number; inFlight: number; openSessions: number };
  executions: SnapshotExecution[];
  /** The replicas' lease rows (PostgreSQL); absent for a SQLite gateway (its instance lock). */
  leases?: { replica_id: string; state: string }[];
  /**
   * SQLite only: the rows of `PRAGMA integrity_check` (`['ok']` when the file is sound). Absent
   * on PostgreSQL, whose pages are the server's own (WAL replay after a crash); the record-level
   * checks (chains, claim chain, registry joins) stand for it there.
   */
  integrity?: string[];
  /**
   * Sessions may be open at the end: a replica that stops leaves its sessions open for the other
   * replicas to serve (gateway/lifecycle/replica-engine.ts), where a SQLite gateway closes them.
   */
  openSessionsStay?: boolean;
}

/** Reads the snapshot of the SQLite database at `dbPath` (read-only). @throws SQLite errors. */
export function readSqliteSnapshot(dbPath: string): CrashSnapshot {
  const db = new Database(dbPath, { readonly: true, fileMustExist: true });
  try {
    const sessionIds = db
      .prepare<[], { session_id: string }>('SELECT session_id FROM sessions')
      .all()
      .map((r) => r.session_id);
    const claims = db
      .prepare<[], { session_id: string }>('SELECT session_id FROM claims')
      .all()
      .map((c) => ({
        session_id: c.session_id,
        text: storedClaimText(db, c.session_id)?.toString('utf8') ?? 'null',
      }));
    const left = db
      .prepare<[], { a: number; x: number; s: number }>(
        `SELECT (SELECT COUNT(*) FROM call_attempts) AS a,
                (SELECT COUNT(*) FROM executions WHERE state = 'in_flight') AS x,
                (SELECT COUNT(*) FROM sessions WHERE status = 'open') AS s`,
      )
      .get() as { a: number; x: number; s: number };
    const integrity = db
      .prepare<[], { integrity_check: string }>('PRAGMA integrity_check')
      .all()
      .map((r) => r.integrity_check);
    return {
      integrity,
      entries: db
        .prepare<[], SnapshotEntry>(
          'SELECT chain_id, sequence_number, entry_hash, canonical FROM audit_entries ORDER BY chain_id, sequence_number',
        )
        .all(),
      claims,
      sessionIds,
      left: { attempts: left.a, inFlight: left.x, openSessions: left.s },
      executions: db
        .prepare<[], SnapshotExecution>(
          'SELECT agent_id, execution_id, state, terminal_entry_hash FROM executions',
        )
        .all(),
    };
  } finally {
    db.close();
  }
}
