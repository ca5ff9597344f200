/**
 * Per-connection limits of the HTTP listener (docs/operations.md#limits-and-timeouts). Node's own
 * HTTP server settings: the time to receive a request's headers (`headersTimeout`) and the whole
 * request with its body (`requestTimeout`), how long an idle keep-alive connection is kept
 * (`keepAliveTimeout`), and a cap on connections held at once (`server.maxConnections`). Node cuts
 * what overruns them; here each cut is answered (408, when the socket still takes bytes) and
 * recorded in the aggregated refusal record with its code. And the gateway's own budget and
 * deadline for connections that have not authenticated (`UnauthenticatedConnections`), so that
 * unauthenticated sockets, idle or sending slowly, cannot hold the whole cap.
 */
import type { IncomingMessage, ServerResponse } from 'node:http';
import type { Socket } from 'node:net';
import { Server as TlsServer } from 'node:tls';
import type { FastifyInstance } from 'fastify';
import type { ErrorCode } from '../../errors/index.js';
import type { RefusalSink } from './refusals.js';

export interface ConnectionLimitSettings {
  /** ms to receive a request's headers. */
  headersTimeoutMs: number;
  /** ms to receive a whole request (headers and body). */
  requestTimeoutMs: number;
  /** ms an idle keep-alive connection is kept between requests. */
  keepAliveTimeoutMs: number;
  /** Connections held at once. */
  maxConnections: number;
  /** Connections not yet authenticated held at once, all addresses; below `maxConnections`. */
  maxUnauthenticated: number;
  /** Connections not yet authenticated held at once from one source address. */
  maxUnauthenticatedPerAddress: number;
  /** ms a connection may stay unauthenticated before it is closed. */
  unauthenticatedTimeoutMs: number;
}

/** The request last begun on each socket: tells a headers timeout from a body timeout. */
const current = new WeakMap<Socket, IncomingMessage>();

/**
 * The fastify options that set the timeouts, and the client-error handler that answers and
 * records a timeout. Node checks the timeouts every `connectionsCheckingInterval` ms: at most
 * a quarter of the headers timeout (≤ 1 s), so a cut comes within the timeout plus that.
 */
export function connectionOptions(s: ConnectionLimitSettings, record: () => RefusalSink) {
  return {
    http: {
      headersTimeout: s.headersTimeoutMs,
      requestTimeout: s.requestTimeoutMs,
      connectionsCheckingInterval: Math.max(50, Math.min(1000, Math.floor(s.headersTimeoutMs / 4))),
    },
    requestTimeout: s.requestTimeoutMs,
    keepAliveTimeout: s.keepAliveTimeoutMs,
    clientErrorHandler(err: Error & { code?: string }, socket: Socket) {
      if (err.code !== 'ERR_HTTP_REQUEST_TIMEOUT') {
        answerClientError(err, socket);
        return;
      }
      const req = current.get(socket);
      const code: ErrorCode = req && !req.complete ? 'REQUEST_BODY_TIMEOUT' : 'REQUEST_HEADERS_TIMEOUT';
      record()(null, code, {
        route: code === 'REQUEST_BODY_TIMEOUT' ? `${req?.method} (body)` : 'connection',
      });
      const message =
        code === 'REQUEST_BODY_TIMEOUT'
          ? `the request did not arrive within ${s.requestTimeoutMs} ms`
          : `the request headers did not arrive within ${s.headersTimeoutMs} ms`;
      writeAndClose(socket, 408, code, message);
    },
  };
}

/** Other client errors (malformed HTTP, oversized headers): answered as fastify would, in cmcp's format. */
function answerClientError(err: Error & { code?: string }, socket: Socket): void {
  if (err.code === 'ECONNRESET' || socket.destroyed) return;
  if (err.code === 'HPE_HEADER_OVERFLOW') writeAndClose(socket, 431, 'INVALID_REQUEST', 'headers too large');
  else writeAndClose(socket, 400, 'INVALID_REQUEST', 'malformed HTTP request');
}

function writeAndClose(socket: Socket, status: number, code: ErrorCode, message: string): void {
  if (socket.writable && !socket.destroyed) {
    const body = JSON.stringify({ error: { error_code: code, message } });
    const reason =
      status === 408 ? 'Request Timeout' : status === 431 ? 'Request Header Fields Too Large' : 'Bad Request';
    socket.end(
      `HTTP/1.1 ${status} ${reason}\r\nContent-Type: application/json\r\nContent-Length: ${Buffer.byteLength(body)}\r\nConnection: close\r\n\r\n${body}`,
    );
  }
  socket.destroySoon?.();
  setTimeout(() => socket.destroy(), 1000).unref();
}

/**
 * Sets the connection cap on the app's server and records each connection Node refused over it
 * (`drop`: closed at once, nothing read or answered), and keeps the budget and deadline of
 * connections not yet authenticated. Call after building, before listening.
 */
