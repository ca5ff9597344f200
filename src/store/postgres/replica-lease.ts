/**
 * One replica's lease over its lifetime (docs/replicas.md#leases-and-fencing-tokens): acquired
 * at start (with recovery of its own previous lease's work when that expired unsealed), renewed
 * by a heartbeat, a sweep that seals other replicas' expired leases, released at a graceful
 * stop. A failed renewal is tried again at once (within RENEW_RETRY_MS), so the lease outlives a
 * database outage shorter than ttl - renewal. A renewal that finds the lease lost stops both
 * timers and reports it once: from then on every write under the old token fails its fence
 * (LEASE_LOST). With `regain` the replica then acquires its lease again itself (a new token, same
 * key), sealing its own open work first when nobody did; without, it is restarted under a new token.
 */
import type pg from 'pg';
import type { MicroClock } from '../entries/clock.js';
import {
  type AcquiredLease,
  acquireLease,
  defaultRenewEveryMs,
  type Fence,
  LeaseLostError,
  type LeaseRequest,
  releaseLease,
  renewLease,
} from './leases.js';
import { recoverOwnWork, type Sealed, sealExpiredReplica } from './sealing.js';

/** The `detail.reason` of a replica's own unfinished work recovered when it acquires its lease again. */
export const RESTART_REASON = 'replica_restart';

/** The `detail.reason` of a replica's own unfinished work sealed when it regains a lease it lost while running. */
export const REGAINED_REASON = 'replica_lease_regained';

/** The longest wait before a failed renewal is tried again, milliseconds. */
export const RENEW_RETRY_MS = 250;

/** Options of {@link ReplicaLease.start}. */
export interface ReplicaLeaseOptions extends LeaseRequest {
  /** Renewal period, milliseconds (default ttl/3: two renewals may be lost before expiry). */
  renewEveryMs?: number;
  /** Sweep period for other replicas' expired leases, milliseconds (default ttl; 0: no sweep). */
  sweepEveryMs?: number;
  /** Called once when the lease is found lost (a renewal failed its token or expiry). */
  onLost?: (e: Error) => void;
  /** Called with each sealing a sweep did (for logs and metrics). */
  onSealed?: (s: Sealed) => void;
  /** Called with a sweep's or renewal's error other than a lost lease (e.g. the database unreachable). */
  onError?: (e: Error) => void;
  /**
   * Set: a lost lease is acquired again, under a new token with the same key, by this running
   * process (tried every renewal period), its own open work sealed first when nobody sealed it
   * (`replica_lease_regained`); then `onRegained` is called. Unset: a lost lease stays lost.
   */
  regain?: boolean;
  /** Called each time a lost lease was acquired again (`regain`). */
  onRegained?: (fence: Fence, sealed: Sealed | null) => void;
  clock?: MicroClock;
}

/** A live lease with its heartbeat and sweep. */
export class ReplicaLease {
  private renewTimer: NodeJS.Timeout | null = null;
  private sweepTimer: NodeJS.Timeout | null = null;
  private regainTimer: NodeJS.Timeout | null = null;
  private lost = false;
  private stopped = false;
  /** Set by {@link begin}: only then may a lost lease be regained (its sealing signs entries). */
  private begun = false;

  private constructor(
    private readonly pool: pg.Pool,
    /**
     * The replica's fence, one object for the process's lifetime: a regained lease updates its
     * `leaseToken` in place, so every holder (the stores, the call path) writes under the new
     * token.
     */
    readonly fence: Fence,
    /** What the lease row said before this start. */
    readonly acquired: AcquiredLease,
    private readonly opts: ReplicaLeaseOptions,
  ) {}

  private recoveredWork: Sealed | null = null;

  /** What was recovered of this replica's previous lease (null when nothing was due). */
  get recovered(): Sealed | null {
    return this.recoveredWork;
  }

  /**
   * Acquires the lease and starts its heartbeat, then {@link begin}s: recovers this replica's
   * own previous work when its previous lease expired unsealed, and starts the sweep. For a
   * lease whose fence writes no entry before its key's evidence is recorded (store-level use).
   * @throws InstanceBusyError (INSTANCE_RUNNING) while another holder's lease is live;
   *   LeaseLostError when the lease was lost during the recovery; pg errors.
   */
  static async start(pool: pg.Pool, opts: ReplicaLeaseOptions): Promise<ReplicaLease> {
    const lease = await ReplicaLease.acquire(pool, opts);
    await lease.begin();
    return lease;
  }

  /**
   * Acquires the lease and starts its heartbeat only: nothing is sealed yet. A replica records
   * its key's evidence next and then calls {@link begin}, so no entry its key signs precedes
   * that evidence (docs/replicas.md#start-up-order).
   * @throws InstanceBusyError (INSTANCE_RUNNING) while another holder's lease is live; pg errors.
   */
  static async acquire(pool: pg.Pool, opts: ReplicaLeaseOptions): Promise<ReplicaLease> {
    const acquired = await acquireLease(pool, opts);
    const lease = new ReplicaLease(pool, acquired.fence, acquired, opts);
    // The heartbeat runs from the moment the lease is ours: a long start-up (recovering a long
    // previous run, or one waiting on a lock) must not outlast the ttl and lose its lease.
    lease.scheduleRenewal();
    return lease;
  }

