/**
 * The gateway's client sessions (MCP Streamable HTTP "Session Management"): a handshake-era
 * client's `initialize` gets an `Mcp-Session-Id`; later requests carrying it are served in that
 * session (its negotiated protocol version remembered), an unknown or expired id is answered
 * 404, `DELETE /mcp` ends it, and `GET /mcp` opens its standalone SSE stream for notifications
 * that belong to no request (`list_changed`, `resources/updated`). A client session is
 * transport state, never an evidence scope (that is the gateway session, docs/spec/mcp.md).
 * Sessions belong to the agent that opened them: for anyone else an id is unknown.
 */
import { randomUUID } from 'node:crypto';
import type { ServerResponse } from 'node:http';
import { CmcpError } from '../../../errors/index.js';
import type { ClientMessage, ClientSessionEvents } from '../../../relay/channel.js';
import type { InflightRequests } from './inflight.js';
import { type ReplayLimits, type ReplayStream, ReplayStreams, resumableRevision } from './replay.js';
import { eventFrame, openEventStream, writeKeepAlive } from './stream-channel.js';

/** One client session. */
export interface ClientSession {
  readonly id: string;
  readonly agentId: string;
  /** The protocol revision `initialize` negotiated. */
  readonly protocolVersion: string;
  /** The client capabilities `initialize` declared (what the relay may ask this client). */
  readonly capabilities?: Record<string, unknown>;
  /** Date.now() of its last request. */
  lastSeen: number;
  /** The open standalone `GET /mcp` stream, if any. */
  stream: ServerResponse | null;
  readonly ended: (() => void)[];
  /** Its resumable streams (./replay.ts), when it negotiated 2025-11-25 or later; else null. */
  readonly replays: ReplayStreams | null;
  /** The ids and replay buffer of its standalone stream, once one opened (resumable sessions). */
  standalone: ReplayStream | null;
}

export interface ClientSessionOptions {
  /** A session unused this long ends (milliseconds). */
  idleMs: number;
  /** At most this many sessions per agent; opening one more ends the least recently used. */
  maxPerAgent?: number;
  /** Keep-alive comment interval on standalone streams (milliseconds). */
  keepAliveMs?: number;
  /** Told of every session opened (recorded as `client_session_open`). */
  onOpen?: (s: ClientSession, clientInfo: unknown) => void;
  /** Where the answers to requests sent on standalone streams are awaited (absent: none are sent). */
  inflight?: InflightRequests;
  /** Resumable streams (the `streams` config section); absent: events carry no ids. */
  streams?: ReplayLimits;
}

export class ClientSessions implements ClientSessionEvents {
  private readonly sessions = new Map<string, ClientSession>();
  private readonly sweep: NodeJS.Timeout;
  private readonly keepAlive: NodeJS.Timeout;

  constructor(private readonly o: ClientSessionOptions) {
    this.sweep = setInterval(() => this.expire(), Math.max(250, Math.min(o.idleMs / 4, 60_000)));
    this.sweep.unref();
    this.keepAlive = setInterval(() => {
      for (const s of this.sessions.values()) if (s.stream) writeKeepAlive(s.stream);
    }, o.keepAliveMs ?? 15_000);
    this.keepAlive.unref();
  }

  /**
   * Opens a session for `agentId` after a successful `initialize`.
   * @param capabilities the client capabilities `initialize` declared (`params.capabilities`).
   * @returns the session, with its `Mcp-Session-Id`.
   */
  open(
    agentId: string,
    protocolVersion: string,
    clientInfo?: unknown,
    capabilities?: Record<string, unknown>,
  ): ClientSession {
    const mine = [...this.sessions.values()].filter((s) => s.agentId === agentId);
    if (mine.length >= (this.o.maxPerAgent ?? 256)) {
      mine.sort((a, b) => a.lastSeen - b.lastSeen);
      if (mine[0]) this.end(mine[0].id);
    }
    const s: ClientSession = {
      id: randomUUID(),
      agentId,
      protocolVersion,
      ...(capabilities ? { capabilities } : {}),
      lastSeen: Date.now(),
      stream: null,
      ended: [],
      replays:
        this.o.streams && resumableRevision(protocolVersion) ? new ReplayStreams(this.o.streams) : null,
      standalone: null,
    };
    this.sessions.set(s.id, s);
    this.o.onOpen?.(s, clientInfo);
    return s;
  }

  /** The agent's live session with this id (its use noted), or null: unknown, expired, ended or another agent's. */
  get(id: string, agentId: string): ClientSession | null {
    const s = this.sessions.get(id);
    if (!s || s.agentId !== agentId) return null;
    if (!s.stream && Date.now() - s.lastSeen > this.o.idleMs) {
      this.end(id);
      return null;
    }
    s.lastSeen = Date.now();
    return s;
  }

  /**
   * The agent a live session belongs to, or null (unknown, ended): for recording another
   * agent's probe of it. Its use is not noted.
   */
  ownerOf(id: string): string | null {
    return this.sessions.get(id)?.agentId ?? null;
  }

