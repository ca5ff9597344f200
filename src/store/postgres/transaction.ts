/**
 * Connections and write transactions of the PostgreSQL store (docs/replicas.md). Every write is
 * one READ COMMITTED transaction on a pooled connection whose first statement is the fence
 * check (./leases.ts); row locks (the chain tip, the session row) serialise what must be
 * serialised, so no write needs a retry loop.
 */
import pg from 'pg';
import { checkFence, defaultRenewEveryMs, type Fence } from './leases.js';

/** Options of {@link openReplicaPool}. */
export interface ReplicaPoolOptions {
  /** Connections in the pool (default 10). */
  max?: number;
  /** The replicas' lease ttl, milliseconds ({@link replicaTimeouts}). */
  leaseTtlMs: number;
  /** How often the lease is renewed, milliseconds (default: leases.ts defaultRenewEveryMs, as ReplicaLease's). */
  renewEveryMs?: number;
}

/**
 * The server-side cuts of a replica's connections, milliseconds. A replica paused right before
 * a renewal keeps its lease for `ttl - renewEvery` more; within that budget the server must
 * end its statement (one left running) and then its idle transaction, releasing its fence and
 * row locks before the lease can expire: `statementMs` 0.6 and `idleInTransactionMs` 0.3 of the
 * budget (at least 200 and 100). The statement's cut is twice the idle cut, so another
 * replica's statement waiting behind a paused replica's idle transaction is not cut (57014)
 * as that transaction is; with equal cuts they raced. (A waiter behind a paused replica's
 * long-running statement can still be cut.)
 * @param leaseTtlMs the lease ttl.
 * @param renewEveryMs its renewal period (default ttl/3).
 */
export function replicaTimeouts(
  leaseTtlMs: number,
  renewEveryMs = defaultRenewEveryMs(leaseTtlMs),
): { statementMs: number; idleInTransactionMs: number } {
  const budget = Math.max(0, leaseTtlMs - renewEveryMs);
  return {
    statementMs: Math.max(200, Math.floor(budget * 0.6)),
    idleInTransactionMs: Math.max(100, Math.floor(budget * 0.3)),
  };
}

/**
 * A pool for one replica, its statements and idle transactions cut by the server
 * ({@link replicaTimeouts}; PostgreSQL 15 docs §20.11.1 statement_timeout,
 * idle_in_transaction_session_timeout), a connection attempt cut after the statement's cut, 2 s at
 * least (a stalled server does not hold a checkout forever).
 *
 * No connection's 'error' event can end the process: node-postgres emits it on a client whose
 * connection the server ended (pg_terminate_backend, a restart, an idle transaction cut), and an
 * 'error' event nobody listens to is thrown. The pool listens while a client is idle; every
 * client also has its own listener from its first connect on, so one ended while checked out —
 * held between statements by a transaction, a migration, a lease's acquire, a COPY — is not
 * fatal either. Its holder sees the failure on its next statement (or the one in progress), and
 * the pool drops it at release (it is no longer queryable).
 * @param url a libpq URI (PostgreSQL 15 docs §34.1.1.2).
 */
export function openReplicaPool(url: string, opts: ReplicaPoolOptions): pg.Pool {
  const cuts = replicaTimeouts(opts.leaseTtlMs, opts.renewEveryMs);
  const pool = new pg.Pool({
    connectionString: url,
    max: opts.max ?? 10,
    statement_timeout: cuts.statementMs,
    idle_in_transaction_session_timeout: cuts.idleInTransactionMs,
    connectionTimeoutMillis: Math.max(2000, cuts.statementMs),
  });
  pool.on('error', () => undefined);
  pool.on('connect', (client) => client.on('error', () => undefined));
  return pool;
}

/** SQLSTATE classes and socket errors that say the connection or the server is gone, not the statement wrong. */
const CONNECTION_LOST = /^(08|57P0[1-3])/;
const SOCKET_ERRORS = new Set([
  'ECONNREFUSED',
  'ECONNRESET',
  'EPIPE',
  'ETIMEDOUT',
  'EHOSTUNREACH',
  'ENOTFOUND',
]);

/**
 * True when `e` says the database could not be reached or ended the connection (refused, reset,
 * terminated by the administrator, shut down, a connection attempt timed out), as opposed to a
 * statement's own failure.
 */
export function isConnectionLoss(e: unknown): boolean {
  const code = (e as { code?: unknown })?.code;
  if (typeof code === 'string' && (CONNECTION_LOST.test(code) || SOCKET_ERRORS.has(code))) return true;
  const message = (e as { message?: unknown })?.message;
  return (
    typeof message === 'string' &&
    /Connection terminated|timeout expired|Client has encountered a connection error/.test(message)
  );
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
