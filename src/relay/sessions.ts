/**
 * Client sessions kept apart upstream (docs/spec/mcp.md#client-sessions): every gateway client
 * session (`Mcp-Session-Id`) gets its own connection, so its own upstream MCP session, to each
 * upstream it uses; its log level, subscriptions and the server-to-client requests of its
 * upstream sessions never reach another client. A request without a client session (stateless
 * 2026-07-28, or a client that did not initialise) uses the pool's shared connection, which
 * declares no client capabilities, so no upstream sends it server-to-client requests.
 *
 * A message an upstream sends on a connection without naming the request it belongs to
 * (`notifications/message`, server-to-client requests) goes to the one request of that client
 * session in flight on that connection; with none or several in flight, notifications go to the
 * client session's standalone stream and requests are refused (never delivered by guess).
 * Every notification relayed to a client passes its budget first (./notification-budget.ts).
 */
import type { Client } from '@modelcontextprotocol/sdk/client/index.js';
import {
  CreateMessageRequestSchema,
  ElicitRequestSchema,
  ListRootsRequestSchema,
  LoggingMessageNotificationSchema,
  PromptListChangedNotificationSchema,
  ResourceListChangedNotificationSchema,
  ResourceUpdatedNotificationSchema,
} from '@modelcontextprotocol/sdk/types.js';
import type { Logger } from 'pino';
import type { ClientChannel, ClientMessage, ClientSessionEvents } from '../gateway/client-channel.js';
import type { Upstream, UpstreamPool } from '../upstream/pool.js';
import type { ConnectionFor } from './federation.js';
import type { DropReason, NotificationBudget } from './notification-budget.js';

/** Told every upstream notification dropped over a client's budget. */
export type NotificationDropped = (
  agentId: string,
  detail: { upstream: string; method: string; reason: DropReason },
) => void;

/** One client request in flight on a connection: where its upstream's messages go. */
export interface InFlight {
  channel: ClientChannel;
  agentId: string;
  /** The gateway (audit) session it is recorded in, once known. */
  sessionId: string | null;
}

/** The server-to-client methods relayed to the client. */
export type ServerRequestMethod = 'sampling/createMessage' | 'elicitation/create' | 'roots/list';

/** Relays one server-to-client request (src/relay/server-requests.ts); throws McpError to refuse. */
export type ServerRequestRelay = (
  origin: { upstream: string; clientSessionId: string; inflight: InFlight | null; agentId: string },
  method: ServerRequestMethod,
  params: Record<string, unknown>,
  signal: AbortSignal,
) => Promise<Record<string, unknown>>;

interface ClientSession {
  agentId: string;
  conns: Map<string, Upstream>;
}

/** The client capabilities a client session's upstream connections declare. */
const SESSION_CAPABILITIES = { sampling: {}, elicitation: {}, roots: { listChanged: false } };

export class RelaySessions {
  private readonly clients = new Map<string, ClientSession>();
  private readonly inflight = new WeakMap<Upstream, Set<InFlight>>();
  private events: ClientSessionEvents | null = null;

  constructor(
    private readonly pool: UpstreamPool,
    private readonly log: Logger,
    private readonly relayRequest: ServerRequestRelay,
    private readonly budget: NotificationBudget,
    private readonly onDropped?: NotificationDropped,
  ) {}

  /**
   * Whether a notification from `upstream` may go to a client: `key` is its client session id,
   * or the request's channel when it has none. A dropped notification is reported, not queued.
   */
  admit(key: string | object, agentId: string, upstream: string, message: ClientMessage): boolean {
    const reason = this.budget.admit(key, Buffer.byteLength(JSON.stringify(message)));
    if (reason === null) return true;
    this.onDropped?.(agentId, { upstream, method: message.method, reason });
    return false;
  }

  /** Connects the HTTP edge's client sessions (standalone streams, end of session). */
  attach(events: ClientSessionEvents): void {
    this.events = events;
  }

