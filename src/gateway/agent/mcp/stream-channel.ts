/**
 * The {@link ClientChannel} of one `POST /mcp` whose client accepts `text/event-stream`
 * (MCP Streamable HTTP: the server may answer a POST with an SSE stream that carries
 * notifications and requests related to it before the response). The stream opens on the
 * first message that must reach the client before the result; a request that produces none
 * is answered `application/json`, as before, so the plain path costs nothing extra. An
 * `eager` channel (a client in a client session, or one that accepts only
 * `text/event-stream`) always answers on the stream.
 *
 * What is written in one turn of the loop goes out in one write: the socket is corked at the
 * first write and uncorked once the turn's promise jobs have run (a microtask that queues the
 * uncork as a tick, which runs after the microtask queue is empty). So the head and the
 * notifications of one upstream read reach the client as one segment, and notifications that
 * came with the upstream's answer go out with the result and the stream's end, as on the JSON
 * path. A notification is never held past the turn that wrote it. Each write wakes the client:
 * an uncork on the next tick, or notifications sent ahead of the terminal audit entry, would
 * cost each call a write and a wake-up more (bench/relayed-progress.ts measures it).
 *
 * In a client session that negotiated 2025-11-25 or later the stream is resumable
 * (./replay.ts): it opens with a priming event, every event carries an id and is kept for
 * replay, and when the connection breaks off before the response the request waits
 * `streams.resume_grace_ms` for the client to resume it (`GET` with `Last-Event-ID`) before it
 * is cancelled as by a disconnect; its events meanwhile are kept, and go out on the resumed
 * response.
 */
import type { ServerResponse } from 'node:http';
import { CmcpError } from '../../../errors/index.js';
import type { ClientChannel, ClientMessage } from '../../../relay/channel.js';
import type { InflightRequests } from './inflight.js';
import type { ReplayStream, ReplayStreams } from './replay.js';

export class StreamChannel implements ClientChannel {
  readonly streaming = true;
  /** Set by the HTTP layer from the client session. */
  protocolVersion?: string;
  /** Set by the MCP layer for a stateless request. */
  declaredCapabilities?: Record<string, unknown>;
  private readonly ctl = new AbortController();
  /** Server-to-client requests of this channel still waiting (rejected when the client goes). */
  private readonly waiting = new Set<(e: Error) => void>();
  /**
   * True from a write until the turn's uncork. end() uncorks fully, so nothing is uncorked
   * after it: the socket may already serve the connection's next response.
   */
  private corked = false;
  /** The response events go to: the POST's, or the one a client resumed the stream on. */
  private raw: ServerResponse;
  /** This stream's ids and replay buffer, once it opened in a resumable client session. */
  private replay: ReplayStream | null = null;
  /** Set while a broken-off stream waits for its client to resume it. */
  private grace: NodeJS.Timeout | undefined;

  constructor(
    raw: ServerResponse,
    private readonly inflight: InflightRequests,
    private readonly agentId: string,
    /** Response headers (e.g. `Mcp-Session-Id`) written with the stream's head. */
    private readonly headers: Record<string, string>,
    readonly clientSessionId: string | undefined,
    /** The stream opens even for a lone result. */
    private readonly eager: boolean,
    /** Called once, just before the stream's head is written (the HTTP layer lets go of the reply). */
    private readonly onOpen: () => void,
    /** The client session's resumable streams (null: events carry no ids, a disconnect cancels at once). */
    private readonly replays: ReplayStreams | null = null,
  ) {
    this.raw = raw;
    this.watch(raw);
  }

  /** A response that closes before the answer: the request is cancelled, or waits to be resumed. */
  private watch(raw: ServerResponse): void {
    raw.on('close', () => {
      if (raw.writableFinished || raw !== this.raw || this.replay?.ended) return;
      const graceMs = this.replays?.limits.resume_grace_ms ?? 0;
      if (this.replay && graceMs > 0) {
        this.grace = setTimeout(() => this.gone(), graceMs);
        this.grace.unref();
        return;
      }
      this.gone();
    });
  }

  /** The client went away before the answer: abort the request and what waits on it. */
  private gone(): void {
    const gone = new CmcpError('REQUEST_CANCELLED', 'the client disconnected');
    if (!this.ctl.signal.aborted) this.ctl.abort(gone);
    for (const reject of this.waiting) reject(gone);
  }

  /** The client resumed this stream on `raw` (`GET` with `Last-Event-ID`; the replay is written). */
  private resumed(raw: ServerResponse): void {
    clearTimeout(this.grace);
    this.grace = undefined;
    this.corked = false;
    this.raw = raw;
    this.watch(raw);
  }

  /** The controller whose abort `notifications/cancelled` and a disconnect trigger. */
  get controller(): AbortController {
    return this.ctl;
  }

  get signal(): AbortSignal {
    return this.ctl.signal;
  }

  /** True once the SSE head was written (the answer must go on the stream). */
  get open(): boolean {
    return this.raw.headersSent;
  }

  /** Corks the response until this turn's promise jobs have run (module comment): its writes coalesce. */
  private cork(): void {
    if (this.corked) return;
    this.corked = true;
    this.raw.cork();
    queueMicrotask(() => process.nextTick(() => this.flush()));
  }

