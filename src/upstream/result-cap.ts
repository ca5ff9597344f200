/**
 * The result-size cap of one upstream call (C-MCP-4): per-call state carried in
 * AsyncLocalStorage, and a fetch for the SDK's Streamable HTTP transport that stops reading a
 * response body at the cap and carries the W3C `traceparent` of the active span.
 *
 * A POST (every MCP message the SDK sends) goes through undici's `request` API rather than
 * fetch: one buffer written with its Content-Length instead of a chunked web-stream body, and
 * a JSON answer read into one buffer at once; only an event stream stays a web stream (the SDK
 * parses it as one). The SDK still gets a WHATWG `Response`.
 */
import { AsyncLocalStorage } from 'node:async_hooks';
import type { Readable } from 'node:stream';
import { CmcpError } from '@cmcp/verify/errors/index';
import { type Dispatcher, request } from 'undici';
import { withTraceContext } from '../tracing/propagate.js';

/** Default result cap (C-MCP-4): 2 MiB. */
export const DEFAULT_MAX_RESULT_BYTES = 2 * 1024 * 1024;

/** Per-call state shared with the capped fetch and the stdio watcher. */
export interface CallContext {
  /** This call's own response passed the result cap. */
  overflowed: boolean;
  /** The connection was cut because another call's response passed the cap. */
  cutOff: boolean;
  /**
   * Fails the call at once: its transport died under it (the HTTP response body broke off,
   * the stdio child exited). Set by the call; absent outside one.
   */
  fail?: (reason: string) => void;
  /**
   * Aborts the waiting request when its response passes the cap: an SSE response cut at the
   * cap is not a closed connection to the SDK, which would otherwise wait for the timeout.
   */
  stop?: AbortController;
  /** JSON-RPC id of the call's request as sent upstream (src/upstream/answers.ts). */
  requestId?: string | number;
  /** A response with that id arrived: the upstream answered (result or JSON-RPC error). */
  answered?: boolean;
  /** Told each `notifications/progress` for that request, in arrival order (answers.ts). */
  onprogress?: (progress: { progress: number; total?: number; message?: string }) => void;
}

export const callContext = new AsyncLocalStorage<CallContext>();

/** Thrown into a capped response body when it passes the cap. */
export class ResultTooLargeError extends CmcpError {
  declare readonly code: 'UPSTREAM_RESULT_TOO_LARGE';
  constructor(message: string) {
    super('UPSTREAM_RESULT_TOO_LARGE', message);
    this.name = 'ResultTooLargeError';
  }
}

/** The first `code` along an error's cause chain (e.g. ECONNRESET, UND_ERR_SOCKET). */
function errorCode(e: unknown): string {
  let cur: unknown = e;
  for (let i = 0; i < 5 && cur; i++) {
    const c = (cur as { code?: unknown }).code;
    if (typeof c === 'string') return c;
    cur = (cur as { cause?: unknown }).cause;
  }
  return 'transport error';
}

/** Statuses whose response has no body (a `Response` refuses one). */
const NULL_BODY_STATUS = new Set([101, 103, 204, 205, 304]);

function requestHeaders(h: RequestInit['headers']): Record<string, string> {
  return Object.fromEntries(h instanceof Headers ? h : new Headers(h));
}

function responseHeaders(h: Dispatcher.ResponseData['headers']): Headers {
  const out = new Headers();
  for (const [k, v] of Object.entries(h)) {
    if (v === undefined) continue;
    if (Array.isArray(v)) for (const x of v) out.append(k, x);
    else out.append(k, v);
  }
  return out;
}

/** A body that fails on its first read with `e` (what the SDK's read of the response sees). */
function failing(e: unknown): ReadableStream<Uint8Array> {
  return new ReadableStream({ start: (ctrl) => ctrl.error(e) });
}

type Capped = {
  cap: number;
  onOverflow: (ctx: CallContext | undefined) => void;
  ctx: CallContext | undefined;
};

