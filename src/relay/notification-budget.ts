/**
 * Bounds what upstreams push to one client (docs/operations.md#limits-and-timeouts). Each
 * upstream has its own lane to each client (its client session, or the one request without
 * one): two token buckets — a count per second and bytes per second, each with a burst — so an
 * upstream flooding notifications can neither swamp the client nor starve another upstream's.
 *
 * - Log messages the lane does not admit are dropped, never queued.
 * - List changes (`notifications/{tools,resources,prompts}/list_changed`) carry no data: over
 *   the budget, one pending flag per method is kept and delivered once the lane has refilled
 *   (a timer), so the client always learns that a list changed. `notifications/resources/updated`
 *   is kept likewise, one per URI, at most {@link MAX_PENDING_URIS} URIs per lane.
 * - Progress of a request passes a bucket of that request's own ({@link progressGate}), which no
 *   log flood of its upstream consumes.
 *
 * Every notification not delivered (dropped, or merged into one already pending) is told to the
 * caller (the aggregated refusal record and `cmcp_refusals_total`).
 */

/** The bounds of one client's notifications from one upstream. */
export interface NotificationLimits {
  /** Notifications per second, sustained. */
  perS: number;
  /** Notifications allowed at once above the sustained rate. */
  burst: number;
  /** Bytes (the JSON-RPC message's UTF-8 length) per second, sustained. */
  bytesPerS: number;
  /** Bytes allowed at once above the sustained rate. */
  byteBurst: number;
}

/** The defaults of the `limits.upstream_notification*` settings. */
export const DEFAULT_NOTIFICATION_LIMITS: NotificationLimits = {
  perS: 100,
  burst: 500,
  bytesPerS: 1024 * 1024,
  byteBurst: 4 * 1024 * 1024,
};

/** Distinct `resources/updated` URIs one lane keeps pending; beyond, they are dropped. */
export const MAX_PENDING_URIS = 32;

/** The list-change methods that are coalesced rather than dropped. */
const LIST_CHANGED = new Set([
  'notifications/tools/list_changed',
  'notifications/resources/list_changed',
  'notifications/prompts/list_changed',
]);

interface Bucket {
  count: number;
  bytes: number;
  at: number;
}

/** A coalesced notification waiting for its lane to refill. */
interface Pending {
  bytes: number;
  deliver: () => void;
}

/** One (client, upstream): its buckets and what waits for them. */
interface Lane {
  bucket: Bucket;
  /** By method (list changes) or `uri <uri>` (resource updates), in arrival order. */
  pending: Map<string, Pending>;
  timer: NodeJS.Timeout | null;
}

/** Why a notification was dropped. */
export type DropReason = 'rate' | 'bytes';

/**
 * What became of a coalescible notification: `admitted` — deliver it now; `deferred` — it is
 * pending and its `deliver` runs once the lane refills; else why it is not delivered (over the
 * budget and merged into one already pending, or no room to keep it).
 */
export type Coalesced = 'admitted' | 'deferred' | DropReason;

/** Per (client, upstream) lanes: a client is its client session id, or the request's channel. */
export class NotificationBudget {
  private readonly sessions = new Map<string, Map<string, Lane>>();
  private readonly channels = new WeakMap<object, Map<string, Lane>>();

  constructor(private readonly limits: NotificationLimits = DEFAULT_NOTIFICATION_LIMITS) {}

  /**
   * Takes one notification of `bytes` from the lane of `client` and `upstream`.
   * @returns null when admitted, else why it is dropped (nothing is taken then).
   */
  admit(client: string | object, upstream: string, bytes: number, now = Date.now()): DropReason | null {
    return this.take(this.lane(client, upstream, now).bucket, bytes, now);
  }

  /**
   * As {@link admit}, for a list change or a resource update (`uri`): over the budget it is kept
   * pending instead of dropped — one per method, or per URI up to {@link MAX_PENDING_URIS} — and
   * `deliver` runs once the lane has room. A later one of the same kind while one is pending is
   * merged into it (and reported as not delivered).
   */
  coalesce(
    client: string | object,
    upstream: string,
    method: string,
    uri: string | undefined,
    bytes: number,
    deliver: () => void,
    now = Date.now(),
  ): Coalesced {
    const lane = this.lane(client, upstream, now);
    const key = uri === undefined ? method : `uri ${uri}`;
    const reason = this.take(lane.bucket, bytes, now);
    if (reason === null) {
      // Delivered now: what was pending of the same kind says nothing more.
      lane.pending.delete(key);
      return 'admitted';
    }
    const p = lane.pending.get(key);
    if (p) {
      p.deliver = deliver;
      return reason;
    }
    const coalescible = uri !== undefined || LIST_CHANGED.has(method);
    const uris = [...lane.pending.keys()].filter((k) => k.startsWith('uri ')).length;
    // One that could never fit the byte burst would wait for ever.
    if (!coalescible || bytes > this.limits.byteBurst || (uri !== undefined && uris >= MAX_PENDING_URIS))
      return reason;
    lane.pending.set(key, { bytes, deliver });
    this.schedule(lane);
    return 'deferred';
  }

