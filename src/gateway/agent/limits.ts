/**
 * Per-agent limits (docs/operations.md#limits-and-timeouts): a request rate
 * (token bucket), requests in flight at once, open sessions, and client sessions opened per
 * minute. Decided after authentication,
 * in memory; each refusal has its own code and goes to the aggregated refusal record.
 */

import type { FastifyInstance, FastifyReply, FastifyRequest } from 'fastify';
import type { GatewayConfig } from '../../config/index.js';
import { ERRORS, type ErrorCode } from '../../errors/index.js';
import type { ConnectionLimitSettings } from '../edge/connections.js';
import type { RefusalSink } from '../edge/refusals.js';
import { isJsonRpc, jsonRpcError, readableId, sendError } from '../edge/replies.js';
export interface AgentLimitSettings {
  /** Sustained requests per second per agent. */
  requestsPerS: number;
  /** Requests above the sustained rate an idle agent may send at once. */
  burst: number;
  /** Requests in flight at once per agent. */
  maxInFlight: number;
  /** Open sessions per agent. */
  maxOpenSessions: number;
  /** Client sessions (`initialize`) an agent may open per minute; absent: no limit. */
  clientSessionsPerMin?: number;
}

interface AgentState {
  tokens: number;
  /** performance.now() of the last refill, ms. */
  at: number;
  inFlight: number;
  /** Sessions being opened now (not yet counted as open in the database). */
  opening: number;
}

/** Above this many tracked agents, idle ones (full bucket, nothing in flight) are forgotten (both buckets). */
const PRUNE_AT = 10_000;

export class AgentLimits {
  private readonly agents = new Map<string, AgentState>();
  /** Each `client_session_open` is an audit entry: its own bucket (ClientSessionRate below). */
  readonly clientSessions: ClientSessionRate | null;

  constructor(readonly settings: AgentLimitSettings) {
    this.clientSessions = settings.clientSessionsPerMin
      ? new ClientSessionRate(settings.clientSessionsPerMin)
      : null;
  }

  private state(agentId: string): AgentState {
    let s = this.agents.get(agentId);
    if (!s) {
      if (this.agents.size >= PRUNE_AT) this.prune();
      s = { tokens: this.settings.burst, at: performance.now(), inFlight: 0, opening: 0 };
      this.agents.set(agentId, s);
    }
    return s;
  }

  private prune(): void {
    const now = performance.now();
    for (const [id, s] of this.agents) {
      const full = s.tokens + ((now - s.at) / 1000) * this.settings.requestsPerS >= this.settings.burst;
      if (full && s.inFlight === 0 && s.opening === 0) this.agents.delete(id);
    }
  }

  /**
   * Admits one request of `agentId`: takes a token and an in-flight slot (give it back with
   * {@link release}).
   * @returns null when admitted, else the refusal's code.
   */
  admit(agentId: string): ErrorCode | null {
    const s = this.state(agentId);
    const now = performance.now();
    s.tokens = Math.min(this.settings.burst, s.tokens + ((now - s.at) / 1000) * this.settings.requestsPerS);
    s.at = now;
    if (s.tokens < 1) return 'AGENT_RATE_LIMITED';
    if (s.inFlight >= this.settings.maxInFlight) return 'AGENT_TOO_MANY_IN_FLIGHT';
    s.tokens -= 1;
    s.inFlight++;
    return null;
  }

  /** Gives back the in-flight slot of an admitted request. */
  release(agentId: string): void {
    const s = this.agents.get(agentId);
    if (s && s.inFlight > 0) s.inFlight--;
  }

  /** Whole seconds until the agent's next token (Retry-After). */
  retryAfterS(agentId: string): number {
    const s = this.agents.get(agentId);
    const missing = s ? Math.max(0, 1 - s.tokens) : 0;
    return Math.max(1, Math.ceil(missing / this.settings.requestsPerS));
  }

