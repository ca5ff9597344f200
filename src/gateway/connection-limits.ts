/**
 * Per-connection limits of the HTTP listener (docs/operations.md#limits-and-timeouts). Node's own
 * HTTP server settings: the time to receive a request's headers (`headersTimeout`) and the whole
 * request with its body (`requestTimeout`), how long an idle keep-alive connection is kept
 * (`keepAliveTimeout`), and a cap on connections held at once (`server.maxConnections`). Node cuts
 * what overruns them; here each cut is answered (408, when the socket still takes bytes) and
 * recorded in the aggregated refusal record with its code. And the gateway's own budget and
 * deadline for connections that have not authenticated (`UnauthenticatedConnections`), so that
 * idle sockets cannot hold the whole cap.
 */
import type { IncomingMessage, ServerResponse } from 'node:http';
import type { Socket } from 'node:net';
import type { ErrorCode } from '@cmcp/verify/errors/index';
import type { FastifyInstance } from 'fastify';
import type { RefusalSink } from './routes/agent.js';

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
  app.server.on('connection', (socket: Socket) => pending.accept(socket));
  app.server.on('request', (req: IncomingMessage, res: ServerResponse) =>
    pending.requestBegan(req.socket, res),
  );
  // After every authentication hook (all run at onRequest) and before the body is read: a
  // request that passed one makes its connection authenticated for good.
  app.addHook('preParsing', async (req) => {
    if (req.agentId || req.operatorId || req.consoleLogin) pending.authenticated(req.raw.socket);
  });
}

/** One connection that has not authenticated yet. */
interface Pending {
  socket: Socket;
  address: string;
  /** Requests begun on it and not yet answered. */
  busy: number;
  /** Requests begun on it so far. */
  requests: number;
  /** The response last begun on it. */
  res: ServerResponse | null;
  /** Its deadline has passed: every later answer on it closes it. */
  expired: boolean;
  timer: NodeJS.Timeout;
}

/**
 * The budget of connections that have not authenticated, so that idle sockets (from one address
 * or many) cannot fill `maxConnections` and lock agents out. Every connection is unauthenticated
 * when accepted, before any byte is read, and stays so until a request on it passes an agent or
 * operator check.
 *
 * Over the budget, in total or for the socket's address, the oldest idle one (no request being
 * answered on it; one that never sent a request first) is closed rather than the newest: a real
 * agent's new connection carries its request at once and so is never the oldest idle one for
 * long, while refusing the newest would lock every new agent connection out for as long as a
 * flood holds its sockets. Only when every unauthenticated connection is busy is the newest
 * closed.
 *
 * At its deadline a connection that never sent a request is closed. One that did is answered
 * with `Connection: close` from then on (the answer in progress included, if its headers are not
 * sent yet), and when idle is left to the keep-alive timeout, whose `Keep-Alive` hint the client
 * knows: closing it under the client could break a request the client is sending just then.
 */
class UnauthenticatedConnections {
  /** Insertion order is acceptance order: the first idle one is the oldest idle one. */
  private readonly all = new Map<Socket, Pending>();
  private readonly byAddress = new Map<string, Map<Socket, Pending>>();

  constructor(
    private readonly s: ConnectionLimitSettings,
    private readonly record: RefusalSink,
  ) {}

  /** A connection was accepted: counted, given its deadline, and the budgets kept. */
  accept(socket: Socket): void {
    const address = socket.remoteAddress ?? 'unknown';
    const p: Pending = {
      socket,
      address,
      busy: 0,
      requests: 0,
      res: null,
      expired: false,
      timer: setTimeout(() => this.deadline(p), this.s.unauthenticatedTimeoutMs).unref(),
    };
    this.all.set(socket, p);
    const mine = this.byAddress.get(address) ?? new Map<Socket, Pending>();
    this.byAddress.set(address, mine);
    mine.set(socket, p);
    socket.once('close', () => this.forget(p));
    if (mine.size > this.s.maxUnauthenticatedPerAddress) this.evictFrom(mine, p);
    if (!socket.destroyed && this.all.size > this.s.maxUnauthenticated) this.evictFrom(this.all, p);
  }

  /** A request began on `socket`: not idle until it is answered. */
  requestBegan(socket: Socket, res: ServerResponse): void {
    const p = this.all.get(socket);
    if (!p) return;
    p.busy++;
    p.requests++;
    p.res = res;
    if (p.expired) res.setHeader('Connection', 'close');
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
   * Closes the oldest idle connection of `pool` that never sent a request, else the oldest
   * idle one, else (every one busy) `newest`.
   */
  private evictFrom(pool: Map<Socket, Pending>, newest: Pending): void {
    let idle: Pending | null = null;
    let victim: Pending | null = null;
    for (const q of pool.values()) {
      if (q.busy > 0 || q.socket.destroyed) continue;
      if (q.requests === 0) {
        victim = q;
        break;
      }
      idle ??= q;
    }
    this.close(victim ?? idle ?? newest, 'UNAUTHENTICATED_CONNECTION_LIMIT');
  }

  private deadline(p: Pending): void {
    if (this.all.get(p.socket) !== p) return;
    p.expired = true;
    if (p.requests === 0) this.close(p, 'UNAUTHENTICATED_CONNECTION_TIMEOUT');
    else if (p.res && !p.res.headersSent) p.res.setHeader('Connection', 'close');
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