  /** Sends what this turn wrote (the uncork of `cork`). */
  private flush(): void {
    if (!this.corked) return;
    this.corked = false;
    if (!this.raw.writableEnded) this.raw.uncork();
  }

  private start(): void {
    this.cork();
    if (this.raw.headersSent) return;
    this.onOpen();
    openEventStream(this.raw, this.headers);
    if (this.replays) {
      this.replay = this.replays.open();
      this.replay.onResume = (raw) => this.resumed(raw);
      this.raw.write(this.replay.priming());
    }
  }

  /**
   * Writes one message as one SSE event (coalesced with the tick's other writes). While a
   * resumable stream waits to be resumed the event is kept for the replay.
   */
  private send(message: Record<string, unknown>): boolean {
    if (!this.usable()) {
      if (!this.grace || !this.replay) return false;
      this.replay.frame(message);
      return true;
    }
    this.start();
    this.raw.write(this.replay ? this.replay.frame(message) : eventFrame(message));
    return true;
  }

  private usable(): boolean {
    return !this.raw.destroyed && !this.raw.writableEnded;
  }

  notify(message: ClientMessage): boolean {
    return this.send({ jsonrpc: '2.0', ...message });
  }

  request(message: ClientMessage, options: { signal?: AbortSignal } = {}): Promise<Record<string, unknown>> {
    if (!this.usable() || this.ctl.signal.aborted)
      return Promise.reject(new CmcpError('CLIENT_CHANNEL_UNAVAILABLE', 'the client disconnected'));
    const { id, answer, drop } = this.inflight.expect(this.agentId);
    this.waiting.add(drop);
    const signals = [this.ctl.signal, ...(options.signal ? [options.signal] : [])];
    const stop = AbortSignal.any(signals);
    const onAbort = () => {
      // The requester cancels what it no longer waits for (MCP cancellation).
      this.notify({
        method: 'notifications/cancelled',
        params: { requestId: id, reason: 'request aborted' },
      });
      drop(
        stop.reason instanceof Error
          ? stop.reason
          : new CmcpError('REQUEST_CANCELLED', 'the request was aborted'),
      );
    };
    if (stop.aborted) onAbort();
    else stop.addEventListener('abort', onAbort, { once: true });
    this.send({ jsonrpc: '2.0', id, ...message });
    return answer.finally(() => {
      this.waiting.delete(drop);
      stop.removeEventListener('abort', onAbort);
    });
  }

  /**
   * Sends the response on the stream and ends it, when the stream is open (or must be).
   * @param status the HTTP status of the response: an error status (400 for an unsupported
   *   protocol version, …) can be sent only while nothing was streamed, so then it goes as JSON.
   * @returns false when the response is still to be sent as `application/json`.
   */
  finish(body: Record<string, unknown> | null, status = 200): boolean {
    if (status !== 200 && !this.raw.headersSent) return false;
    if (!this.open && !(this.eager && body !== null)) return false;
    clearTimeout(this.grace);
    if (this.usable()) {
      this.start();
      const frame = body === null ? null : this.replay ? this.replay.frame(body) : eventFrame(body);
      if (this.replay) this.replay.ended = true;
      // end() with the last event: it and the stream's end go in one write.
      if (frame !== null) this.raw.end(frame);
      else this.raw.end();
    } else if (this.replay) {
      // Broken off and not yet resumed: the response waits in the replay buffer.
      if (body !== null) this.replay.frame(body);
      this.replay.ended = true;
    }
    return true;
  }
}

/**
 * Server-Sent Events framing of JSON-RPC messages on a raw Node response (MCP Streamable HTTP,
 * "Sending Messages to the Server" §5; WHATWG HTML §9.2 event streams). The frame is the one the
 * official SDK's server transport writes (`event: message`, one `data:` line); the SDK keeps
 * its writer private, so it is restated here. JSON.stringify never emits a line break, so a
 * message of any size is exactly one `data:` line: large results pass intact.
 */
function writeStreamHead(raw: ServerResponse, headers: Record<string, string>): void {
  raw.writeHead(200, {
    'content-type': 'text/event-stream',
    'cache-control': 'no-cache, no-transform',
    connection: 'keep-alive',
    ...headers,
  });
}

/**
 * Writes the 200 response head of an event stream (unless already written).
 * @param headers extra headers (e.g. `Mcp-Session-Id`).
 */
export function openEventStream(raw: ServerResponse, headers: Record<string, string> = {}): void {
  if (raw.headersSent) return;
  writeStreamHead(raw, headers);
  // Send the head now: a client waiting on a long call learns the stream is open.
  raw.flushHeaders();
}

/** One JSON-RPC message as one SSE event (`event: message`, one `data:` line). */
export function eventFrame(message: Record<string, unknown>): string {
  return `event: message\ndata: ${JSON.stringify(message)}\n\n`;
}

/**
 * Writes one JSON-RPC message as one SSE event.
 * @returns false when the response is no longer writable (client gone).
 */
export function writeEvent(raw: ServerResponse, message: Record<string, unknown>): boolean {
  if (raw.writableEnded || raw.destroyed) return false;
  raw.write(eventFrame(message));
  return true;
}

/** A comment line that keeps intermediaries from closing an idle standalone stream. */
export function writeKeepAlive(raw: ServerResponse): void {
  if (!raw.writableEnded && !raw.destroyed) raw.write(': keep-alive\n\n');
}
