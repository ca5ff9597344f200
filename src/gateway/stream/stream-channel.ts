/**
 * The {@link ClientChannel} of one `POST /mcp` whose client accepts `text/event-stream`
 * (MCP Streamable HTTP: the server may answer a POST with an SSE stream that carries
 * notifications and requests related to it before the response). The stream opens on the
 * first message that must reach the client before the result; a request that produces none
 * is answered `application/json`, as before, so the plain path costs nothing extra. An
 * `eager` channel (a client in a client session, or one that accepts only
 * `text/event-stream`) always answers on the stream.
 */
import type { ServerResponse } from 'node:http';
import { CmcpError } from '@cmcp/verify/errors/index';
import type { ClientChannel, ClientMessage } from '../client-channel.js';
import type { InflightRequests } from './inflight.js';
import { openEventStream, writeEvent, writeLoneEvent } from './sse.js';

export class StreamChannel implements ClientChannel {
  readonly streaming = true;
  /** Set by the HTTP layer from the client session. */
  protocolVersion?: string;
  private readonly ctl = new AbortController();
  /** Server-to-client requests of this channel still waiting (rejected when the client goes). */
  private readonly waiting = new Set<(e: Error) => void>();

  constructor(
    private readonly raw: ServerResponse,
    private readonly inflight: InflightRequests,
    private readonly agentId: string,
    /** Response headers (e.g. `Mcp-Session-Id`) written with the stream's head. */
    private readonly headers: Record<string, string>,
    readonly clientSessionId: string | undefined,
    /** The stream opens even for a lone result. */
    private readonly eager: boolean,
    /** Called once, just before the stream's head is written (the HTTP layer lets go of the reply). */
    private readonly onOpen: () => void,
  ) {
    raw.on('close', () => {
      if (raw.writableFinished) return;
      // The client went away before the answer: abort the request and what waits on it.
      const gone = new CmcpError('REQUEST_CANCELLED', 'the client disconnected');
      if (!this.ctl.signal.aborted) this.ctl.abort(gone);
      for (const reject of this.waiting) reject(gone);
    });
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

  private start(): void {
    if (this.raw.headersSent) return;
    this.onOpen();
    openEventStream(this.raw, this.headers);
  }

  private usable(): boolean {
    return !this.raw.destroyed && !this.raw.writableEnded;
  }

  notify(message: ClientMessage): boolean {
    if (!this.usable()) return false;
    this.start();
    return writeEvent(this.raw, { jsonrpc: '2.0', ...message });
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
    this.start();
    writeEvent(this.raw, { jsonrpc: '2.0', id, ...message });
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
    if (!this.usable()) return true;
    if (!this.raw.headersSent && body !== null) {
      this.onOpen();
      writeLoneEvent(this.raw, this.headers, body);
      return true;
    }
    this.start();
    if (body !== null) writeEvent(this.raw, body);
    this.raw.end();
    return true;
  }
}
