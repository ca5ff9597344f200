/**
 * Prepared statements kept per connection: `prepared(db, sql)` compiles `sql` once per database
 * connection and hands back the same better-sqlite3 `Statement` afterwards, so code on the call
 * path does not pay SQLite's parse and plan (`sqlite3_prepare_v3`) on every call. Keyed by the
 * exact SQL text; the cache lives as long as the connection (a WeakMap), and holds only the
 * fixed statements written in the source, so it stays small.
 */
import type { Statement } from 'better-sqlite3';
import type { Db } from './db.js';

const byConnection = new WeakMap<Db, Map<string, Statement<unknown[], unknown>>>();

/**
 * The connection's prepared statement for `sql`, compiled on first use.
 * @throws SqliteError when `sql` does not compile (as `db.prepare`).
 */
export function prepared<P extends unknown[] | object = unknown[], R = unknown>(
  db: Db,
  sql: string,
): Statement<P, R> {
  let cache = byConnection.get(db);
  if (!cache) {
    cache = new Map();
    byConnection.set(db, cache);
  }
  let stmt = cache.get(sql);
  if (!stmt) {
    stmt = db.prepare(sql) as Statement<unknown[], unknown>;
    cache.set(sql, stmt);
  }
  return stmt as unknown as Statement<P, R>;
}
