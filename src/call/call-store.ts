/**
 * Where the call path keeps its records: on SQLite, the event loop's own
 * connection with its attempt log and terminal recorder (each write a synchronous statement in
 * `BEGIN IMMEDIATE`, or the store worker's commands); on a shared PostgreSQL, the replica's write
 * commands alone (store/postgres/write-store.ts), every one an awaited round trip. The
 * orchestrator takes either; the SQLite pieces exist only where there is a SQLite connection.
 */
import type { AuditChain } from '../audit/chain.js';
import type { CallSessions } from '../session/ports.js';
import type { SessionService } from '../session/service.js';
import type { Db } from '../store/db.js';
import { AttemptLog } from '../store/sqlite/attempts.js';
import type { ExecutionRegistry } from '../store/sqlite/executions.js';
import type { WriteStore } from '../store/writes.js';
import { TerminalRecorder } from './record.js';

/** The SQLite gateway's connection and what writes through it on the event loop. */
export interface LocalCallStore {
  db: Db;
  executions: ExecutionRegistry;
  attempts: AttemptLog;
  recorder: TerminalRecorder;
}

type LocalSessions = CallSessions & Pick<SessionService, 'countCall' | 'isOpen'>;

function isLocal(s: CallSessions): s is LocalSessions {
  return 'countCall' in s && 'isOpen' in s;
}

/**
 * The SQLite pieces when a connection is given, else null — then every write goes through
 * `writes`.
 * @throws Error when there is neither a SQLite connection (with its chain, registry and
 *   SessionService) nor a write store: the call path would have nowhere to record.
 */
export function localCallStore(
  db: Db | null,
  chain: AuditChain | null,
  sessions: CallSessions,
  executions: ExecutionRegistry | null,
  writes: WriteStore | null,
): LocalCallStore | null {
  if (db && chain && executions && isLocal(sessions)) {
    const attempts = new AttemptLog(db, executions.owner);
    return {
      db,
      executions,
      attempts,
      recorder: new TerminalRecorder(db, chain, sessions, executions, attempts),
    };
  }
  if (!writes) throw new Error('a call path without a SQLite connection needs a write store');
  return null;
}

/**
 * The SQLite pieces, on a path only a SQLite gateway takes (no write store given).
 * @throws Error on a shared PostgreSQL store (a bug: its writes are commands).
 */
export function sqlite(local: LocalCallStore | null): LocalCallStore {
  if (!local) throw new Error('the call path on PostgreSQL writes through its write store only');
  return local;
}
