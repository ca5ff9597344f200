/**
 * The SQLite side of the call path's write commands (store/writes.ts): the domain objects of
 * one connection that {@link executeWrite} runs a command over — the store worker's
 * (store/write-worker.ts) own connection, or any other that owns its writes the same way.
 */
import { AuditChain } from '../audit/chain.js';
import { AttemptLog } from '../call/attempts.js';
import { storeSensitivity } from '../call/sensitivity.js';
import { ExecutionRegistry } from '../execution/registry.js';
import { type Db, immediate } from './db.js';
import { prepared } from './statements.js';
import type { WriteContext } from './writes.js';

/**
 * The write context of one SQLite connection.
 * @param owner this gateway's instance_id (the attempts' and executions' owner).
 */
export function sqliteWriteContext(db: Db, owner: string): WriteContext {
  return {
    chain: new AuditChain(db),
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
