/**
 * Group commit (docs/spec/audit-entries.md#durability): the request paths'
 * writes (attempt records, admissions, terminal entries with their registry transitions and
 * attempt deletes, refusals, session opens and closes) that are queued in the same event-loop
 * turn commit in ONE `BEGIN IMMEDIATE` transaction, so with `synchronous=FULL` one fsync of the
 * WAL covers all of them instead of one each.
 *
 * - A write that finds the store idle (no write in this event-loop turn nor in the previous one,
 *   nothing queued) commits at once, as a transaction of its own: one caller at a time pays
 *   nothing for grouping. Any other write is queued, and the first one queued schedules a flush
 *   with `setImmediate`: everything queued before the loop reaches its check phase joins it.
 * - The flush runs the work functions in the order they were queued, each in a SAVEPOINT of its
 *   own: a work function that throws is rolled back alone and rejects alone; the others commit.
 * - Promises settle only after COMMIT returned: no answer leaves before its entry is durable. A
 *   COMMIT that fails (or a transaction SQLite aborted) rejects every write of the batch.
 * - At most {@link MAX_BATCH} writes per transaction; the rest go to the next one.
 * - While another process holds the write lock the flush waits as `immediateAsync` always did:
 *   each try holds the loop at most the connection's busy step, the pauses between tries are
 *   awaited (1, 2, 4 … 25 ms), and a write still waiting when its own busy timeout (counted from
 *   when it was queued) has passed rejects with that SQLITE_BUSY.
 *
 * Grouping is always on in the gateway; code can turn it off for one connection
 * (store/sqlite/db.ts `setGroupCommit`, the SQLite storage's `groupCommit` option) to compare the two.
 */
import { setTimeout } from 'node:timers/promises';

/** Most work functions one transaction carries. */
export const MAX_BATCH = 64;

/** Most extra event-loop turns a flush waits for a queue that is still growing. */
export const GATHER_TURNS = 3;

/** Longest awaited pause between two tries for the write lock, milliseconds. */
export const MAX_PAUSE_MS = 25;

/** One try at the lock: the transaction's result, or the SQLITE_BUSY of a BEGIN that got none. */
export type Attempt<T> = { ran: true; value: T } | { ran: false; busy: Error };

/** What a queue needs from its connection (store/sqlite/db.ts supplies them). */
export interface CommitPrimitives {
  /** Runs `fn` in one BEGIN IMMEDIATE … COMMIT, or reports SQLITE_BUSY without running it. */
  attempt<T>(fn: () => T): Attempt<T>;
  /** Runs `fn` in a SAVEPOINT of the open transaction (rolled back alone when it throws). */
  nested<T>(fn: () => T): T;
  /** True while the connection has an open transaction. */
  inTransaction(): boolean;
  /** How long a write may wait for the lock, milliseconds. */
  busyBudgetMs: number;
}

interface Queued {
  fn: () => unknown;
  resolve(v: unknown): void;
  reject(e: unknown): void;
  /** performance.now() past which the write stops waiting for the lock. */
  deadline: number;
}

type Outcome = { ok: true; value: unknown } | { ok: false; error: unknown };

/** A transaction SQLite rolled back on its own (e.g. SQLITE_FULL) while a batch was running. */
function abortedError(): Error {
  return Object.assign(new Error('the group transaction was rolled back by SQLite'), {
    code: 'SQLITE_ABORT',
  });
}

/** The write queue of one connection (module doc). */
export class CommitQueue {
  private queue: Queued[] = [];
  private flushing = false;
  /** Writes in this event-loop turn, and whether the previous turn had any (see {@link tick}). */
  private turnWrites = 0;
  private previousTurnWrote = false;
  private ticking = false;
  /** Callers of {@link settled} waiting for the queue to empty. */
  private waiters: (() => void)[] = [];
  /** Transactions committed and writes they carried, since the queue was made. */
  readonly stats = { transactions: 0, writes: 0 };

  constructor(private readonly p: CommitPrimitives) {}

  /**
   * Queues `fn` for the next group transaction.
   * @returns (resolves) what `fn` returned, once its transaction committed.
   * @throws (rejects) what `fn` threw (its savepoint rolled back); the COMMIT's error; the
   *   SQLITE_BUSY of the last try once the busy budget (or `waitMs`) has passed.
   * @param waitMs how long this write may wait for the lock, milliseconds; default the
   *   connection's busy budget (a readiness probe waits less).
   */
  enqueue<T>(fn: () => T, waitMs?: number): Promise<T> {
    const idle = !this.flushing && this.turnWrites === 0 && !this.previousTurnWrote;
    this.turnWrites += 1;
    this.tick();
    if (idle) {
      const now = this.alone(fn);
      if (now) return now;
    }
    return new Promise<T>((resolve, reject) => {
      this.queue.push({
        fn,
        resolve: resolve as (v: unknown) => void,
        reject,
        deadline: performance.now() + (waitMs ?? this.p.busyBudgetMs),
      });
      if (!this.flushing) {
        this.flushing = true;
        this.gather(1, 0);
      }
    });
  }

