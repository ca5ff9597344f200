/**
 * Bounds what upstreams push to one client (docs/operations.md#limits-and-timeouts): the
 * notifications relayed to a client session (log messages, list changes, resource updates,
 * progress), or to one request without a client session, pass two token buckets — a count per
 * second and bytes per second, each with a burst. What neither bucket admits is dropped, never
 * queued, so an upstream flooding notifications can neither swamp the client nor make the
 * gateway buffer without limit; each drop is told to the caller (the aggregated refusal record
 * and `cmcp_refusals_total`).
 */

/** The bounds of one client's notifications. */
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

interface Bucket {
  count: number;
  bytes: number;
  at: number;
}

/** Why a notification was dropped. */
export type DropReason = 'rate' | 'bytes';

/** Per-client token buckets: keyed by client session id, or by the request's channel. */
export class NotificationBudget {
  private readonly sessions = new Map<string, Bucket>();
  private readonly channels = new WeakMap<object, Bucket>();

  constructor(private readonly limits: NotificationLimits = DEFAULT_NOTIFICATION_LIMITS) {}

  /**
   * Takes one notification of `bytes` from the client's buckets.
   * @returns null when admitted, else why it is dropped (nothing is taken then).
   */
  admit(key: string | object, bytes: number, now = Date.now()): DropReason | null {
    const b = this.bucket(key, now);
    const l = this.limits;
    const seconds = Math.max(0, now - b.at) / 1000;
    b.count = Math.min(l.burst, b.count + seconds * l.perS);
    b.bytes = Math.min(l.byteBurst, b.bytes + seconds * l.bytesPerS);
    b.at = now;
    if (b.count < 1) return 'rate';
    if (b.bytes < bytes) return 'bytes';
    b.count -= 1;
    b.bytes -= bytes;
    return null;
  }

  /** Forgets a client session's buckets (the session ended). */
  forget(clientSessionId: string): void {
    this.sessions.delete(clientSessionId);
  }

  private bucket(key: string | object, now: number): Bucket {
    const fresh = (): Bucket => ({ count: this.limits.burst, bytes: this.limits.byteBurst, at: now });
    if (typeof key === 'string') {
      const b = this.sessions.get(key) ?? fresh();
      this.sessions.set(key, b);
      return b;
    }
    const b = this.channels.get(key) ?? fresh();
    this.channels.set(key, b);
    return b;
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
