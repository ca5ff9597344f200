/**
 * Client sessions kept apart upstream (docs/spec/mcp.md#client-sessions). A request that needs
 * no per-client upstream state goes over the pool's shared connection to the upstream, which
 * declares no client capabilities, so no upstream sends it server-to-client requests, and whose
 * log messages reach no client. A gateway client session (`Mcp-Session-Id`) gets its own
 * connection to an upstream, hence its own upstream MCP session (its own stdio process), only
 * when its state needs one:
 *
 * - `state`: the request sets upstream session state (`logging/setLevel`,
 *   `resources/subscribe`, a task-augmented `tools/call`);
 * - `call`: the request may make the upstream ask the client (`tools/call`, `resources/read`,
 *   `prompts/get`, `completion/complete`) and the client declared `sampling`, `elicitation` or
 *   `roots` in its `initialize`;
 *
 * and from then on every request of that session to that upstream uses it (its log level and
 * subscriptions hold for all of them). Per upstream at most `max_client_connections` such
 * connections are open; one more is refused with `UPSTREAM_CLIENT_CONNECTIONS_FULL`. One closes
 * when its client session ends (`DELETE`, idle for `sessions.client_idle_s`, eviction), or when
 * no request of its session used it for `sessions.client_idle_s` (an open standalone stream
 * does not keep it), its upstream state (log level, subscriptions) ending with it.
 *
 * A message an upstream sends on an own connection without naming the request it belongs to
 * (`notifications/message`, server-to-client requests) goes to the one request of that client
 * session in flight on that connection; with none or several in flight, notifications go to the
 * client session's standalone stream and requests are refused (never delivered by guess).
 * Every notification relayed to a client passes its budget first (./notification-budget.ts): the
 * lane of its client and upstream, or for progress the request's own bucket; list changes and
 * resource updates over it are coalesced and delivered later rather than dropped.
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
  TaskStatusNotificationSchema,
} from '@modelcontextprotocol/sdk/types.js';
import type { Logger } from 'pino';
import { detached } from '../tracing/mcp-spans.js';
import type { Upstream, UpstreamPool } from '../upstream/pool.js';
import type { ClientChannel, ClientMessage, ClientSessionEvents } from './channel.js';
import { ownerOf, relayedCapabilities, STATELESS_KEY } from './connection-owner.js';
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
  origin: {
    upstream: string;
    clientSessionId: string;
    inflight: InFlight | null;
    agentId: string;
    /** Sends the request on the client session's standalone stream (no request of it in flight). */
    standalone: (message: ClientMessage, signal: AbortSignal) => Promise<Record<string, unknown>>;
  },
  method: ServerRequestMethod,
  params: Record<string, unknown>,
  signal: AbortSignal,
) => Promise<Record<string, unknown>>;

interface ClientSession {
  agentId: string;
  conns: Map<string, Upstream>;
}

/** When an own connection was last picked for a request (Date.now()). */
const lastUsed = new WeakMap<Upstream, number>();

/**
 * What a request needs of its upstream connection (module doc): `list` — the session's own
 * connection when it has one, else the shared one; `call` — as `list`, but a client that
 * declared server-to-client capabilities gets its own; `state` — always its own.
 */
export type ConnectionNeed = 'list' | 'call' | 'state';

/** Why a request could not have an upstream connection of its own. */
export interface ConnectionRefusal {
  refused: { code: 'UPSTREAM_CLIENT_CONNECTIONS_FULL'; message: string; upstream: string };
}

/**
 * Default of an upstream's `max_client_connections`, by transport: a stdio connection of its own
 * is a process (tens of MB), an HTTP one an upstream MCP session.
 */
export const DEFAULT_MAX_CLIENT_CONNECTIONS = { stdio: 16, http: 256 } as const;

export class RelaySessions {
  private readonly clients = new Map<string, ClientSession>();
  /** Own connections open per upstream name, all client sessions together (the cap). */
  private readonly perUpstream = new Map<string, number>();
  private readonly inflight = new WeakMap<Upstream, Set<InFlight>>();
  private events: ClientSessionEvents | null = null;
  private sweep: NodeJS.Timeout | null = null;