  /** How a request of `channel`'s client session reaches each upstream. */
  connectionFor(agentId: string, channel: ClientChannel): ConnectionFor {
    const csid = channel.clientSessionId;
    if (csid === undefined) return (name) => this.pool.shared(name);
    return (name) => this.sessionConnection(csid, agentId, name);
  }

  /** Runs `fn` with `f` marked in flight on `conn` (see the module doc). */
  async during<T>(conn: Upstream, f: InFlight, fn: () => Promise<T>): Promise<T> {
    let set = this.inflight.get(conn);
    if (!set) {
      set = new Set();
      this.inflight.set(conn, set);
    }
    set.add(f);
    try {
      return await fn();
    } finally {
      set.delete(f);
    }
  }

  /** Client sessions with upstream connections open (for tests and metrics). */
  get size(): number {
    return this.clients.size;
  }

  private sessionConnection(csid: string, agentId: string, name: string): Upstream | undefined {
    let cs = this.clients.get(csid);
    if (!cs) {
      cs = { agentId, conns: new Map() };
      this.clients.set(csid, cs);
      this.events?.onEnd(csid, () => void this.end(csid));
    }
    // A client session belongs to the agent that opened it; another agent gets the shared path.
    if (cs.agentId !== agentId) return undefined;
    const open = cs.conns.get(name);
    if (open) return open;
    const listChanged = { method: 'notifications/tools/list_changed' };
    const conn = this.pool.openSession(
      name,
      () => {
        if (this.admit(csid, agentId, name, listChanged)) this.notify(csid, listChanged);
      },
      { capabilities: SESSION_CAPABILITIES, onClient: (c) => this.wire(c, csid, name, () => conn) },
    );
    if (conn) cs.conns.set(name, conn);
    return conn;
  }

  /** Handlers for what an upstream sends a client session's connection. */
  private wire(client: Client, csid: string, upstream: string, conn: () => Upstream | undefined): void {
    const single = (): InFlight | null => {
      const c = conn();
      const set = c ? this.inflight.get(c) : undefined;
      return set?.size === 1 ? ([...set][0] as InFlight) : null;
    };
    const agentId = () => this.clients.get(csid)?.agentId ?? '';
    client.setNotificationHandler(LoggingMessageNotificationSchema, (n) => {
      const message = { method: n.method, params: n.params as Record<string, unknown> };
      if (!this.admit(csid, agentId(), upstream, message)) return;
      const f = single();
      if (!(f?.channel.notify(message) ?? false)) this.notify(csid, message);
    });
    for (const schema of [
      ResourceUpdatedNotificationSchema,
      ResourceListChangedNotificationSchema,
      PromptListChangedNotificationSchema,
    ])
      client.setNotificationHandler(schema, (n) => {
        const message = {
          method: n.method,
          ...(n.params ? { params: n.params as Record<string, unknown> } : {}),
        };
        if (this.admit(csid, agentId(), upstream, message)) this.notify(csid, message);
      });
    for (const [schema, method] of [
      [CreateMessageRequestSchema, 'sampling/createMessage'],
      [ElicitRequestSchema, 'elicitation/create'],
      [ListRootsRequestSchema, 'roots/list'],
    ] as const)
      client.setRequestHandler(schema, (r, extra) =>
        this.relayRequest(
          { upstream, clientSessionId: csid, inflight: single(), agentId: agentId() },
          method,
          (r.params ?? {}) as Record<string, unknown>,
          extra.signal,
        ),
      );
  }

  private notify(csid: string, message: ClientMessage): void {
    if (!this.events?.notify(csid, message))
      this.log.debug({ method: message.method }, 'notification for a client session with no open stream');
  }

  /** Closes a client session's upstream connections (its upstream sessions end with them). */
  async end(csid: string): Promise<void> {
    this.budget.forget(csid);
    const cs = this.clients.get(csid);
    if (!cs) return;
    this.clients.delete(csid);
    await Promise.all([...cs.conns.values()].map((c) => c.close()));
  }

  /** Closes every client session's connections (gateway shutdown). */
  async close(): Promise<void> {
    await Promise.all([...this.clients.keys()].map((k) => this.end(k)));
  }
}