export function capConnections(app: FastifyInstance, s: ConnectionLimitSettings, record: RefusalSink): void {
  app.server.maxConnections = s.maxConnections;
  app.server.on('drop', () => record(null, 'CONNECTION_LIMIT_REACHED', { route: 'connection' }));
  app.server.on('request', (req: IncomingMessage) => current.set(req.socket, req));
  const pending = new UnauthenticatedConnections(s, record);
  // Over TLS a request's socket is the TLSSocket of 'secureConnection', not the TCP socket of
  // 'connection': the budget tracks the socket the authentication hook will name.
  const accepted = app.server instanceof TlsServer ? 'secureConnection' : 'connection';
  app.server.on(accepted, (socket: Socket) => pending.accept(socket));
  app.server.on('request', (req: IncomingMessage, res: ServerResponse) =>
    pending.requestBegan(req.socket, res),
  );
  // After every authentication hook (all run at onRequest) and before the body is read: a
  // request that passed one makes its connection authenticated for good.
  app.addHook('preParsing', async (req) => {
    if (req.agentId || req.operatorId || req.consoleLogin) pending.authenticated(req.raw.socket);
  });
}

/**
 * The key a connection's address is counted under for the per-address budget: an IPv4 address
 * as is (an IPv4-mapped IPv6 address as its IPv4 address), an IPv6 address by its /64 prefix,
 * since one client is usually handed a whole /64 and could otherwise use a fresh address for
 * every connection.
 */
export function addressKey(address: string): string {
  const bare = address.replace(/%.*$/, '').toLowerCase();
  if (!bare.includes(':')) return bare;
  // A trailing dotted IPv4 part stands for the last two groups.
  const dotted = /^(.*:)(\d+)\.(\d+)\.(\d+)\.(\d+)$/.exec(bare);
  const hex = dotted
    ? `${dotted[1]}${((Number(dotted[2]) << 8) | Number(dotted[3])).toString(16)}:${((Number(dotted[4]) << 8) | Number(dotted[5])).toString(16)}`
    : bare;
  const [head = '', tail] = hex.split('::');
  const front = head ? head.split(':') : [];
  const back = tail ? tail.split(':') : [];
  const groups =
    tail === undefined
      ? front
      : [...front, ...Array(Math.max(0, 8 - front.length - back.length)).fill('0'), ...back];
  const n = groups.map((g) => Number.parseInt(g, 16) || 0);
  if (n.length !== 8) return bare;
  const [, , , , , six = 0, hi = 0, lo = 0] = n;
  if (n.slice(0, 5).every((g) => g === 0) && six === 0xffff)
    return [hi >> 8, hi & 255, lo >> 8, lo & 255].join('.');
  return `${n
    .slice(0, 4)
    .map((g) => g.toString(16))
    .join(':')}::/64`;
}

/**
 * A connection accepted this recently is not chosen for eviction while an older one can be: a
 * real agent's new connection authenticates within milliseconds of being accepted (its token is
 * in the headers of its first request), and this is its time to do so.
 */
const YOUNG_MS = 1000;

/**
 * After its deadline an unauthenticated connection may finish the one answer it is being given
 * (or, idle after answers, be sent one more request and its answer) within this long; then it is
 * destroyed. The answers open to unauthenticated requests (401, 413, health, the login page) are
 * small: they are handed to the kernel at once.
 */
const ANSWER_GRACE_MS = 1000;

/** One connection that has not authenticated yet. */
interface Pending {
  socket: Socket;
  /** The key of its address in the per-address budget (`addressKey`). */
  address: string;
  /** When it was accepted (`Date.now()`). */
  since: number;
  /** Requests begun on it and not yet answered. */
  busy: number;
  /** Requests begun on it so far. */
  requests: number;
  /** The response last begun on it. */
  res: ServerResponse | null;
  /** Its deadline has passed: every later answer on it closes it, and it has a grace left at most. */
  expired: boolean;
  /** Its grace after the deadline has begun: it is not extended. */
  graced: boolean;
  timer: NodeJS.Timeout;
}

/**
 * The budget of connections that have not authenticated, so that unauthenticated sockets (from
 * one address or many, idle or sending slowly) cannot fill `maxConnections` and lock agents out.
 * Every connection is unauthenticated when accepted, before any byte is read, and stays so until
 * a request on it passes an agent or operator check, which happens on its headers, before its
 * body is read.
 *
 * Over the budget, in total or for the socket's address key, an older connection is closed, never
 * the new one. Connections accepted more than `YOUNG_MS` ago go first, the oldest first: those
 * that never sent a request, then idle ones, then busy ones (a request being received or
 * answered); only when every one is younger is the oldest of them closed. A real agent's new
 * connection is unauthenticated only until its first request's headers are read, milliseconds:
 * closing older connections, busy or not, lets it through, while closing the new one would lock
 * every new agent connection out for as long as a flood holds its sockets, idle or busy
 * receiving a slow body. A busy unauthenticated connection older than `YOUNG_MS` is rarely an
 * agent's: only one whose JWT check waits on a slow JWKS fetch.
 *
 * At its deadline (`unauthenticatedTimeoutMs` after acceptance, busy or not) a connection no
 * request has authenticated on is destroyed if it never sent a request, or if a request on it is
 * still being received (a slow body, also one being discarded after its refusal was answered).
 * One whose complete request is being answered may finish that answer, with `Connection: close`
 * when its headers are not sent yet, within `ANSWER_GRACE_MS`. One idle after complete
 * unauthenticated exchanges (a health probe on a keep-alive connection) is answered with
 * `Connection: close` from then on and left to the keep-alive timeout, whose `Keep-Alive` hint
 * the client knows, so it is not cut under a request the client sends just then; a request begun
 * on it gets `ANSWER_GRACE_MS`, and it is destroyed at the keep-alive timeout past the deadline
 * at the latest (a trickle of header bytes keeps Node's idle timer from firing).
 */
