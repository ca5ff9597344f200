/**
 * Records unauthenticated requests in the gateway chain at a bounded rate: the first refusal
 * of each window is recorded at once (so a single probe is on the record immediately), later
 * ones in the same window are counted and written as one entry when the window closes.
 */

/** Writes one gateway-chain entry for `count` refusals seen since `windowStart` (RFC 3339). */
export type AuthFailureSink = (count: number, routes: string[], windowStart: string) => void;

export class AuthFailureRecorder {
  private pending = 0;
  private routes = new Set<string>();
  private windowStart: string | null = null;
  private timer: NodeJS.Timeout | null = null;

  /** @param windowMs length of an aggregation window, milliseconds. */
  constructor(
    private readonly sink: AuthFailureSink,
    private readonly windowMs = 10_000,
  ) {}

  record(route: string): void {
    if (this.timer === null) {
      this.sink(1, [route], new Date().toISOString());
      this.windowStart = new Date().toISOString();
      this.timer = setTimeout(() => this.flush(), this.windowMs);
      this.timer.unref();
      return;
    }
    this.pending++;
    if (this.routes.size < 20) this.routes.add(route);
  }

  /** Writes what is pending and closes the window (also called at shutdown). */
  flush(): void {
    if (this.timer) clearTimeout(this.timer);
    this.timer = null;
    if (this.pending > 0 && this.windowStart) this.sink(this.pending, [...this.routes], this.windowStart);
    this.pending = 0;
    this.routes = new Set();
    this.windowStart = null;
  }
}