  /**
   * Recovers this replica's own previous work when its previous lease expired unsealed (each
   * entry signed by this lease's writer), then starts the sweep of other replicas' expired
   * leases. Once, after {@link acquire}.
   * @throws LeaseLostError when the lease was lost during the recovery (the lease is halted);
   *   pg errors (the lease is halted).
   */
  async begin(): Promise<void> {
    try {
      if (this.acquired.previous === 'expired')
        this.recoveredWork = await recoverOwnWork(this.pool, this.fence, RESTART_REASON, this.opts.clock);
    } catch (e) {
      this.halt();
      throw e;
    }
    if (this.lost) throw new LeaseLostError(this.fence);
    this.begun = true;
    this.scheduleSweep();
  }

  /** False once a renewal found the lease lost (or after {@link stop}). */
  get live(): boolean {
    return !this.lost;
  }

  private get renewEveryMs(): number {
    return this.opts.renewEveryMs ?? defaultRenewEveryMs(this.opts.ttlMs);
  }

  /**
   * The heartbeat: one renewal at a time, the next `renewEvery` after a success and
   * {@link RENEW_RETRY_MS} (at most) after a failure other than a lost lease — so a lease
   * survives a database outage of up to `ttl - renewEvery - RENEW_RETRY_MS` (the outage
   * beginning just before a renewal was due), renewed at once when the database is back.
   */
  private scheduleRenewal(delayMs = this.renewEveryMs): void {
    if (this.lost || this.stopped) return;
    this.renewTimer = setTimeout(() => void this.renew(), delayMs);
  }
  private scheduleSweep(): void {
    const sweepEvery = this.opts.sweepEveryMs ?? this.opts.ttlMs;
    if (sweepEvery > 0 && !this.sweepTimer)
      this.sweepTimer = setInterval(() => void this.sweep(), sweepEvery);
  }

  private async renew(): Promise<void> {
    if (this.lost || this.stopped) return;
    const began = Date.now();
    try {
      await renewLease(this.pool, this.fence, this.opts.ttlMs);
    } catch (e) {
      if (this.lost || this.stopped) return;
      if ((e as { code?: string }).code !== 'LEASE_LOST') {
        this.opts.onError?.(e as Error);
        return this.scheduleRenewal(Math.min(RENEW_RETRY_MS, this.renewEveryMs));
      }
      this.halt();
      this.opts.onLost?.(e as Error);
      if (this.opts.regain && this.begun) this.scheduleRegain();
      return;
    }
    // The period counts from this renewal's start: a slow round trip does not stretch it.
    this.scheduleRenewal(Math.max(0, this.renewEveryMs - (Date.now() - began)));
  }

  private scheduleRegain(): void {
    if (this.stopped) return;
    this.regainTimer = setTimeout(() => void this.regain(), this.renewEveryMs);
  }

  /**
   * One try at acquiring the lost lease again under the same key: refused while another holder's
   * lease (a sealing sweeper's) is live, or while the database is unreachable — tried again
   * later. Acquired: this replica's work still open is sealed (when nobody sealed it), the fence
   * takes the new token, and the heartbeat and sweep run again.
   */
  private async regain(): Promise<void> {
    this.regainTimer = null;
    if (this.stopped || !this.lost) return;
    let acquired: AcquiredLease;
    try {
      acquired = await acquireLease(this.pool, this.opts);
    } catch (e) {
      this.opts.onError?.(e as Error);
      return this.scheduleRegain();
    }
    if (this.stopped) {
      await releaseLease(this.pool, acquired.fence).catch(() => undefined); // stopped meanwhile
      return;
    }
    this.fence.leaseToken = acquired.fence.leaseToken;
    this.lost = false;
    this.scheduleRenewal();
    let sealed: Sealed | null = null;
    try {
      if (acquired.previous === 'expired')
        sealed = await recoverOwnWork(this.pool, this.fence, REGAINED_REASON, this.opts.clock);
    } catch (e) {
      // Not serving until its own work is sealed: lost again, tried again.
      this.halt();
      this.opts.onError?.(e as Error);
      return this.scheduleRegain();
    }
    if (this.lost) return; // lost again meanwhile: the renewal scheduled the next try
    this.scheduleSweep();
    this.opts.onRegained?.(this.fence, sealed);
  }

  /** One sweep now (also run by the timer): seals every expired lease it can take, one by one. */
  async sweep(): Promise<Sealed[]> {
    const done: Sealed[] = [];
    try {
      for (let s = await this.sealOne(); s; s = await this.sealOne()) {
        done.push(s);
        this.opts.onSealed?.(s);
      }
    } catch (e) {
      if ((e as { code?: string }).code !== 'LEASE_LOST') this.opts.onError?.(e as Error);
    }
    return done;
  }

  private sealOne(): Promise<Sealed | null> {
    if (this.lost) return Promise.resolve(null);
    return sealExpiredReplica(this.pool, this.fence, this.opts.ttlMs, this.opts.clock);
  }

  private halt(): void {
    this.lost = true;
    if (this.renewTimer) clearTimeout(this.renewTimer);
    if (this.sweepTimer) clearInterval(this.sweepTimer);
    this.renewTimer = this.sweepTimer = null;
  }

  /**
   * Stops the heartbeat and the sweep and releases the lease (state `sealed`), once the replica
   * recorded what it had open. A lease already lost is left as it is.
   * @throws pg errors.
   */
  async stop(): Promise<void> {
    const wasLive = !this.lost;
    this.stopped = true;
    if (this.regainTimer) clearTimeout(this.regainTimer);
    this.regainTimer = null;
    this.halt();
    if (wasLive)
      await releaseLease(this.pool, this.fence).catch((e) => {
        if ((e as { code?: string }).code !== 'LEASE_LOST') throw e;
      });
  }
}