  constructor(
    private readonly pool: UpstreamPool,
    private readonly log: Logger,
    private readonly relayRequest: ServerRequestRelay,
    private readonly budget: NotificationBudget,
    private readonly onDropped?: NotificationDropped,
  ) {}

  /**
   * Whether a log message from `upstream` may go to a client: `key` is its client session id, or
   * the request's channel when it has none. A dropped notification is reported, not queued.
   */
  admit(key: string | object, agentId: string, upstream: string, message: ClientMessage): boolean {
    this.watch(key);
    const reason = this.budget.admit(key, upstream, Buffer.byteLength(JSON.stringify(message)));
    if (reason === null) return true;
    this.onDropped?.(agentId, { upstream, method: message.method, reason });
    return false;
  }

  /**
   * Whether a list change or resource update from `upstream` goes to client session `csid` now.
   * Over the budget it is kept and `deliver` runs once the lane has room (one per method, or per
   * resource URI); one merged into a pending one, or with no room left, is reported as dropped.
   */
  change(
    csid: string,
    agentId: string,
    upstream: string,
    message: ClientMessage,
    deliver: () => void,
  ): boolean {
    this.watch(csid);
    const uri = message.method === 'notifications/resources/updated' ? message.params?.uri : undefined;
    const r = this.budget.coalesce(
      csid,
      upstream,
      message.method,
      typeof uri === 'string' ? uri : undefined,
      Buffer.byteLength(JSON.stringify(message)),
      deliver,
    );
    if (r === 'admitted') return true;
    if (r !== 'deferred') this.onDropped?.(agentId, { upstream, method: message.method, reason: r });
    return false;
  }

  /**
   * The admit function of one request's progress from `upstream`: a bucket of the request's own,
   * so that no other notification of the upstream (a log flood) starves it; still bounded, the
   * excess dropped and reported.
   */
  progress(agentId: string, upstream: string): (message: ClientMessage) => boolean {
    const gate = this.budget.progressGate();
    return (message) => {
      const reason = gate(Buffer.byteLength(JSON.stringify(message)));
      if (reason === null) return true;
      this.onDropped?.(agentId, { upstream, method: message.method, reason });
      return false;
    };
  }

  /** The first time a client session gets lanes, they are set to be forgotten when it ends. */
  private watch(key: string | object): void {
    if (typeof key !== 'string' || this.budget.tracks(key)) return;
    this.events?.onEnd(key, () => this.budget.forget(key));
  }

  /** Connects the HTTP edge's client sessions (standalone streams, end of session). */
  attach(events: ClientSessionEvents): void {
    this.events = events;
    this.pool.onSharedClient((upstream, client) => this.wireShared(client, upstream));
    // Own connections unused for the client idle time close, even in a live client session.
    if (this.sweep) clearInterval(this.sweep);
    this.sweep = setInterval(
      detached(() => this.closeIdle()),
      Math.max(250, Math.min(events.idleMs / 4, 60_000)),
    );
    this.sweep.unref();
  }

  /**
   * Closes every own connection no request picked for the client idle time and none is in flight
   * on (its stdio process ends); the client session's upstream state there (log level,
   * subscriptions) ends with it, and its next request is routed as for a session without one.
   */
  private closeIdle(): void {
    const idleMs = this.events?.idleMs;
    if (idleMs === undefined) return;
    const now = Date.now();
    for (const [csid, cs] of this.clients) {
      for (const [name, conn] of cs.conns) {
        if (now - (lastUsed.get(conn) ?? now) <= idleMs || this.inflight.get(conn)?.size) continue;
        cs.conns.delete(name);
        this.release(name);
        this.log.info({ upstream: name }, 'idle client connection closed');
        void conn.close();
      }
      if (cs.conns.size === 0) this.clients.delete(csid);
    }
  }

  /** One own connection to `name` fewer (the cap's count). */
  private release(name: string): void {
    const left = (this.perUpstream.get(name) ?? 1) - 1;
    if (left > 0) this.perUpstream.set(name, left);
    else this.perUpstream.delete(name);
  }