class UnauthenticatedConnections {
  /** Insertion order is acceptance order: the first one is the oldest one. */
  private readonly all = new Map<Socket, Pending>();
  private readonly byAddress = new Map<string, Map<Socket, Pending>>();

  constructor(
    private readonly s: ConnectionLimitSettings,
    private readonly record: RefusalSink,
  ) {}

  /** A connection was accepted: counted, given its deadline, and the budgets kept. */
  accept(socket: Socket): void {
    const address = addressKey(socket.remoteAddress ?? 'unknown');
    const p: Pending = {
      socket,
      address,
      since: Date.now(),
      busy: 0,
      requests: 0,
      res: null,
      expired: false,
      graced: false,
      timer: setTimeout(() => this.deadline(p), this.s.unauthenticatedTimeoutMs).unref(),
    };
    this.all.set(socket, p);
    const mine = this.byAddress.get(address) ?? new Map<Socket, Pending>();
    this.byAddress.set(address, mine);
    mine.set(socket, p);
    socket.once('close', () => this.forget(p));
    if (mine.size > this.s.maxUnauthenticatedPerAddress) this.evictFrom(mine, p);
    if (this.all.size > this.s.maxUnauthenticated) this.evictFrom(this.all, p);
  }

  /** A request began on `socket`: not idle until it is answered. */
  requestBegan(socket: Socket, res: ServerResponse): void {
    const p = this.all.get(socket);
    if (!p) return;
    p.busy++;
    p.requests++;
    p.res = res;
    if (p.expired) {
      res.setHeader('Connection', 'close');
      this.graceThenClose(p);
    }
    res.once('close', () => {
      p.busy--;
      if (p.res === res) p.res = null;
    });
  }

  /** A request on `socket` passed authentication: no longer counted or timed. */
  authenticated(socket: Socket): void {
    const p = this.all.get(socket);
    if (p) this.forget(p);
  }

  /**
   * Closes one connection of `pool` other than `newest`: of those older than `YOUNG_MS`, the
   * oldest that never sent a request, else the oldest idle, else the oldest busy; else the
   * oldest of the young ones.
   */
  private evictFrom(pool: Map<Socket, Pending>, newest: Pending): void {
    const old = Date.now() - YOUNG_MS;
    let fresh: Pending | null = null;
    let idle: Pending | null = null;
    let busy: Pending | null = null;
    let young: Pending | null = null;
    for (const q of pool.values()) {
      if (q === newest || q.socket.destroyed) continue;
      if (q.since > old) young ??= q;
      else if (q.busy > 0) busy ??= q;
      else if (q.requests > 0) idle ??= q;
      else {
        fresh = q;
        break;
      }
    }
    const victim = fresh ?? idle ?? busy ?? young;
    // None: the others are closing already, and their close events will bring the count down.
    if (victim) this.close(victim, 'UNAUTHENTICATED_CONNECTION_LIMIT');
  }

  private deadline(p: Pending): void {
    if (this.all.get(p.socket) !== p) return;
    p.expired = true;
    const req = current.get(p.socket);
    if (p.requests === 0 || (req && !req.complete)) {
      this.close(p, 'UNAUTHENTICATED_CONNECTION_TIMEOUT');
      return;
    }
    if (p.busy > 0) {
      if (p.res && !p.res.headersSent) p.res.setHeader('Connection', 'close');
      this.graceThenClose(p);
      return;
    }
    p.timer = setTimeout(() => this.expire(p), this.s.keepAliveTimeoutMs).unref();
  }

  /** From now, `ANSWER_GRACE_MS` at most until `p` is destroyed (an earlier end stays). */
  private graceThenClose(p: Pending): void {
    if (p.graced) return;
    p.graced = true;
    clearTimeout(p.timer);
    p.timer = setTimeout(() => this.expire(p), ANSWER_GRACE_MS).unref();
  }

  private expire(p: Pending): void {
    if (this.all.get(p.socket) === p) this.close(p, 'UNAUTHENTICATED_CONNECTION_TIMEOUT');
  }

  /** Closes a connection unanswered (as Node closes one over the global cap) and records why. */
  private close(p: Pending, code: ErrorCode): void {
    this.forget(p);
    p.socket.destroy();
    this.record(null, code, { route: 'connection' });
  }

  private forget(p: Pending): void {
    if (this.all.get(p.socket) !== p) return;
    clearTimeout(p.timer);
    this.all.delete(p.socket);
    const mine = this.byAddress.get(p.address);
    mine?.delete(p.socket);
    if (mine?.size === 0) this.byAddress.delete(p.address);
  }
}
