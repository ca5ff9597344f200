/**
 * The gateway's Streamable HTTP client transport (MCP 2025-11-25 "Transports" §Streamable HTTP),
 * implementing the SDK's `Transport` for the upstream `Client` of an HTTP upstream, on undici's
 * `request` API and eventsource-parser (./event-stream.ts): no fetch, no web streams.
 *
 * What it does, as the SDK's StreamableHTTPClientTransport did for the gateway: each message is
 * one POST (`Accept: application/json, text/event-stream`) answered by JSON, an event stream or
 * 202; `Mcp-Session-Id` is taken from any response and sent from then on, with
 * `MCP-Protocol-Version` once initialised; after `notifications/initialized` is accepted the
 * standalone GET stream is opened (405: the upstream offers none), read for list_changed,
 * resources/updated and server-to-client requests, and opened again when it ends (its
 * `Last-Event-ID` and `retry:` honoured, twice at most in a row); redirects are followed within
 * the origin only. A POST's JSON response body is capped (C-MCP-4), and so is each single event
 * of a POST's event stream (not their sum: a result after many progress events passes as over
 * stdio); each event of the GET stream is bounded alike (its sum is not: it carries many
 * messages over time), and one past the cap closes that stream, which is opened again. Added: `close` ends the upstream session (DELETE), and an
 * event stream that ends before its request's response fails that call at once (the gateway
 * resumes it with GET and `Last-Event-ID` when the upstream gave it an event id, SEP-1699,
 * ./stream-resume.ts; without one, none can come), where the SDK waited for the timeout. HTTP failures are the SDK's `StreamableHTTPError` (status in `code`), which
 * ./request.ts classifies.
 */
import { STATUS_CODES } from 'node:http';
import type { Readable } from 'node:stream';
import { StreamableHTTPError } from '@modelcontextprotocol/sdk/client/streamableHttp.js';
import type { Transport, TransportSendOptions } from '@modelcontextprotocol/sdk/shared/transport.js';
import type { JSONRPCMessage } from '@modelcontextprotocol/sdk/types.js';
import { type Dispatcher, request } from 'undici';
import { addTraceHeaders } from '../tracing/propagate.js';
import {
  type BodyCap,
  type EventSink,
  errorCode,
  jsonMessages,
  readEventStream,
  readWhole,
} from './event-stream.js';
import { type CallContext, callContext } from './result-cap.js';
import { RESUME_DEFAULT_DELAY_MS, resumeStream } from './stream-resume.js';

/** What one HTTP upstream's transport is built with (src/upstream/credentials.ts gives the first two). */
export interface HttpTransportOptions {
  /** Configured request headers (credentials), sent on every request. */
  headers?: Record<string, string>;
  /** The upstream's own TLS dispatcher (absent: undici's global one). */
  dispatcher?: Dispatcher;
  /**
   * Result cap, bytes (C-MCP-4): a JSON response body, and each single event of an event-stream
   * response (the result message among them); the progress and log events before the result
   * do not count against it.
   */
  maxResultBytes: number;
  /** Told when a POST's response passed the cap, with the call it belongs to (if any). */
  onOverflow: (ctx: CallContext | undefined) => void;
  /** Bearer tokens of a protected upstream (./oauth/): sent on each request, renewed on a challenge. */
  authorizer?: BearerAuthorizer;
}

/** What the transport asks of an upstream's OAuth client (src/upstream/oauth/authorizer.ts). */
export interface BearerAuthorizer {
  /** The `Authorization` value to send, or undefined. */
  authorization(): Promise<string | undefined>;
  /** Answers a 401 or a 403 `insufficient_scope` (resolves: send again once). @throws why not. */
  challenged(status: number, wwwAuthenticate: string | undefined, sent: string | undefined): Promise<void>;
}

/** A 401, or a 403 whose challenge says `insufficient_scope` (RFC 6750 §3.1). */
function challenge(res: Response): boolean {
  if (res.statusCode === 401) return true;
  return res.statusCode === 403 && /insufficient_scope/.test(header(res, 'www-authenticate') ?? '');
}

/** The DELETE that ends the upstream session on close waits this long at most, ms. */
export const SESSION_DELETE_TIMEOUT_MS = 2000;
/** The standalone stream is opened again after 1 s, growing 1.5× to 30 s, at most 2 times in a row (the SDK's defaults). */
const REOPEN = { firstMs: 1000, maxMs: 30_000, factor: 1.5, tries: 2 };
const MAX_REDIRECTS = 5;
const REDIRECTS = new Set([301, 302, 303, 307, 308]);