  /**
   * Attaches the standalone stream of `GET /mcp`; with `replayed` (a resumption, ./replay.ts)
   * those events are written first and the stream replaces an open one.
   * @returns false when one is already open and this is no resumption (MCP: at most one
   *   standalone stream; answered 409).
   */
  attach(s: ClientSession, raw: ServerResponse, replayed?: string[]): boolean {
    if (s.stream && !s.stream.destroyed && !s.stream.writableEnded) {
      // A client resuming its standalone stream has lost the old one, whether or not the
      // gateway noticed yet: the resumed one replaces it.
      if (!replayed) return false;
      s.stream.destroy();
    }
    s.stream = raw;
    openEventStream(raw, { 'mcp-session-id': s.id });
    if (replayed) for (const frame of replayed) raw.write(frame);
    else if (s.replays) {
      s.standalone = s.replays.open();
      raw.write(s.standalone.priming());
    }
    raw.on('close', () => {
      if (s.stream === raw) s.stream = null;
    });
    return true;
  }

  /**
   * Writes one message on the session's standalone stream (with an id, kept for replay, in a
   * resumable session). With `keep`, a notification finds its place in the replay buffer even
   * while the resumable stream is broken off (the client gets it when it resumes).
   * @returns false when it was neither written nor kept.
   */
  private write(s: ClientSession, message: Record<string, unknown>, keep = false): boolean {
    const raw = s.stream;
    if (!raw || raw.writableEnded || raw.destroyed) {
      if (!keep || !s.standalone) return false;
      s.standalone.frame(message);
      return true;
    }
    raw.write(s.standalone ? s.standalone.frame(message) : eventFrame(message));
    return true;
  }

  /** {@inheritDoc ClientSessionEvents.notify} */
  notify(clientSessionId: string, message: ClientMessage): boolean {
    const s = this.sessions.get(clientSessionId);
    return s ? this.write(s, { jsonrpc: '2.0', ...message }, true) : false;
  }

  /** {@inheritDoc ClientSessionEvents.notifyAll} */
  notifyAll(message: ClientMessage, to: (clientSessionId: string, agentId: string) => boolean): void {
    for (const s of this.sessions.values())
      if ((s.stream || s.standalone) && to(s.id, s.agentId))
        this.write(s, { jsonrpc: '2.0', ...message }, true);
  }

  /** {@inheritDoc ClientSessionEvents.request} */
  request(
    clientSessionId: string,
    message: ClientMessage,
    options: { signal?: AbortSignal } = {},
  ): Promise<Record<string, unknown>> {
    const s = this.sessions.get(clientSessionId);
    const stream = s?.stream;
    if (!s || !stream || !this.o.inflight || stream.writableEnded || stream.destroyed)
      return Promise.reject(
        new CmcpError('CLIENT_CHANNEL_UNAVAILABLE', 'the client session has no standalone stream open'),
      );
    const { id, answer, drop } = this.o.inflight.expect(s.agentId);
    const gone = () => drop(new CmcpError('CLIENT_CHANNEL_UNAVAILABLE', 'the standalone stream closed'));
    const onAbort = () => {
      this.write(s, {
        jsonrpc: '2.0',
        method: 'notifications/cancelled',
        params: { requestId: id, reason: 'request aborted' },
      });
      drop(new CmcpError('REQUEST_CANCELLED', 'the request was aborted'));
    };
    stream.once('close', gone);
    options.signal?.addEventListener('abort', onAbort, { once: true });
    if (options.signal?.aborted) onAbort();
    else this.write(s, { jsonrpc: '2.0', id, ...message });
    return answer.finally(() => {
      stream.off('close', gone);
      options.signal?.removeEventListener('abort', onAbort);
    });
  }

  /**
   * {@inheritDoc ClientSessionEvents.onEnd} An id that is not (or no longer) a live session has
   * already ended: `callback` runs at once (in a microtask), so nothing is kept for it.
   */
  onEnd(clientSessionId: string, callback: () => void): void {
    const s = this.sessions.get(clientSessionId);
    if (s) s.ended.push(callback);
    else queueMicrotask(callback);
  }

  /** {@inheritDoc ClientSessionEvents.idleMs} */
  get idleMs(): number {
    return this.o.idleMs;
  }

  /** {@inheritDoc ClientSessionEvents.capabilities} */
  capabilities(clientSessionId: string): Record<string, unknown> | undefined {
    return this.sessions.get(clientSessionId)?.capabilities;
  }

  /** Ends a session (DELETE /mcp, expiry, eviction, shutdown): its stream closes, onEnd callbacks run. */
  end(id: string): boolean {
    const s = this.sessions.get(id);
    if (!s) return false;
    this.sessions.delete(id);
    if (s.stream && !s.stream.writableEnded) s.stream.end();
    for (const cb of s.ended.splice(0)) {
      try {
        cb();
      } catch {
        // one listener's fault does not keep the others from running
      }
    }
    return true;
  }

  private expire(): void {
    const now = Date.now();
    for (const s of [...this.sessions.values()]) {
      // A client listening on its standalone stream is not idle.
      if (s.stream) s.lastSeen = now;
      else if (now - s.lastSeen > this.o.idleMs) this.end(s.id);
    }
  }

  /** Ends every session and stops the timers (gateway shutdown). */
  close(): void {
    clearInterval(this.sweep);
    clearInterval(this.keepAlive);
    for (const id of [...this.sessions.keys()]) this.end(id);
  }
}
