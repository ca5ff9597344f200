/**
 * Terminal entries whose commit failed (a full disk, an I/O error, a lock held past the busy
 * timeout): the call ran upstream and its attempt is still open in the database, so without
 * this it would stay `in_flight` — retries answered EXECUTION_IN_FLIGHT — until the process
 * stopped and recovery sealed it outcome_unknown. Each is kept in memory (bounded) and its
 * write tried again on a timer with backoff until it commits; the write is the one that failed
 * (same transaction: entry, call count, execution state, attempt end), so a call still gets
 * exactly one terminal entry. One whose attempt was ended meanwhile (a shutdown's or a
 * sealing replica's outcome_unknown) is dropped. A crash meanwhile leaves the attempt open:
 * start-up recovery seals it, as before.
 */

import type { AuditEntry } from '@cmcp/verify/formats';
import type { Logger } from 'pino';
import { CmcpError } from '../errors/index.js';

/** How many failed terminals are kept at most; past it a call is left to recovery (logged). */
export const MAX_PENDING_TERMINALS = 10_000;

/** First retry after this long, ms; doubled after each failed round up to {@link MAX_RETRY_MS}. */
const FIRST_RETRY_MS = 250;
const MAX_RETRY_MS = 5000;

/**
 * True when trying the write again cannot help: a replica whose lease is lost is fenced out for
 * good (the successor seals its calls), so its terminal is not kept.
 */
export function hopeless(e: unknown): boolean {
  return e instanceof CmcpError && e.code === 'LEASE_LOST';
}

/** The `detail.recorded_late` of a terminal entry committed by a retry. */
export const RECORDED_LATE = 'terminal_write_failed';

interface Pending {
  write: () => Promise<AuditEntry>;
  /** False once the call's attempt was ended elsewhere (then the entry is not written). */
  stillOpen: () => boolean;
}

export class PendingTerminals {
  private readonly pending = new Map<string, Pending>();
  private timer: NodeJS.Timeout | null = null;
  private waitMs = FIRST_RETRY_MS;
  private flushing: Promise<number> | null = null;
  private closed = false;

  constructor(
    private readonly log: Logger,
    private readonly max = MAX_PENDING_TERMINALS,
  ) {}

  /** Calls whose terminal entry is waiting for a write to succeed. */
  get size(): number {
    return this.pending.size;
  }

  /**
   * Keeps a call's failed terminal write to try again.
   * @param write the terminal transaction, as it failed.
   * @param stillOpen whether the call's attempt is still open (nothing else ended it).
   * @returns false when the bound is reached or after {@link close} (left to recovery).
   */
  add(callId: string, write: () => Promise<AuditEntry>, stillOpen: () => boolean = () => true): boolean {
    if (this.closed || this.pending.size >= this.max) {
      this.log.error({ call_id: callId }, 'terminal entry not kept for retry; recovery seals the call');
      return false;
    }
    this.pending.set(callId, { write, stillOpen });
    this.schedule();
    return true;
  }

  /**
   * Tries every kept write once, in the order they failed; stops at the first that fails again
   * (the store still cannot write: no use hammering it), which goes to the back of the order.
   * Concurrent calls share one round.
   * @returns how many committed.
   */
  flush(): Promise<number> {
    this.flushing ??= this.round().finally(() => {
      this.flushing = null;
    });
    return this.flushing;
  }

  /** Stops the timer; nothing more is kept. What is still pending is left to recovery. */
  close(): void {
    this.closed = true;
    if (this.timer) clearTimeout(this.timer);
    this.timer = null;
  }

  private async round(): Promise<number> {
    let done = 0;
    for (const [callId, p] of [...this.pending]) {
      if (!p.stillOpen()) {
        this.pending.delete(callId);
        continue;
      }
      try {
        await p.write();
        this.pending.delete(callId);
        done++;
      } catch (e) {
        if (hopeless(e) || !p.stillOpen()) {
          this.pending.delete(callId);
          continue;
        }
        this.log.warn(
          { call_id: callId, pending: this.pending.size, err: (e as Error).message },
          'terminal entry still cannot be committed; retrying',
        );
        // To the back: one write that keeps failing does not hold the others back for ever.
        this.pending.delete(callId);
        this.pending.set(callId, p);
        break;
      }
    }
    if (done > 0)
      this.log.info({ recorded: done, pending: this.pending.size }, 'late terminal entries recorded');
    return done;
  }

  private schedule(): void {
    if (this.timer || this.closed || this.pending.size === 0) return;
    this.timer = setTimeout(() => {
      this.timer = null;
      void this.flush().then((done) => {
        this.waitMs = done > 0 ? FIRST_RETRY_MS : Math.min(this.waitMs * 2, MAX_RETRY_MS);
        this.schedule();
      });
    }, this.waitMs);
    this.timer.unref();
  }
}