type Response = Dispatcher.ResponseData;

function header(res: Response, name: string): string | undefined {
  const v = res.headers[name];
  return Array.isArray(v) ? v[0] : v;
}

/** The media type of a Content-Type, lower case, without parameters (RFC 9110 §8.3.1). */
function mediaType(res: Response): string {
  return (header(res, 'content-type') ?? '').split(';')[0]?.trim().toLowerCase() ?? '';
}

/** Same scheme, host and port, or the https form of an http URL on default ports (the SDK's rule). */
function withinOrigin(from: URL, to: URL): boolean {
  if (from.protocol === to.protocol && from.hostname === to.hostname && from.port === to.port) return true;
  return (
    from.hostname === to.hostname &&
    from.protocol === 'http:' &&
    to.protocol === 'https:' &&
    !from.port &&
    !to.port
  );
}

/** Where a redirect response points, if it is one. */
function redirectTarget(res: Response, from: URL): URL | undefined {
  const location = REDIRECTS.has(res.statusCode) ? header(res, 'location') : undefined;
  if (!location) return undefined;
  try {
    return new URL(location, from);
  } catch {
    return undefined;
  }
}

/** One Streamable HTTP connection (one upstream MCP session). See the module comment. */
export class UpstreamHttpTransport implements Transport {
  onclose?: Transport['onclose'];
  onerror?: Transport['onerror'];
  onmessage?: Transport['onmessage'];
  private session: string | undefined;
  /** The session id the upstream answered 404 for (expired: no DELETE on close). */
  private expired: string | undefined;
  private protocol: string | undefined;
  private readonly headers: Record<string, string> = {};
  private running: AbortController | null = null;
  private reopenTimer: NodeJS.Timeout | undefined;
  private retryMs: number | undefined;

  constructor(
    private readonly url: URL,
    private readonly o: HttpTransportOptions,
  ) {
    for (const [k, v] of Object.entries(o.headers ?? {})) this.headers[k.toLowerCase()] = v;
  }

  get sessionId(): string | undefined {
    return this.session;
  }

  get protocolVersion(): string | undefined {
    return this.protocol;
  }

  setProtocolVersion(version: string): void {
    this.protocol = version;
  }

  async start(): Promise<void> {
    if (this.running) throw new Error('UpstreamHttpTransport already started');
    this.running = new AbortController();
  }

  /**
   * POSTs one message; a request's answer reaches `onmessage` (a JSON answer before this
   * resolves, an event stream as it arrives).
   * @throws StreamableHTTPError for an HTTP status other than 2xx (404: the session expired),
   *   ResultTooLargeError past the cap, undici's error when the request failed.
   */
  async send(message: JSONRPCMessage, _options?: TransportSendOptions): Promise<void> {
    try {
      await this.post(message);
    } catch (e) {
      this.onerror?.(e as Error);
      throw e;
    }
  }

  private async post(message: JSONRPCMessage): Promise<void> {
    const ctx = callContext.getStore();
    const sent = this.session;
    const res = await this.exchange(
      'POST',
      { 'content-type': 'application/json', accept: 'application/json, text/event-stream' },
      JSON.stringify(message),
    );
    const sid = header(res, 'mcp-session-id');
    if (sid) this.session = sid;
    const cap: BodyCap = { bytes: this.o.maxResultBytes, ctx, onOverflow: this.o.onOverflow };
    if (res.statusCode < 200 || res.statusCode > 299) {
      // The session id is kept (every later request meets the same 404 until the owner
      // initialises a new session: a request never goes out session-less); an expired session
      // is not ended again on close.
      if (res.statusCode === 404 && sent !== undefined && this.session === sent) this.expired = sent;
      const text = await readWhole(res.body, cap).then(
        (b) => b.toString('utf8'),
        () => null,
      );
      throw new StreamableHTTPError(
        res.statusCode,
        `Error POSTing to endpoint: ${this.refusal(res) ?? text}`,
      );
    }
    const id = 'method' in message && 'id' in message ? message.id : undefined;
    if (res.statusCode === 202 || id === undefined) {
      await res.body.dump();
      if (res.statusCode === 202 && 'method' in message && message.method === 'notifications/initialized')
        this.openStandalone(undefined, 0);
      return;
    }
    const type = mediaType(res);
    if (type === 'text/event-stream') {
      void this.readPostStream(res.body, id, cap);
      return;
    }
    if (type !== 'application/json') {
      res.body.destroy();
      throw new StreamableHTTPError(-1, `Unexpected content type: ${header(res, 'content-type')}`);
    }
    const messages = jsonMessages((await readWhole(res.body, cap)).toString('utf8'));
    for (const m of messages) this.onmessage?.(m);
  }

