/**
 * Connections and write transactions of the PostgreSQL store (docs/replicas.md). Every write is
 * one READ COMMITTED transaction on a pooled connection whose first statement is the fence
 * check (./leases.ts); row locks (the chain tip, the session row) serialise what must be
 * serialised, so no write needs a retry loop.
 */
import pg from 'pg';
import { checkFence, type Fence } from './leases.js';

/** Options of {@link openReplicaPool}. */
export interface ReplicaPoolOptions {
  /** Connections in the pool (default 10). */
  max?: number;
  /**
   * The replicas' lease ttl, milliseconds: idle transactions are cut by the server after a
   * quarter of it and statements after half of it, so a paused replica's open transaction
   * releases its fence and row locks before its lease can expire (a statement it left running
   * and then its idle transaction: three quarters at most), and another replica's statement
   * waiting on those locks outlasts the idle cut (by a quarter) instead of racing it.
   */
  leaseTtlMs: number;
}

/**
 * The server-side cuts of a replica's connections for a lease ttl, milliseconds
 * ({@link ReplicaPoolOptions.leaseTtlMs}): `idleInTransactionMs` ttl/4, `statementMs` ttl/2
 * (at least 100 and 200). Equal cuts would race: a statement waiting behind a paused
 * replica's idle transaction would time out (57014) as that transaction is cut.
 */
export function replicaTimeouts(leaseTtlMs: number): { statementMs: number; idleInTransactionMs: number } {
  return {
    statementMs: Math.max(200, Math.floor(leaseTtlMs / 2)),
    idleInTransactionMs: Math.max(100, Math.floor(leaseTtlMs / 4)),
  };
}

/**
 * A pool for one replica. The server aborts a statement running longer than ttl/2 and a
 * transaction left idle longer than ttl/4 ({@link replicaTimeouts}; PostgreSQL 15 docs
 * §20.11.1 statement_timeout, idle_in_transaction_session_timeout).
 * @param url a libpq URI (PostgreSQL 15 docs §34.1.1.2).
 */
export function openReplicaPool(url: string, opts: ReplicaPoolOptions): pg.Pool {
  const cuts = replicaTimeouts(opts.leaseTtlMs);
  const pool = new pg.Pool({
    connectionString: url,
    max: opts.max ?? 10,
    statement_timeout: cuts.statementMs,
    idle_in_transaction_session_timeout: cuts.idleInTransactionMs,
  });
  // An idle connection the server ended (restart, failover) is dropped by the pool and the next
  // checkout connects anew; without a listener node-postgres' 'error' event would end the process.
  pool.on('error', () => undefined);
  return pool;
}

/**
 * Runs `fn` in one transaction fenced by `fence`: BEGIN, the fence check, `fn`, COMMIT; any
 * throw rolls the whole transaction back and is rethrown.
 * @throws LeaseLostError when the fence fails (nothing written); what `fn` throws; pg errors
 *   (the server's own, e.g. 25P03, when it ended the connection mid-transaction).
 */
export async function fencedTransaction<T>(
  pool: pg.Pool,
  fence: Fence,
  fn: (client: pg.PoolClient) => Promise<T>,
): Promise<T> {
  const client = await pool.connect();
  let broken = false;
  // The server may end the connection between statements (idle_in_transaction_session_timeout
  // after a pause, SQLSTATE 25P03): the 'error' event carries the server's reason, which is
  // what the transaction then fails with (the next statement's own error only says the client
  // is not queryable); unheard, the event would end the process.
  let connectionError: Error | null = null;
  const onError = (e: Error) => {
    broken = true;
    connectionError ??= e;
  };
  client.on('error', onError);
  try {
    await client.query('BEGIN');
    try {
      await checkFence(client, fence);
      const value = await fn(client);
      await client.query('COMMIT');
      return value;
    } catch (e) {
      await client.query('ROLLBACK').catch(() => {
        broken = true; // the connection is gone (terminated, timed out): do not reuse it
      });
      throw connectionError ?? e;
    }
  } finally {
    client.off('error', onError);
    client.release(broken);
  }
}

/**
 * Runs `fn` inside a SAVEPOINT of the caller's transaction: a throw rolls back `fn`'s writes
 * only, and is rethrown.
 */
export async function savepoint<T>(client: pg.ClientBase, fn: () => Promise<T>): Promise<T> {
  await client.query('SAVEPOINT cmcp_step');
  try {
    const value = await fn();
    await client.query('RELEASE SAVEPOINT cmcp_step');
    return value;
  } catch (e) {
    await client.query('ROLLBACK TO SAVEPOINT cmcp_step');
    throw e;
  }
}