  /** The own connection, noted as used now (the idle sweep). */
  private used(conn: Upstream): Upstream {
    lastUsed.set(conn, Date.now());
    return conn;
  }

  /**
   * How a request of `channel`'s client session reaches each upstream when it needs no state of
   * its own there (listings, capabilities, routes): the session's own connection when it has
   * one, else the shared one. Never opens a connection.
   */
  connectionFor(agentId: string, channel: ClientChannel): ConnectionFor {
    const csid = ownerOf(agentId, channel)?.key;
    if (csid === undefined) return (name) => this.pool.shared(name);
    return (name) => {
      const cs = this.clients.get(csid);
      if (cs && cs.agentId !== agentId) return undefined;
      const own = cs?.conns.get(name);
      return own ? this.used(own) : this.pool.shared(name);
    };
  }

  /**
   * The connection one request of `channel`'s client session uses to reach `upstream`, by what it
   * needs (see {@link ConnectionNeed}); opens the session's own connection when needed.
   * @returns the connection; undefined for an unknown upstream or another agent's session; or
   *   the refusal when the upstream already has `max_client_connections` own connections.
   */
  connection(
    agentId: string,
    channel: ClientChannel,
    upstream: string,
    need: ConnectionNeed,
  ): Upstream | undefined | ConnectionRefusal {
    const owner = ownerOf(agentId, channel);
    const csid = owner?.key;
    const shared = this.pool.shared(upstream);
    if (csid === undefined || !shared) return shared;
    const cs = this.clients.get(csid);
    // A client session belongs to the agent that opened it: for another agent it has no connection.
    if (cs && cs.agentId !== agentId) return undefined;
    const own = cs?.conns.get(upstream);
    if (own) return this.used(own);
    const declared = owner?.stateless ? channel.declaredCapabilities : this.events?.capabilities(csid);
    // A stateless request sets no upstream state: only a call that may ask its client gets its own.
    const wantsOwn =
      (need === 'state' && !owner?.stateless) ||
      (need === 'call' && Object.keys(relayedCapabilities(declared)).length > 0);
    if (!wantsOwn) return shared;
    const cap = shared.cfg.max_client_connections ?? DEFAULT_MAX_CLIENT_CONNECTIONS[shared.cfg.transport];
    const open = this.perUpstream.get(upstream) ?? 0;
    if (open >= cap) {
      this.log.warn(
        { upstream, cap },
        'client connection refused: the upstream has its cap of own connections',
      );
      return {
        refused: {
          code: 'UPSTREAM_CLIENT_CONNECTIONS_FULL',
          message: `upstream ${upstream} already has ${cap} client sessions with connections of their own (max_client_connections); end one (DELETE /mcp) or retry later`,
          upstream,
        },
      };
    }
    return this.openOwn(csid, agentId, upstream, declared);
  }

  /**
   * Whether `channel`'s client session declared a capability its own connections relay
   * (sampling, elicitation, roots): an upstream may then offer it tools it offers no other client.
   */
  relaysFor(channel: ClientChannel): boolean {
    const csid = channel.clientSessionId;
    const declared = csid === undefined ? channel.declaredCapabilities : this.events?.capabilities(csid);
    return Object.keys(relayedCapabilities(declared)).length > 0;
  }

  /**
   * The client's `notifications/roots/list_changed`: told to every upstream the client session
   * has a connection of its own to (the only ones that were told of its roots).
   */
  rootsChanged(agentId: string, clientSessionId: string): void {
    const cs = this.clients.get(clientSessionId);
    if (!cs || cs.agentId !== agentId) return;
    for (const [name, conn] of cs.conns)
      void conn.client?.sendRootsListChanged().catch((e: unknown) => {
        this.log.debug({ upstream: name, err: (e as Error).message }, 'roots list change not delivered');
      });
  }

