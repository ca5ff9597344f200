/**
 * The per-agent rate of client sessions opened (docs/operations.md#limits-and-timeouts): every
 * successful `initialize` opens a client session and writes a `client_session_open` entry in the
 * gateway chain, so without a bound an agent — in dev mode, any unauthenticated client, all as
 * `dev` — could grow the audit log as fast as its request rate allows. A token bucket per agent
 * of `limits.agent_client_sessions_per_min` (its size, refilled over a minute); an `initialize`
 * beyond it is refused AGENT_CLIENT_SESSIONS_RATE_LIMITED (429, Retry-After) and goes to the
 * aggregated refusal record instead.
 */
import { ERRORS } from '@cmcp/verify/errors/index';
import { jsonRpcError } from '../edge/replies.js';
import type { RefusalSink } from './plugin.js';

interface Bucket {
  tokens: number;
  /** performance.now() of the last refill, ms. */
  at: number;
}

/** Above this many tracked agents, those with a full bucket are forgotten. */
const PRUNE_AT = 10_000;

export class ClientSessionRate {
  private readonly buckets = new Map<string, Bucket>();

  /** @param perMin client sessions an agent may open per minute (the bucket's size). */
  constructor(readonly perMin: number) {}

  private refill(agentId: string): Bucket {
    const now = performance.now();
    let b = this.buckets.get(agentId);
    if (!b) {
      if (this.buckets.size >= PRUNE_AT) this.prune(now);
      b = { tokens: this.perMin, at: now };
      this.buckets.set(agentId, b);
    }
    b.tokens = Math.min(this.perMin, b.tokens + ((now - b.at) / 60_000) * this.perMin);
    b.at = now;
    return b;
  }

  private prune(now: number): void {
    for (const [id, b] of this.buckets)
      if (b.tokens + ((now - b.at) / 60_000) * this.perMin >= this.perMin) this.buckets.delete(id);
  }

  /** Takes one client session of `agentId`'s budget. @returns false when it has none left. */
  admit(agentId: string): boolean {
    const b = this.refill(agentId);
    if (b.tokens < 1) return false;
    b.tokens -= 1;
    return true;
  }

  /** Whole seconds until the agent may open its next client session (Retry-After). */
  retryAfterS(agentId: string): number {
    const b = this.refill(agentId);
    return Math.max(1, Math.ceil(((1 - b.tokens) * 60) / this.perMin));
  }
}

/**
 * The answer to a successful `initialize` whose client session the agent's rate does not allow,
 * recorded as a refusal; null when it is allowed (or there is no limit).
 * @param id the request's JSON-RPC id, carried by the refusal.
 */
export function clientSessionRefusal(
  rate: ClientSessionRate | null | undefined,
  record: RefusalSink | undefined,
  agentId: string,
  id: string | number | null,
): { status: number; body: Record<string, unknown>; retryAfterS: number } | null {
  if (!rate || rate.admit(agentId)) return null;
  const code = 'AGENT_CLIENT_SESSIONS_RATE_LIMITED';
  record?.(agentId, code, { route: 'POST /mcp', method: 'initialize' });
  const message = `this agent opened ${rate.perMin} client sessions in the last minute; retry later`;
  return {
    status: ERRORS[code].http,
    body: jsonRpcError(id, code, message),
    retryAfterS: rate.retryAfterS(agentId),
  };
}
