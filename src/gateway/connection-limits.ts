/**
 * Per-connection limits of the HTTP listener (issue 11 item 6; docs/operations.md#limits-and-timeouts),
 * all Node's own HTTP server settings: the time to receive a request's headers
 * (`headersTimeout`) and the whole request with its body (`requestTimeout`), how long an idle
 * keep-alive connection is kept (`keepAliveTimeout`), and a cap on connections held at once
 * (`server.maxConnections`). Node cuts what overruns them; here each cut is answered (408, when
 * the socket still takes bytes) and recorded in the aggregated refusal record with its code.
 */
import type { IncomingMessage } from 'node:http';
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
 * (`drop`: closed at once, nothing read or answered). Call after building, before listening.
 */
export function capConnections(app: FastifyInstance, s: ConnectionLimitSettings, record: RefusalSink): void {
  app.server.maxConnections = s.maxConnections;
  app.server.on('drop', () => record(null, 'CONNECTION_LIMIT_REACHED', { route: 'connection' }));
  app.server.on('request', (req: IncomingMessage) => current.set(req.socket, req));
}
