/**
 * One upstream down is not the gateway down (docs/spec/refinements.md). An upstream that cannot be
 * reached or started at start-up is marked unavailable: its tools are hidden, calls naming them
 * are refused with UPSTREAM_OFFLINE, and it is retried with exponential backoff until it answers,
 * when it is brought in (its tools listed, the catalog told as at first contact). Upstreams with
 * `required: true` keep the refuse-to-start behaviour instead.
 */

import type { Logger } from 'pino';
import { detached } from '../tracing/mcp-spans.js';

/** Retry delays: first after {@link BACKOFF_FIRST_MS}, doubling up to {@link BACKOFF_MAX_MS}. */
export const BACKOFF_FIRST_MS = 500;
export const BACKOFF_MAX_MS = 30_000;

/** The delay before retry number `attempt` (0-based), milliseconds. */
export function backoffDelay(attempt: number): number {
  return Math.min(BACKOFF_MAX_MS, BACKOFF_FIRST_MS * 2 ** Math.min(attempt, 16));
}

/** Why one attempt failed: `reason` for the log, the record and `--check`; `summary` for callers. */
export interface Failure {
  reason: string;
  summary: string;
  /**
   * The upstream needs a user's authorization (./oauth/): it is not down, and not retried on a
   * timer; a call naming it is refused with UPSTREAM_AUTHORIZATION_REQUIRED and tries it once.
   */
  needsUser?: { authorizationUrl?: string };
  /**
   * The gateway could not get a token the upstream accepts (./oauth/): not retried on a timer
   * either (a refused client or scope does not heal by itself); a call naming it tries it once.
   */
  authorizationFailed?: boolean;
}

/** Why an upstream is unavailable. */
export interface Unavailable extends Failure {
  upstream: string;
  since: string;
  attempts: number;
}

/** Told when an upstream goes unavailable or comes back (recorded in the gateway chain). */
export type AvailabilityListener = (
  event: 'upstream_unavailable' | 'upstream_available' | 'upstream_authorization_required',
  detail: Record<string, unknown>,
) => void;

/** An upstream that needs a user is tried again at most this often, on demand (ms). */
export const USER_RETRY_MIN_MS = 5_000;

/** Whether an upstream is tried again only when a call names it (never on a timer). */
function onDemand(f: Failure | undefined): boolean {
  return !!f && (f.needsUser !== undefined || f.authorizationFailed === true);
}

/** The record event of a failure: an upstream waiting for a user is not reported down. */
function eventOf(f: Failure): 'upstream_unavailable' | 'upstream_authorization_required' {
  return f.needsUser ? 'upstream_authorization_required' : 'upstream_unavailable';
}

/** What the record says of a failure. */
function detailOf(name: string, f: Failure): Record<string, unknown> {
  return {
    upstream: name,
    reason: f.reason,
    summary: f.summary,
    ...(f.needsUser ? { authorization_url: f.needsUser.authorizationUrl ?? null } : {}),
  };
}

/** Unavailable upstreams and their retry timers. */
export class AvailabilityTracker {
  private readonly down = new Map<
    string,
    Unavailable & { timer: NodeJS.Timeout | null; trying: boolean; triedAt: number }
  >();
  private listener: AvailabilityListener | null = null;
  private closed = false;

  /**
   * @param retry tries one upstream again; resolves true when it answered and was brought in,
   *   else why not (a rejection counts as a failure with its message).
   */
  constructor(
    private readonly log: Logger,
    private readonly retry: (name: string) => Promise<true | Failure>,
  ) {}

  /** Sets who records availability changes; events already seen are replayed to it. */
  listen(listener: AvailabilityListener): void {
    this.listener = listener;
    for (const d of this.down.values())
      listener(eventOf(d), { ...detailOf(d.upstream, d), phase: 'start-up' });
  }