  /**
   * One POST's event stream, to its end. When it ends without the response to its request, it
   * is resumed from its last event id (./stream-resume.ts); without one, or when resuming
   * fails, the call fails now, `outcome_unknown`.
   */
  private async readPostStream(body: Readable, id: string | number, cap: BodyCap): Promise<void> {
    let answered = false;
    let last: string | undefined;
    let reading = body;
    const seen = (m: JSONRPCMessage) => {
      if (!('method' in m) && (m as { id?: unknown }).id === id) answered = true;
    };
    const sink = this.sink(seen, (eventId) => {
      last = eventId;
    });
    const how = await readEventStream(body, sink, cap);
    if (how.end === 'capped' || this.running?.signal.aborted) return;
    if (!answered && last !== undefined) {
      const resumed = await resumeStream({
        lastEventId: last,
        delayMs: () => this.retryMs ?? RESUME_DEFAULT_DELAY_MS,
        done: () => answered || !!this.running?.signal.aborted || !!cap.ctx?.stop?.signal.aborted,
        reopen: (lastEventId) => this.reopenStream(lastEventId),
        read: (next, onEventId) => {
          reading = next;
          // A resumed stream has served its purpose once the response came on it.
          const resumedSink = this.sink((m) => {
            seen(m);
            if (answered) queueMicrotask(() => reading.destroy());
          }, onEventId);
          return readEventStream(next, resumedSink, cap);
        },
      });
      if (resumed.end !== 'failed') return;
      cap.ctx?.fail?.(resumed.reason);
      return;
    }
    if (how.end === 'broken') {
      cap.ctx?.fail?.(`connection lost: ${errorCode(how.error)}`);
      this.onerror?.(new Error(`SSE stream disconnected: ${String(how.error)}`));
    } else if (!answered) cap.ctx?.fail?.('the upstream ended its event stream before the response');
  }

  /** Messages of an event stream to `onmessage`, bad ones to `onerror`. */
  private sink(seen?: (m: JSONRPCMessage) => void, ids?: (id: string) => void): EventSink {
    return {
      message: (m) => {
        seen?.(m);
        this.onmessage?.(m);
      },
      invalid: (e) => this.onerror?.(e),
      retry: (ms) => {
        this.retryMs = ms;
      },
      ...(ids ? { eventId: ids } : {}),
    };
  }

  /** `GET` with `Last-Event-ID` resuming a POST's stream: its body, or the refusal's status. */
  private async reopenStream(lastEventId: string): Promise<Readable | string> {
    const res = await this.exchange('GET', { accept: 'text/event-stream', 'last-event-id': lastEventId });
    if (res.statusCode >= 200 && res.statusCode <= 299 && mediaType(res) === 'text/event-stream')
      return res.body;
    await res.body.dump().catch(() => undefined);
    return `HTTP ${res.statusCode}`;
  }

  /** Opens the standalone GET stream (attempt `tries` of a reopening run); failures go to onerror. */
  private openStandalone(lastEventId: string | undefined, tries: number): void {
    this.standalone(lastEventId).then(
      (last) => this.reopen(last, 0),
      (e) => {
        if (this.running?.signal.aborted) return;
        this.onerror?.(e as Error);
        // A first open that fails is reported, as the SDK does; reopening tries again.
        if (tries > 0) this.reopen(lastEventId, tries);
      },
    );
  }

  /**
   * Reads the standalone stream to its end.
   * @returns false when the upstream offers none (405), else the last event id seen.
   * @throws StreamableHTTPError for another status.
   */
  private async standalone(lastEventId: string | undefined): Promise<string | undefined | false> {
    const res = await this.exchange('GET', {
      accept: 'text/event-stream',
      ...(lastEventId ? { 'last-event-id': lastEventId } : {}),
    });
    if (res.statusCode < 200 || res.statusCode > 299) {
      await res.body.dump().catch(() => undefined);
      if (res.statusCode === 405) return false;
      throw new StreamableHTTPError(
        res.statusCode,
        `Failed to open SSE stream: ${this.refusal(res) ?? STATUS_CODES[res.statusCode] ?? ''}`,
      );
    }
    let last = lastEventId;
    // Each event is bounded here too (memory stays bounded by the cap); an event past it belongs
    // to no call, so it cuts only this stream, which is opened again like one that broke off.
    const cap: BodyCap = {
      bytes: this.o.maxResultBytes,
      ctx: undefined,
      onOverflow: () =>
        this.onerror?.(
          new Error(`standalone SSE stream: an event exceeds ${this.o.maxResultBytes} bytes; stream closed`),
        ),
    };
    const how = await readEventStream(
      res.body,
      this.sink(undefined, (id) => {
        last = id;
      }),
      cap,
    );
    if (how.end === 'broken' && !this.running?.signal.aborted)
      this.onerror?.(new Error(`SSE stream disconnected: ${String(how.error)}`));
    return last;
  }