  /** Follows the turns while writes arrive: at each check phase, this turn becomes the previous. */
  private tick(): void {
    if (this.ticking) return;
    this.ticking = true;
    setImmediate(() => {
      this.ticking = false;
      this.previousTurnWrote = this.turnWrites > 0;
      this.turnWrites = 0;
      if (this.previousTurnWrote) this.tick();
    });
  }

  /**
   * Commits `fn` at once in its own transaction. @returns its settled promise, or null when the
   * lock is held elsewhere (then it is queued and waited for like any other write).
   */
  private alone<T>(fn: () => T): Promise<T> | null {
    let tried: Attempt<T>;
    try {
      tried = this.p.attempt(fn);
    } catch (e) {
      return Promise.reject(e);
    }
    if (!tried.ran) return null;
    this.stats.transactions += 1;
    this.stats.writes += 1;
    return Promise.resolve(tried.value);
  }

  /**
   * Waits for the end of the event-loop turn (setImmediate), and for up to {@link GATHER_TURNS}
   * more while the queue still grew during the last one (requests arriving in a burst are
   * handled over several turns), then drains. A lone write waits one turn only.
   */
  private gather(seen: number, turns: number): void {
    setImmediate(() => {
      const n = this.queue.length;
      if (n > seen && n < MAX_BATCH && turns < GATHER_TURNS) this.gather(n, turns + 1);
      else void this.drain();
    });
  }

  /** Commits batches until the queue is empty, waiting out a lock held by another process. */
  private async drain(): Promise<void> {
    let pause = 1;
    try {
      while (this.queue.length > 0) {
        const batch = this.queue.slice(0, MAX_BATCH);
        const tried = this.commit(batch);
        if (tried === 'busy') {
          await this.expireAndWait(pause);
          pause = Math.min(pause * 2, MAX_PAUSE_MS);
          continue;
        }
        pause = 1;
        // More than one batch's worth was queued: let I/O run before the next transaction.
        if (this.queue.length > 0) await new Promise((r) => setImmediate(r));
      }
    } finally {
      this.flushing = false;
      for (const w of this.waiters.splice(0)) w();
    }
  }

  /** Resolves once every write queued so far has settled (before the connection is closed). */
  settled(): Promise<void> {
    if (!this.flushing) return Promise.resolve();
    return new Promise((resolve) => this.waiters.push(resolve));
  }

  /** One group transaction over `batch`; settles its promises unless the lock was busy. */
  private commit(batch: Queued[]): 'busy' | 'done' {
    let outcomes: Outcome[] = [];
    let attempt: Attempt<Outcome[]>;
    try {
      attempt = this.p.attempt(() => {
        outcomes = batch.map((w) => this.runOne(w));
        // SQLite ended the transaction itself: nothing of the batch can commit.
        if (!this.p.inTransaction()) throw abortedError();
        return outcomes;
      });
    } catch (e) {
      // The COMMIT (or the transaction as a whole) failed: none of the batch is durable.
      this.queue.splice(0, batch.length);
      batch.forEach((w, i) => {
        const o = outcomes[i];
        w.reject(o && !o.ok ? o.error : e);
      });
      return 'done';
    }
    if (!attempt.ran) {
      this.lastBusy = attempt.busy;
      return 'busy';
    }
    this.queue.splice(0, batch.length);
    this.stats.transactions += 1;
    this.stats.writes += batch.length;
    batch.forEach((w, i) => {
      const o = attempt.value[i] as Outcome;
      if (o.ok) w.resolve(o.value);
      else w.reject(o.error);
    });
    return 'done';
  }

  private runOne(w: Queued): Outcome {
    if (!this.p.inTransaction()) return { ok: false, error: abortedError() };
    try {
      return { ok: true, value: this.p.nested(w.fn) };
    } catch (error) {
      return { ok: false, error };
    }
  }

  /** Rejects the writes whose budget has passed (with `busy`), then pauses before the next try. */
  private async expireAndWait(pause: number): Promise<void> {
    const busy = this.lastBusy;
    const now = performance.now();
    const left = this.queue.filter((w) => w.deadline > now);
    for (const w of this.queue) if (w.deadline <= now) w.reject(busy);
    this.queue = left;
    const first = left[0];
    if (!first) return;
    await setTimeout(Math.min(pause, first.deadline - now));
  }

  /** The SQLITE_BUSY of the last try that found the lock held (set by {@link commit}). */
  private lastBusy: Error = new Error('SQLITE_BUSY');
}
