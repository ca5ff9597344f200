/**
 * The aggregated refusal record (docs/spec/audit-entries.md#the-gateway-chain): refused
 * requests are recorded in the gateway chain at a bounded rate, per (error code, agent) — the
 * first refusal of each window at once (so a single probe is on the record immediately), later
 * ones of the same key in that window counted and written as one entry when the window closes.
 * So no one — with credentials or without, on any route — can grow the database at will.
 */
import type { ErrorCode } from '../../errors/index.js';

/**
 * Records one refused request in the gateway chain (aggregated, below): the agent (null when
 * unauthenticated), the registry code, and what the entry names (route, reason, …). Every
 * plugin of the edge takes one; nothing it refuses goes unrecorded.
 */
export type RefusalSink = (agentId: string | null, code: ErrorCode, detail: Record<string, unknown>) => void;

/**
 * Writes one gateway-chain entry for `count` refusals of one key seen since `windowStart`
 * (RFC 3339). `detail` is the first refusal's own detail (window-opening entries only).
 */
export type AggregateSink = (
  agentId: string | null,
  code: ErrorCode,
  detail: Record<string, unknown>,
) => void;

/** At most this many keys have an open window; further keys share one per code (agent `*`). */
const MAX_WINDOWS = 1000;
/** At most this many distinct routes are named per window entry. */
const MAX_ROUTES = 20;

interface Window {
  agentId: string | null;
  code: ErrorCode;
  pending: number;
  routes: Set<string>;
  windowStart: string;
  timer: NodeJS.Timeout;
}

export class RefusalAggregator {
  private readonly windows = new Map<string, Window>();

  /** @param windowMs length of an aggregation window, milliseconds. */
  constructor(
    private readonly sink: AggregateSink,
    private readonly windowMs = 10_000,
    /** Told every refusal, aggregated or not (cmcp_refusals_total). */
    private readonly onRefusal: (code: ErrorCode) => void = () => undefined,
  ) {}

  /**
   * Records one refusal.
   * @param route what was refused: `METHOD /route` or the JSON-RPC method.
   * @param detail the refusal's own detail, kept on a window's first entry only.
   */
  record(agentId: string | null, code: ErrorCode, route: string, detail: Record<string, unknown> = {}): void {
    this.onRefusal(code);
    let key = `${code}\u0000${agentId ?? ''}`;
    if (!this.windows.has(key) && this.windows.size >= MAX_WINDOWS) {
      key = `${code}\u0000*`;
      agentId = null;
    }
    const open = this.windows.get(key);
    if (open) {
      open.pending++;
      if (open.routes.size < MAX_ROUTES) open.routes.add(route);
      return;
    }
    const windowStart = new Date().toISOString();
    this.sink(agentId, code, { ...detail, count: 1, routes: [route], window_start: windowStart });
    const timer = setTimeout(() => this.close(key), this.windowMs);
    timer.unref();
    this.windows.set(key, { agentId, code, pending: 0, routes: new Set(), windowStart, timer });
  }

  /** Closes one window, writing its counted entry if anything is pending. */
  private close(key: string): void {
    const w = this.windows.get(key);
    if (!w) return;
    clearTimeout(w.timer);
    this.windows.delete(key);
    if (w.pending > 0)
      this.sink(w.agentId, w.code, { count: w.pending, routes: [...w.routes], window_start: w.windowStart });
  }

  /** Writes what is pending and closes every window (also called at shutdown). */
  flush(): void {
    for (const key of [...this.windows.keys()]) this.close(key);
  }
}

/**
 * Refusals before authentication (no agent): the aggregated record under one code, by route —
 * `UNAUTHENTICATED` (no or unknown credentials), `HOST_NOT_ALLOWED` (DNS-rebinding protection).
 */
export class AuthFailureRecorder {
  constructor(
    private readonly aggregate: RefusalAggregator,
    private readonly code: ErrorCode = 'UNAUTHENTICATED',
  ) {}

  record(route: string): void {
    this.aggregate.record(null, this.code, route);
  }

  /** Writes what is pending (also called at shutdown). */
  flush(): void {
    this.aggregate.flush();
  }
}

/** The `request_refused` sinks of one gateway. */
export interface GatewayRefusals {
  /** Any refused request, through the aggregated record (`detail.route` or `detail.method` names it). */
  refused: RefusalSink;
  /** Unauthenticated requests: the first in each window at once, the rest as one counted entry. */
  authFailures: AuthFailureRecorder;
  /** Requests refused by DNS-rebinding protection (edge/host-check.ts), aggregated the same way. */
  hostRefusals: AuthFailureRecorder;
}