  /** Opens the standalone stream again after the backoff, unless closing or past the tries. */
  private reopen(last: string | undefined | false, tries: number): void {
    if (last === false || !this.running || this.running.signal.aborted) return;
    if (tries >= REOPEN.tries) {
      this.onerror?.(new Error(`Maximum reconnection attempts (${REOPEN.tries}) exceeded.`));
      return;
    }
    const delay = this.retryMs ?? Math.min(REOPEN.firstMs * REOPEN.factor ** tries, REOPEN.maxMs);
    this.reopenTimer = setTimeout(() => this.openStandalone(last, tries + 1), delay);
    this.reopenTimer.unref();
  }

  /** "Redirect to … not followed" for a redirect that left the origin, else undefined. */
  private refusal(res: Response): string | undefined {
    const to = redirectTarget(res, this.url);
    if (!to) return undefined;
    to.username = to.password = to.search = to.hash = '';
    return `Redirect to ${to.href} not followed`;
  }

  /** One request with the session's headers, following redirects within the origin (GET any, others 307/308). */
  private async exchange(method: string, extra: Record<string, string>, body?: string): Promise<Response> {
    const headers: Record<string, string> = {};
    if (this.session) headers['mcp-session-id'] = this.session;
    if (this.protocol) headers['mcp-protocol-version'] = this.protocol;
    Object.assign(headers, this.headers, extra);
    addTraceHeaders(headers);
    const authorizer = this.o.authorizer;
    let bearer = await authorizer?.authorization();
    if (bearer) headers.authorization = bearer;
    let challenged = false;
    let url = this.url;
    for (let followed = 0; ; followed++) {
      const res = await request(url, {
        method: method as Dispatcher.HttpMethod,
        headers,
        ...(body !== undefined ? { body } : {}),
        ...(this.running ? { signal: this.running.signal } : {}),
        ...(this.o.dispatcher ? { dispatcher: this.o.dispatcher } : {}),
      });
      // A challenged request is sent again once, with the token the challenge got.
      if (authorizer && !challenged && challenge(res)) {
        challenged = true;
        await res.body.dump();
        await authorizer.challenged(res.statusCode, header(res, 'www-authenticate'), bearer);
        bearer = await authorizer.authorization();
        if (bearer) headers.authorization = bearer;
        followed--;
        continue;
      }
      const to = redirectTarget(res, url);
      const keepsMethod = res.statusCode === 307 || res.statusCode === 308 || method === 'GET';
      if (!to || followed === MAX_REDIRECTS || !keepsMethod || !withinOrigin(url, to)) return res;
      if ((to.username || to.password) && (to.username !== url.username || to.password !== url.password))
        return res;
      await res.body.dump();
      url = to;
    }
  }

  /**
   * Ends the connection: streams and requests in flight are aborted, `onclose` told (the SDK
   * fails what waits), then the upstream session is ended with DELETE (405 and failures
   * ignored; at most {@link SESSION_DELETE_TIMEOUT_MS}).
   */
  async close(): Promise<void> {
    clearTimeout(this.reopenTimer);
    this.running?.abort();
    const session = this.session;
    this.onclose?.();
    if (session === undefined || session === this.expired) return;
    this.session = undefined;
    await this.deleteSession(session);
  }

  private async deleteSession(session: string): Promise<void> {
    const headers: Record<string, string> = { ...this.headers, 'mcp-session-id': session };
    if (this.protocol) headers['mcp-protocol-version'] = this.protocol;
    try {
      const bearer = await this.o.authorizer?.authorization();
      if (bearer) headers.authorization = bearer;
      const res = await request(this.url, {
        method: 'DELETE',
        headers,
        signal: AbortSignal.timeout(SESSION_DELETE_TIMEOUT_MS),
        ...(this.o.dispatcher ? { dispatcher: this.o.dispatcher } : {}),
      });
      await res.body.dump();
    } catch {
      // The upstream is gone or slow: its session ends at its own timeout.
    }
  }
}
