/**
 * The SQLite side of the call path's write commands (store/port.ts, store/writes.ts): the domain objects of
 * one connection that {@link executeWrite} runs a command over — the store worker's
 * (store/sqlite/write-worker.ts) own connection, or any other that owns its writes the same way.
 */

import type { WriteContext } from '../writes.js';
import { AttemptLog } from './attempts.js';
import { AuditChain } from './chain.js';
import { type Db, immediate } from './db.js';
import { ExecutionRegistry } from './executions.js';
import { prepared } from './statements.js';

/** A SQLite connection's write context, with its concrete log and registry. */
export interface SqliteWriteContext extends WriteContext {
  chain: AuditChain;
  executions: ExecutionRegistry;
  attempts: AttemptLog;
}

/**
 * The write context of one SQLite connection.
 * @param owner this gateway's instance_id (the attempts' and executions' owner).
 * @param chain the connection's audit chain, when the caller already holds one.
 */
export function sqliteWriteContext(db: Db, owner: string, chain = new AuditChain(db)): SqliteWriteContext {
  return {
    chain,
    executions: new ExecutionRegistry(db, owner),
    attempts: new AttemptLog(db, owner),
    sessionIsOpen: (id) =>
      prepared<[string], { status: string }>(db, 'SELECT status FROM sessions WHERE session_id = ?').get(id)
        ?.status === 'open',
    countCall: (id) =>
      void prepared(db, 'UPDATE sessions SET call_count = call_count + 1 WHERE session_id = ?').run(id),
    raiseSensitivity: (id, level) => storeSensitivity(db, id, level),
    atomic: (fn) => immediate(db, fn),
  };
}

/**
 * Raises a session's durable sensitivity to at least `level` (never lowers it): the one writer
 * of `session_sensitivity`, on the event loop's connection or the store worker's.
 */
export function storeSensitivity(db: Db, sessionId: string, level: number): void {
  prepared(
    db,
    'INSERT INTO session_sensitivity (session_id, level) VALUES (?, ?) ' +
      'ON CONFLICT (session_id) DO UPDATE SET level = max(level, excluded.level)',
  ).run(sessionId, level);
}