  /** Marks an upstream unavailable (start-up) and schedules its first retry. */
  markDown(name: string, failure: Failure): void {
    if (this.closed) return;
    const { reason, summary } = failure;
    this.down.set(name, {
      upstream: name,
      reason,
      summary,
      ...(failure.needsUser ? { needsUser: failure.needsUser } : {}),
      since: new Date().toISOString(),
      attempts: 0,
      timer: null,
      trying: false,
      triedAt: Date.now(),
    });
    if (failure.needsUser)
      this.log.warn(
        { upstream: name, reason, authorization_url: failure.needsUser.authorizationUrl },
        'upstream needs a user authorization: its tools are hidden until then; not retried on a timer',
      );
    else
      this.log.warn(
        { upstream: name, reason, retry_in_ms: backoffDelay(0) },
        'upstream unavailable: its tools are hidden; retrying with backoff',
      );
    this.listener?.(eventOf(failure), { ...detailOf(name, failure), phase: 'start-up' });
    this.schedule(name);
  }

  /**
   * Tries an upstream that waits for a user once more (a call named it), unless a try is under
   * way or the last one was less than {@link USER_RETRY_MIN_MS} ago.
   */
  nudge(name: string): void {
    const d = this.down.get(name);
    if (!onDemand(d) || d?.trying || Date.now() - (d?.triedAt ?? 0) < USER_RETRY_MIN_MS || this.closed)
      return;
    void this.attempt(name);
  }

  /**
   * Tries an upstream that waits for a user now (its authorization was just completed), and
   * says whether it is available afterwards.
   */
  async retryNow(name: string): Promise<boolean> {
    const d = this.down.get(name);
    if (!d) return true;
    if (!d.needsUser || d.trying || this.closed) return false;
    await this.attempt(name);
    return !this.down.has(name);
  }

  private schedule(name: string): void {
    const d = this.down.get(name);
    // An upstream waiting for a user or a working authorization is never retried on a timer (only on demand, nudge).
    if (!d || this.closed || onDemand(d)) return;
    d.timer = setTimeout(
      detached(() => void this.attempt(name)),
      backoffDelay(d.attempts),
    );
    d.timer.unref();
  }

  private async attempt(name: string): Promise<void> {
    const d = this.down.get(name);
    if (!d || this.closed) return;
    d.attempts += 1;
    d.trying = true;
    let r: true | Failure;
    try {
      r = await this.retry(name);
    } catch (e) {
      r = { reason: (e as Error).message, summary: 'not reachable' };
    }
    d.trying = false;
    d.triedAt = Date.now();
    if (this.closed) return;
    if (r === true) {
      this.down.delete(name);
      this.log.info({ upstream: name, attempts: d.attempts }, 'upstream available: its tools are served');
      this.listener?.('upstream_available', { upstream: name, attempts: d.attempts, down_since: d.since });
      return;
    }
    const changed = !d.needsUser !== !r.needsUser;
    d.reason = r.reason;
    d.summary = r.summary;
    if (r.needsUser) d.needsUser = r.needsUser;
    else delete d.needsUser;
    if (r.authorizationFailed) d.authorizationFailed = true;
    else delete d.authorizationFailed;
    if (changed) this.listener?.(eventOf(r), { ...detailOf(name, r), phase: 'retry' });
    this.log.debug({ upstream: name, reason: r.reason, attempts: d.attempts }, 'upstream still unavailable');
    this.schedule(name);
  }

  /** Why `name` is unavailable, or null when it is not. */
  get(name: string): Unavailable | null {
    const d = this.down.get(name);
    return d
      ? {
          upstream: d.upstream,
          reason: d.reason,
          summary: d.summary,
          since: d.since,
          attempts: d.attempts,
          ...(d.needsUser ? { needsUser: d.needsUser } : {}),
          ...(d.authorizationFailed ? { authorizationFailed: true } : {}),
        }
      : null;
  }

  /** Every unavailable upstream (operator status, `--check`). */
  all(): Unavailable[] {
    return [...this.down.keys()].map((n) => this.get(n) as Unavailable);
  }

  /** Stops every retry; idempotent. */
  close(): void {
    this.closed = true;
    for (const d of this.down.values()) if (d.timer) clearTimeout(d.timer);
  }
}