  /** Own connections open to `upstream` (all client sessions), for tests and metrics. */
  ownConnections(upstream: string): number {
    return this.perUpstream.get(upstream) ?? 0;
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

  /** Client sessions with upstream connections of their own open (for tests and metrics). */
  get size(): number {
    return this.clients.size;
  }

  private openOwn(
    csid: string,
    agentId: string,
    name: string,
    declared: Record<string, unknown> | undefined,
  ): Upstream | undefined {
    let cs = this.clients.get(csid);
    if (!cs) {
      cs = { agentId, conns: new Map() };
      this.clients.set(csid, cs);
      // Stateless requests' connections end only when idle (no session ends them).
      if (!csid.startsWith(STATELESS_KEY)) this.events?.onEnd(csid, () => void this.end(csid));
    }
    const capabilities = relayedCapabilities(declared);
    const listChanged = { method: 'notifications/tools/list_changed' };
    const conn = this.pool.openSession(
      name,
      () => {
        const deliver = () => this.notify(csid, listChanged);
        if (this.change(csid, agentId, name, listChanged, deliver)) deliver();
      },
      { capabilities, onClient: (c) => this.wire(c, csid, name, () => conn, capabilities) },
    );
    if (conn) {
      cs.conns.set(name, this.used(conn));
      this.perUpstream.set(name, (this.perUpstream.get(name) ?? 0) + 1);
    }
    return conn;
  }

  /**
   * A resource or prompt list change on a shared connection concerns every client session that
   * reaches the upstream through it: it goes to each one's standalone stream, not to those with
   * a connection of their own there (which hear it on that one), each within its notification
   * budget (coalesced over it). It carries no client's data.
   */
  private wireShared(client: Client, upstream: string): void {
    for (const schema of [ResourceListChangedNotificationSchema, PromptListChangedNotificationSchema])
      client.setNotificationHandler(schema, (n) => {
        const message = { method: n.method };
        this.events?.notifyAll(
          message,
          (csid, agentId) =>
            !this.clients.get(csid)?.conns.has(upstream) &&
            this.change(csid, agentId, upstream, message, () => this.notify(csid, message)),
        );
      });
  }

  /** Handlers for what an upstream sends a client session's connection. */
  private wire(
    client: Client,
    csid: string,
    upstream: string,
    conn: () => Upstream | undefined,
    capabilities: Record<string, unknown>,
  ): void {
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
    // A task's status (2025-11-25 tasks) goes where its log messages would: the one request in
    // flight, else the standalone stream (the task outlives the request that created it).
    client.setNotificationHandler(TaskStatusNotificationSchema, (n) => {
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
        const deliver = () => this.notify(csid, message);
        if (this.change(csid, agentId(), upstream, message, deliver)) deliver();
      });
    // Only what the client declared: the upstream is told no more, and the SDK refuses a handler
    // for a capability its client did not declare.
    for (const [schema, method, capability] of [
      [CreateMessageRequestSchema, 'sampling/createMessage', 'sampling'],
      [ElicitRequestSchema, 'elicitation/create', 'elicitation'],
      [ListRootsRequestSchema, 'roots/list', 'roots'],
    ] as const)
      if (capabilities[capability] !== undefined)
        client.setRequestHandler(schema, (r, extra) =>
          this.relayRequest(
            {
              upstream,
              clientSessionId: csid,
              inflight: single(),
              agentId: agentId(),
              standalone: (message, signal) =>
                this.events
                  ? this.events.request(csid, message, { signal })
                  : Promise.reject(new Error('no client sessions attached')),
            },
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

  /** Closes a client session's upstream connections (its upstream sessions and processes end with them). */
  async end(csid: string): Promise<void> {
    this.budget.forget(csid);
    const cs = this.clients.get(csid);
    if (!cs) return;
    this.clients.delete(csid);
    for (const name of cs.conns.keys()) this.release(name);
    await Promise.all([...cs.conns.values()].map((c) => c.close()));
  }

  /** Closes every client session's connections (gateway shutdown). */
  async close(): Promise<void> {
    if (this.sweep) clearInterval(this.sweep);
    await Promise.all([...this.clients.keys()].map((k) => this.end(k)));
  }
}
