/**
 * The gateway's single SQLite database (docs/spec/audit-entries.md): audit entries, sessions, claims and
 * executions live together so that one transaction can cover an audit entry and the
 * registry/session change it records.
 */
import { setTimeout } from 'node:timers/promises';
import Database from 'better-sqlite3';
import { CmcpError } from '../../errors/index.js';
import {
  DatabaseUnavailableError,
  isPostgresUrl,
  PostgresFeatureUnavailableError,
} from '../migrations/index.js';
import { migrateSqlite } from '../migrations/sqlite.js';
import { type Attempt, type CommitPrimitives, CommitQueue, MAX_PAUSE_MS } from './group-commit.js';

export type Db = Database.Database;

/**
 * Opens (creating if needed) the database. `busy_timeout` is set before switching to WAL
 * (docs/spec/audit-entries.md) so a second process waiting on the lock does not fail at once;
 * `synchronous=FULL` makes every commit durable. Once the schema is made the connection's own
 * `busy_timeout` drops to {@link BUSY_STEP_MS}: a writer waiting for a lock held by another
 * process waits in {@link immediateAsync} (awaited backoff) or {@link immediate} (blocking),
 * both until `busyTimeoutMs` has passed.
 * The schema is brought to the latest version first (store/migrations/sqlite.ts).
 * @param busyTimeoutMs how long a writer waits for the lock before failing, milliseconds.
 * @throws SchemaTooNewError (DATABASE_SCHEMA_TOO_NEW) for a database newer than this code;
 *   PostgresFeatureUnavailableError for a postgres:// URL; SQLite errors.
 */
export function openDatabase(path: string, busyTimeoutMs = 5000): Db {
  if (isPostgresUrl(path))
    throw new PostgresFeatureUnavailableError('a SQLite connection to a postgres:// URL');
  const db = new Database(path);
  db.pragma(`busy_timeout = ${Math.trunc(busyTimeoutMs)}`);
  // A new file only (SQLite ignores it once the database has pages): 16 KiB pages hold ~11
  // entries each instead of 2, so less of each page is left over.
  db.pragma(`page_size = ${PAGE_SIZE}`);
  switchToWal(db, busyTimeoutMs);
  db.pragma('synchronous = FULL');
  db.pragma('foreign_keys = ON');
  // Savepoint (statement) journals in memory: the group commit runs each write in its own
  // SAVEPOINT, and SQLite copies every page a savepoint first touches into that journal, which
  // by default spills to a temporary file after 64 KiB (four 16 KiB pages) — two pwrite64 per
  // page and a temp file opened and removed per transaction. Only rollback within the open
  // transaction reads it; durability is the WAL's.
  db.pragma('temp_store = MEMORY');
  try {
    migrateSqlite(db, path); // the versioned schema (store/migrations/)
  } catch (e) {
    db.close();
    throw e;
  }
  busyBudgets.set(db, Math.trunc(busyTimeoutMs));
  db.pragma(`busy_timeout = ${BUSY_STEP_MS}`);
  return db;
}

/**
 * The connection's SQLite `busy_timeout` once open, milliseconds: the longest one attempt to
 * take the write lock keeps the event loop (SQLite's busy handler sleeps in the thread).
 */
export const BUSY_STEP_MS = 4;

/**
 * `PRAGMA journal_mode = WAL`, tried again while it fails with SQLITE_BUSY, until `budgetMs` has
 * passed. The switch of a new file reads it under a shared lock and then needs an exclusive one;
 * when another process opening the same new file holds a lock at that moment, SQLite answers
 * SQLITE_BUSY at once rather than wait in its busy handler, which could deadlock the two
 * (sqlite.org/c3ref/busy_handler.html: the handler is not called when waiting could deadlock),
 * so `busy_timeout` alone does not cover it: three processes opening one new file together
 * failed this way. Opening only (start-up, the CLI, the write worker's own connection): the
 * waits between tries (2, 4 … 50 ms) block this thread.
 * @throws the last SqliteError once the budget has passed; any other error at once.
 */
function switchToWal(db: Db, budgetMs: number): void {
  const until = performance.now() + budgetMs;
  for (let wait = 2; ; wait = Math.min(wait * 2, 50)) {
    try {
      db.pragma('journal_mode = WAL');
      return;
    } catch (e) {
      if ((e as { code?: string }).code !== 'SQLITE_BUSY' || performance.now() + wait > until) throw e;
      Atomics.wait(new Int32Array(new SharedArrayBuffer(4)), 0, 0, wait);
    }
  }
}

