/**
 * The result-size cap of one upstream call (C-MCP-4): per-call state carried in
 * AsyncLocalStorage, shared by the HTTP transport (./http-transport.ts, which stops reading a
 * POST's response body at the cap), the stdio watcher and ./answers.ts.
 */
import { AsyncLocalStorage } from 'node:async_hooks';
import { CmcpError } from '../errors/index.js';

/** Default result cap (C-MCP-4): 2 MiB. */
export const DEFAULT_MAX_RESULT_BYTES = 2 * 1024 * 1024;

/** Per-call state shared with the HTTP transport and the stdio watcher. */
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

/** A response passed the cap (the read stopped there). */
export class ResultTooLargeError extends CmcpError {
  declare readonly code: 'UPSTREAM_RESULT_TOO_LARGE';
  constructor(message: string) {
    super('UPSTREAM_RESULT_TOO_LARGE', message);
    this.name = 'ResultTooLargeError';
  }
}