  /**
   * Opens a session within the agent's limit: `open` is the agent's open-session count now;
   * sessions being opened concurrently count too.
   * @returns the result of `create`, or null when the agent is at its limit.
   */
  async withSessionSlot<T>(agentId: string, open: number, create: () => Promise<T>): Promise<T | null> {
    const s = this.state(agentId);
    if (open + s.opening >= this.settings.maxOpenSessions) return null;
    s.opening++;
    try {
      return await create();
    } finally {
      s.opening--;
    }
  }
}

/** Answers a limit refusal on an agent route: a JSON-RPC error with the request's id, or a REST error. */
export function sendLimitRefusal(req: FastifyRequest, reply: FastifyReply, code: ErrorCode, message: string) {
  if (!isJsonRpc(req)) return sendError(reply, code, message);
  const body = jsonRpcError(readableId(req.body), code, message);
  return reply.code(ERRORS[code].http).type('application/json').send(body);
}

const MESSAGES: Partial<Record<ErrorCode, string>> = {
  AGENT_RATE_LIMITED: 'request rate limit reached for this agent',
  AGENT_TOO_MANY_IN_FLIGHT: 'too many requests in flight for this agent',
};

/**
 * Registers the rate and in-flight limits on the agent routes plugin: a `preHandler` (after
 * authentication; a JSON-RPC refusal carries the request's id) that admits or refuses, and
 * releases the slot when the response is done or the client went away. Long-lived streams
 * (`GET /mcp`) take a token but no in-flight slot.
 */
export function registerAgentLimits(app: FastifyInstance, limits: AgentLimits, record: RefusalSink): void {
  app.addHook('preHandler', async (req, reply) => {
    if (!req.agentId || reply.sent) return;
    const agentId = req.agentId;
    const code = limits.admit(agentId);
    if (code !== null) {
      record(agentId, code, { route: `${req.method} ${req.routeOptions.url ?? 'unknown'}` });
      if (code === 'AGENT_RATE_LIMITED') reply.header('Retry-After', String(limits.retryAfterS(agentId)));
      return sendLimitRefusal(req, reply, code, MESSAGES[code] ?? 'limit reached');
    }
    if (req.method === 'GET' && req.routeOptions.url === '/mcp') {
      limits.release(agentId);
      return;
    }
    reply.raw.once('close', () => limits.release(agentId));
  });
}

/** The app's per-agent and per-connection limits from the config's `limits` section. */
export function edgeLimits(cfg: GatewayConfig): {
  agentLimits: AgentLimits;
  connections: ConnectionLimitSettings;
} {
  const l = cfg.limits;
  return {
    agentLimits: new AgentLimits({
      requestsPerS: l.agent_requests_per_s,
      burst: l.agent_request_burst,
      maxInFlight: l.agent_max_in_flight,
      maxOpenSessions: l.agent_max_open_sessions,
      clientSessionsPerMin: l.agent_client_sessions_per_min,
    }),
    connections: {
      headersTimeoutMs: l.headers_timeout_ms,
      requestTimeoutMs: l.request_timeout_ms,
      keepAliveTimeoutMs: l.keep_alive_timeout_ms,
      maxConnections: l.max_connections,
      // Three quarters of the cap by default: the rest is headroom for authenticated agents.
      maxUnauthenticated:
        l.max_unauthenticated_connections ??
        Math.max(1, Math.min(l.max_connections - 1, Math.floor((l.max_connections * 3) / 4))),
      maxUnauthenticatedPerAddress: l.max_unauthenticated_per_address,
      unauthenticatedTimeoutMs: l.unauthenticated_timeout_ms,
    },
  };
}

/**
 * The per-agent rate of client sessions opened (docs/operations.md#limits-and-timeouts): every
 * successful `initialize` opens a client session and writes a `client_session_open` entry in the
 * gateway chain, so without a bound an agent — in dev mode, any unauthenticated client, all as
 * `dev` — could grow the audit log as fast as its request rate allows. A token bucket per agent
 * of `limits.agent_client_sessions_per_min` (its size, refilled over a minute); an `initialize`
 * beyond it is refused AGENT_CLIENT_SESSIONS_RATE_LIMITED (429, Retry-After) and goes to the
 * aggregated refusal record instead.
 */
interface Bucket {
  tokens: number;
  /** performance.now() of the last refill, ms. */
  at: number;
}

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