/** Each connection's overall wait for the write lock (openDatabase's busyTimeoutMs). */
const busyBudgets = new WeakMap<Db, number>();

/** Page size of a new database file, bytes. */
const PAGE_SIZE = 16384;

/**
 * Opens an existing database read-only (operators' inspection commands): no schema is made,
 * nothing can be written.
 * @throws SQLite errors (e.g. SQLITE_CANTOPEN, SQLITE_NOTADB).
 */
export function openReadOnlyDatabase(path: string, busyTimeoutMs = 5000): Db {
  const db = new Database(path, { readonly: true, fileMustExist: true });
  db.pragma(`busy_timeout = ${Math.trunc(busyTimeoutMs)}`);
  return db;
}

/**
 * Runs `fn` in a `BEGIN IMMEDIATE` transaction (C-SQL-1: never a deferred read that is
 * later upgraded to a write). Rolls back and rethrows on any error. When another connection
 * holds the write lock this waits up to the connection's busy timeout *blocking the event
 * loop*: it is for callers that cannot await (start-up, recovery, the instance lock, reloads);
 * the request paths use {@link immediateAsync}.
 * @throws SqliteError SQLITE_BUSY once the busy timeout has passed; what `fn` throws.
 */
export function immediate<T>(db: Db, fn: () => T): T {
  const attempt = attemptImmediate(db, fn);
  if (attempt.ran) return attempt.value;
  const budget = busyBudgets.get(db) ?? 0;
  if (budget <= BUSY_STEP_MS) throw attempt.busy;
  // The lock is held elsewhere: wait for it in SQLite's busy handler for the rest of the budget.
  db.pragma(`busy_timeout = ${budget - BUSY_STEP_MS}`);
  try {
    return runImmediate(db, fn);
  } finally {
    db.pragma(`busy_timeout = ${BUSY_STEP_MS}`);
  }
}

/**
 * {@link immediate} for the request paths, through the connection's group commit
 * (store/sqlite/group-commit.ts): `fn` runs in a SAVEPOINT of a `BEGIN IMMEDIATE` transaction shared
 * with the other writes queued in the same event-loop turn, and the promise settles once that
 * transaction committed (one fsync for all of them). While another connection holds the write
 * lock, each try keeps the event loop at most {@link BUSY_STEP_MS} and the wait between tries is
 * an awaited timer (1, 2, 4 … 25 ms), until the connection's busy timeout (openDatabase's
 * `busyTimeoutMs`) has passed since `fn` was queued — then it fails exactly as {@link immediate}
 * does. Inside an open transaction it joins it at once (no lock to wait for). `fn` runs only
 * once the lock is held, once.
 * @throws (rejects) SqliteError SQLITE_BUSY once the busy timeout has passed; what `fn` throws
 *   (its savepoint alone rolled back); the COMMIT's error (none of the group committed).
 * @param waitMs how long to wait for the lock, milliseconds; default the connection's busy timeout.
 */
export function immediateAsync<T>(db: Db, fn: () => T, waitMs?: number): Promise<T> {
  if (db.inTransaction) return immediateAlone(db, fn, waitMs);
  let queue = queues.get(db);
  if (queue === undefined) {
    queue = (groupCommitOn.get(db) ?? true) ? new CommitQueue(primitives(db)) : null;
    queues.set(db, queue);
  }
  return queue ? queue.enqueue(fn, waitMs) : immediateAlone(db, fn, waitMs);
}

/** Each connection's commit queue; null when group commit is off for it. */
const queues = new WeakMap<Db, CommitQueue | null>();
const groupCommitOn = new WeakMap<Db, boolean>();

/**
 * Turns group commit on or off for one connection, before its first {@link immediateAsync}
 * (the default is on). For comparisons of the two: tests and benches that count commits.
 * @throws when the connection already has its queue.
 */
export function setGroupCommit(db: Db, on: boolean): void {
  if (queues.has(db)) throw new Error('group commit is set before the first awaited write');
  groupCommitOn.set(db, on);
}

/**
 * Resolves once every write queued on the connection's group commit has settled: await it
 * before `db.close()`, so that a write nobody awaits (a refusal record, a shutdown's flush) is
 * not lost with the connection.
 */
