/**
 * The result-size cap of one upstream call (C-MCP-4): per-call state carried in
 * AsyncLocalStorage, and a fetch for the SDK's Streamable HTTP transport that stops reading a
 * response body at the cap and carries the W3C `traceparent` of the active span.
 */
import { AsyncLocalStorage } from 'node:async_hooks';
import { CmcpError } from '@cmcp/verify/errors/index';
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

/**
 * A fetch for the SDK's Streamable HTTP transport that stops reading a POST response body at
 * `cap` bytes (C-MCP-4): the body is cancelled, the read errors, and `onOverflow` is told.
 * Long-lived GET event streams are not capped (they carry many messages over time).
 */
export function cappedFetch(cap: number, onOverflow: (ctx: CallContext | undefined) => void): typeof fetch {
  return async (input, traceless) => {
    // W3C traceparent of the active span (none when tracing is off).
    const init = withTraceContext(traceless);
    const ctx = callContext.getStore();
    if ((init?.method ?? 'GET').toUpperCase() !== 'POST') return fetch(input, init);
    // Our own abort, so that passing the cap closes the connection instead of letting the
    // HTTP client drain the rest of the body.
    const stop = new AbortController();
    const signal = init?.signal ? AbortSignal.any([init.signal, stop.signal]) : stop.signal;
    const res = await fetch(input, { ...init, signal });
    if (!res.body) return res;
    const reader = res.body.getReader();
    let seen = 0;
    const body = new ReadableStream<Uint8Array>({
      async pull(ctrl) {
        const { done, value } = await reader.read();
        if (done) {
          ctrl.close();
          return;
        }
        seen += value.byteLength;
        if (seen > cap) {
          onOverflow(ctx);
          stop.abort();
          await reader.cancel().catch(() => undefined);
          ctrl.error(new ResultTooLargeError(`response exceeds ${cap} bytes`));
          return;
        }
        ctrl.enqueue(value);
      },
      cancel(reason) {
        return reader.cancel(reason);
      },
    });
    return new Response(body, { status: res.status, statusText: res.statusText, headers: res.headers });
  };
}