/**
 * A whole (non-streamed) response body, read at once up to the cap. Past the cap the
 * connection is destroyed (the rest is not drained) and the body read fails; a connection lost
 * before the end fails the call at once (issue 11 item 8).
 */
async function readCapped(body: Readable, c: Capped): Promise<Uint8Array | ReadableStream<Uint8Array>> {
  const chunks: Buffer[] = [];
  let seen = 0;
  try {
    for await (const chunk of body as AsyncIterable<Buffer>) {
      seen += chunk.byteLength;
      if (seen > c.cap) {
        c.onOverflow(c.ctx);
        body.destroy();
        return failing(new ResultTooLargeError(`response exceeds ${c.cap} bytes`));
      }
      chunks.push(chunk);
    }
  } catch (e) {
    c.ctx?.fail?.(`connection lost: ${errorCode(e)}`);
    return failing(e);
  }
  return chunks.length === 1 ? (chunks[0] as Buffer) : Buffer.concat(chunks, seen);
}

/** An event-stream body as a web stream, stopped at the cap (long responses stream as they come). */
function streamCapped(body: Readable, c: Capped): ReadableStream<Uint8Array> {
  const it = (body as AsyncIterable<Buffer>)[Symbol.asyncIterator]();
  let seen = 0;
  return new ReadableStream<Uint8Array>({
    async pull(ctrl) {
      let chunk: IteratorResult<Buffer>;
      try {
        chunk = await it.next();
      } catch (e) {
        // A reset or a connection closed before the response ended: no answer will come on
        // this response, so the call fails now instead of at its timeout (issue 11 item 8).
        c.ctx?.fail?.(`connection lost: ${errorCode(e)}`);
        throw e;
      }
      if (chunk.done) {
        ctrl.close();
        return;
      }
      seen += chunk.value.byteLength;
      if (seen > c.cap) {
        c.onOverflow(c.ctx);
        body.destroy();
        ctrl.error(new ResultTooLargeError(`response exceeds ${c.cap} bytes`));
        return;
      }
      ctrl.enqueue(chunk.value);
    },
    cancel() {
      body.destroy();
    },
  });
}

/** One POST through undici's request API, answered as a WHATWG Response (module doc). */
async function post(url: string, init: RequestInit, c: Capped, dispatcher?: Dispatcher): Promise<Response> {
  const res = await request(url, {
    method: 'POST',
    headers: requestHeaders(init.headers),
    body: init.body as string | Uint8Array | null,
    ...(init.signal ? { signal: init.signal } : {}),
    ...(dispatcher ? { dispatcher } : {}),
  });
  const headers = responseHeaders(res.headers);
  const status = res.statusCode;
  if (NULL_BODY_STATUS.has(status)) {
    res.body.destroy();
    return new Response(null, { status, headers });
  }
  const type = (headers.get('content-type') ?? '').split(';')[0]?.trim().toLowerCase();
  const body = type === 'text/event-stream' ? streamCapped(res.body, c) : await readCapped(res.body, c);
  return new Response(body, { status, headers });
}

/**
 * A fetch for the SDK's Streamable HTTP transport that stops reading a POST response body at
 * `cap` bytes (C-MCP-4): the connection is closed, the read errors, and `onOverflow` is told.
 * Long-lived GET event streams are not capped (they carry many messages over time).
 */
export function cappedFetch(
  cap: number,
  onOverflow: (ctx: CallContext | undefined) => void,
  /** The upstream's own fetch and dispatcher (its TLS settings, credentials.ts); default Node's / undici's. */
  base: typeof fetch = fetch,
  dispatcher?: Dispatcher,
): typeof fetch {
  return async (input, traceless) => {
    // W3C traceparent of the active span (none when tracing is off).
    const init = withTraceContext(traceless);
    const ctx = callContext.getStore();
    const body = init?.body;
    const plain = typeof body === 'string' || body instanceof Uint8Array;
    if ((init?.method ?? 'GET').toUpperCase() !== 'POST' || !plain || input instanceof Request)
      return base(input, init);
    return post(String(input), init as RequestInit, { cap, onOverflow, ctx }, dispatcher);
  };
}