  /**
   * A bucket of one request's own, with this budget's bounds, for its progress notifications:
   * what other notifications of its upstream take does not reduce it. Forgotten with the request.
   * @returns the admit function of that bucket (null when admitted, else why dropped).
   */
  progressGate(): (bytes: number, now?: number) => DropReason | null {
    const bucket = this.fresh(Date.now());
    return (bytes, now = Date.now()) => this.take(bucket, bytes, now);
  }

  /** Forgets a client session's lanes and what was pending in them (the session ended). */
  forget(clientSessionId: string): void {
    const lanes = this.sessions.get(clientSessionId);
    if (!lanes) return;
    for (const lane of lanes.values()) if (lane.timer) clearTimeout(lane.timer);
    this.sessions.delete(clientSessionId);
  }

  /** Whether a client session has lanes (so whether {@link forget} has anything to do). */
  tracks(clientSessionId: string): boolean {
    return this.sessions.has(clientSessionId);
  }

  /** Client sessions with lanes (for tests). */
  get size(): number {
    return this.sessions.size;
  }

  private take(b: Bucket, bytes: number, now: number): DropReason | null {
    const l = this.limits;
    const seconds = Math.max(0, now - b.at) / 1000;
    b.count = Math.min(l.burst, b.count + seconds * l.perS);
    b.bytes = Math.min(l.byteBurst, b.bytes + seconds * l.bytesPerS);
    b.at = Math.max(b.at, now);
    if (b.count < 1) return 'rate';
    if (b.bytes < bytes) return 'bytes';
    b.count -= 1;
    b.bytes -= bytes;
    return null;
  }

  /** Arms the lane's timer for when its first pending notification fits. */
  private schedule(lane: Lane): void {
    if (lane.timer) return;
    const first = lane.pending.values().next().value;
    if (!first) return;
    const l = this.limits;
    const b = lane.bucket;
    const wait = Math.max((1 - b.count) / l.perS, (first.bytes - b.bytes) / l.bytesPerS, 0) * 1000;
    const ms = Number.isFinite(wait) ? Math.min(60_000, Math.max(5, Math.ceil(wait))) : 1000;
    lane.timer = setTimeout(() => {
      lane.timer = null;
      this.flush(lane);
    }, ms);
    lane.timer.unref();
  }

  /** Delivers what is pending, in arrival order, while the lane has room; re-arms for the rest. */
  private flush(lane: Lane): void {
    const now = Date.now();
    for (const [key, p] of lane.pending) {
      if (this.take(lane.bucket, p.bytes, now) !== null) break;
      lane.pending.delete(key);
      try {
        p.deliver();
      } catch {
        // a delivery's fault keeps neither the others nor the lane's timer from running
      }
    }
    this.schedule(lane);
  }

  private fresh(now: number): Bucket {
    return { count: this.limits.burst, bytes: this.limits.byteBurst, at: now };
  }

  private lane(client: string | object, upstream: string, now: number): Lane {
    let lanes = typeof client === 'string' ? this.sessions.get(client) : this.channels.get(client);
    if (!lanes) {
      lanes = new Map();
      if (typeof client === 'string') this.sessions.set(client, lanes);
      else this.channels.set(client, lanes);
    }
    let lane = lanes.get(upstream);
    if (!lane) {
      lane = { bucket: this.fresh(now), pending: new Map(), timer: null };
      lanes.set(upstream, lane);
    }
    return lane;
  }
}

/** The bounds the `limits:` settings give (src/config). */
export function notificationLimits(l: {
  upstream_notifications_per_s: number;
  upstream_notification_burst: number;
  upstream_notification_bytes_per_s: number;
  upstream_notification_byte_burst: number;
}): NotificationLimits {
  return {
    perS: l.upstream_notifications_per_s,
    burst: l.upstream_notification_burst,
    bytesPerS: l.upstream_notification_bytes_per_s,
    byteBurst: l.upstream_notification_byte_burst,
  };
}