export function writesSettled(db: Db): Promise<void> {
  return queues.get(db)?.settled() ?? Promise.resolve();
}

/** Transactions committed by the connection's group commit and the writes they carried. */
export function groupCommitStats(db: Db): { transactions: number; writes: number } | null {
  return queues.get(db)?.stats ?? null;
}

function primitives(db: Db): CommitPrimitives {
  return {
    attempt: (fn) => attemptImmediate(db, fn),
    nested: (fn) => runImmediate(db, fn),
    inTransaction: () => db.inTransaction,
    busyBudgetMs: busyBudgets.get(db) ?? 0,
  };
}

/** One write in its own transaction (group commit off, or joining an open transaction). */
async function immediateAlone<T>(db: Db, fn: () => T, waitMs?: number): Promise<T> {
  const deadline = performance.now() + (waitMs ?? busyBudgets.get(db) ?? 0);
  for (let pause = 1; ; pause = Math.min(pause * 2, MAX_PAUSE_MS)) {
    const attempt = attemptImmediate(db, fn);
    if (attempt.ran) return attempt.value;
    const left = deadline - performance.now();
    if (left <= 0) throw attempt.busy;
    await setTimeout(Math.min(pause, left));
  }
}

/** One try: `fn`'s result, or the SQLITE_BUSY of a BEGIN IMMEDIATE that got no lock (fn not run). */
function attemptImmediate<T>(db: Db, fn: () => T): Attempt<T> {
  let began = false;
  try {
    const value = runImmediate(db, () => {
      began = true;
      return fn();
    });
    return { ran: true, value };
  } catch (e) {
    if (began || (e as { code?: string }).code !== 'SQLITE_BUSY') throw e;
    return { ran: false, busy: e as Error };
  }
}

function runImmediate<T>(db: Db, fn: () => T): T {
  let tx = runners.get(db);
  if (!tx) {
    // One transaction function per connection (better-sqlite3 builds its wrappers on each
    // `db.transaction` call); the work to run is its argument.
    tx = db.transaction((work: () => unknown) => {
      immediateDepth.set(db, (immediateDepth.get(db) ?? 0) + 1);
      try {
        return work();
      } finally {
        immediateDepth.set(db, (immediateDepth.get(db) ?? 1) - 1);
      }
    });
    runners.set(db, tx);
  }
  return tx.immediate(fn) as T;
}

const runners = new WeakMap<Db, Database.Transaction<(work: () => unknown) => unknown>>();

/** How deep this connection is inside {@link immediate} transactions. */
const immediateDepth = new WeakMap<Db, number>();

/**
 * True when the connection is inside a transaction opened by {@link immediate}. Writers check
 * it so that a write can never join a deferred transaction that began with a read (C-SQL-1).
 */
export function inImmediate(db: Db): boolean {
  return db.inTransaction && (immediateDepth.get(db) ?? 0) > 0;
}

/**
 * The gateway's database ({@link openDatabase}); a file SQLite cannot open or that is not
 * a database fails with the stable DATABASE_UNAVAILABLE instead of the driver's own error.
 * @throws SchemaTooNewError, PostgresFeatureUnavailableError as openDatabase;
 *   DatabaseUnavailableError for anything else that stops the file opening.
 */
export function openGatewayDatabase(path: string): Db {
  try {
    return openDatabase(path);
  } catch (e) {
    if (e instanceof CmcpError) throw e;
    throw new DatabaseUnavailableError(`cannot open the database ${path}: ${(e as Error).message}`);
  }
}

/**
 * True for an error of the store failing to write rather than of the request: SQLite's full
 * disk, I/O errors, a read-only or unopenable file, a lock held past the busy timeout;
 * PostgreSQL's insufficient resources (SQLSTATE class 53, e.g. 53100 disk full), connection
 * exceptions (class 08) and operator intervention (57P0x: shutting down). Such a failure is
 * answered STORE_WRITE_FAILED (503), not INTERNAL_ERROR.
 */
export function isStoreWriteFailure(e: unknown): boolean {
  const code = (e as { code?: unknown } | null)?.code;
  if (typeof code !== 'string') return false;
  if (/^SQLITE_(FULL|IOERR|BUSY|READONLY|CANTOPEN|LOCKED|PROTOCOL)/.test(code)) return true;
  return /^(53|08)[0-9A-Z]{3}$/.test(code) || /^57P0[0-9]$/.test(code);
}
