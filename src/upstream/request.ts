/**
 * How far an upstream request got, from what the SDK threw (docs/spec/execution.md): an error
 * the upstream sent is `answered` whatever its code; the SDK's own timeout and closed
 * connection are `maybe_sent`; a connection never made is `not_sent`.
 */

import type { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { StreamableHTTPError } from '@modelcontextprotocol/sdk/client/streamableHttp.js';
import {
  type ClientCapabilities,
  McpError,
  ErrorCode as McpErrorCode,
  type Progress,
} from '@modelcontextprotocol/sdk/types.js';
import type { Tracer } from '@opentelemetry/api';
import {
  authorizationErrorOf,
  UpstreamAuthorizationFailedError,
  UpstreamAuthorizationRequiredError,
} from './oauth/errors.js';
import type { CallContext } from './result-cap.js';
import { upstreamRpcMessage } from './rpc-message.js';

/** Per-request options of {@link Upstream.request}. */
export interface RequestOptions {
  /** Aborting cancels the request upstream (the SDK sends `notifications/cancelled`). */
  signal?: AbortSignal;
  /** Told every `notifications/progress` of this request (the SDK's own progress token). */
  onprogress?: (progress: Progress) => void;
}

/** What a connection to an upstream is set up with besides its config (src/relay/). */
export interface UpstreamHooks {
  /** Capabilities the gateway declares to the upstream as its client (default: none). */
  capabilities?: ClientCapabilities;
  /** Called with every new SDK client before it connects: request and notification handlers. */
  onClient?: (client: Client) => void;
  /** Told when the upstream's session expired (HTTP 404) and a new one was initialised. */
  onRenewed?: (upstream: string, failure: string) => void;
  /** CLIENT spans of the requests sent upstream (absent: tracing off). */
  tracer?: Tracer;
}

/** Upstream listings stop after this many pages with an error, never with a silent cut. */
export const MAX_LIST_PAGES = 10_000;

/** Anything that sends one request upstream and says how far it got (never throws). */
export interface RequestSender {
  request(method: string, params: Record<string, unknown>, opts?: RequestOptions): Promise<CallOutcome>;
}

function listFailure(o: CallOutcome): string {
  if ('rpcError' in o) return `MCP error ${o.rpcError.code}: ${o.rpcError.message}`;
  if ('failure' in o) return o.failure;
  return 'answer over the result cap';
}

/** The authorization error a listing failed with (kept typed: availability tells it apart), or undefined. */
function authorizationError(method: string, o: CallOutcome): Error | undefined {
  if (!('failure' in o)) return undefined;
  if (o.failure === 'UPSTREAM_AUTHORIZATION_REQUIRED')
    return new UpstreamAuthorizationRequiredError(`${method}: ${o.failure}`, o.authorizationUrl);
  if (o.failure === 'UPSTREAM_AUTHORIZATION_FAILED')
    return new UpstreamAuthorizationFailedError(`${method}: ${o.failure}`);
  return undefined;
}

/**
 * Every page of one upstream list (`tools/list`, `resources/list`, `resources/templates/list`,
 * `prompts/list`): follows `nextCursor` until the upstream stops. Nothing is cut short: past
 * {@link MAX_LIST_PAGES} pages, or on a cursor the upstream repeats, it throws.
 * @param key the result member holding the items (`tools`, `resources`, …).
 * @throws Error naming the method and why the listing failed.
 */
export async function listAllPages(
  sender: RequestSender,
  method: string,
  key: string,
  opts?: RequestOptions,
): Promise<Record<string, unknown>[]> {
  const out: Record<string, unknown>[] = [];
  const seen = new Set<string>();
  let cursor: string | undefined;
  for (let page = 0; ; page++) {
    if (page >= MAX_LIST_PAGES) throw new Error(`${method}: more than ${MAX_LIST_PAGES} pages`);
    const o = await sender.request(method, cursor ? { cursor } : {}, opts);
    if (!('result' in o)) throw authorizationError(method, o) ?? new Error(`${method}: ${listFailure(o)}`);
    const items = o.result[key];
    if (!Array.isArray(items)) throw new Error(`${method}: the result has no ${key} array`);
    for (const it of items)
      if (typeof it === 'object' && it !== null && !Array.isArray(it))
        out.push(it as Record<string, unknown>);
    const next = o.result.nextCursor;
    if (typeof next !== 'string' || next === '') return out;
    if (seen.has(next)) throw new Error(`${method}: the upstream repeated a cursor`);
    seen.add(next);
    cursor = next;
  }
}

/** Outcome of one upstream request. */
export type CallOutcome =
  | {
      boundary: 'answered';
      result: Record<string, unknown>;
      /**
       * JCS text of `result` (RFC 8785), when JCS can carry it: made once for the result-cap
       * check and reused for the response hash instead of serialising the result again.
       */
      resultJcs?: string;
    }
  | { boundary: 'answered'; rpcError: { code: number; message: string; data?: unknown } }
  /** The upstream answered with more than the result cap; the read stopped at the cap. */
  | { boundary: 'answered'; tooLarge: { capBytes: number } }
  | {
      boundary: 'not_sent' | 'maybe_sent';
      failure: string;
      /** UPSTREAM_AUTHORIZATION_REQUIRED: where the operator must go to authorize. */
      authorizationUrl?: string;
    };

/**
 * The outcome of a request the gateway could not authorize (./oauth/): never sent, its
 * `failure` the error code; undefined for any other error.
 */
export function authorizationOutcome(e: unknown): CallOutcome | undefined {
  const a = authorizationErrorOf(e);
  if (!a) return undefined;
  const url = a instanceof UpstreamAuthorizationRequiredError ? a.authorizationUrl : undefined;
  return { boundary: 'not_sent', failure: a.code, ...(url ? { authorizationUrl: url } : {}) };
}

/** Errors whose cause shows that no connection was ever made, so nothing was sent. */
const NOT_SENT_CODES = new Set([
  'ECONNREFUSED',
  'ENOTFOUND',
  'EAI_AGAIN',
  'EHOSTUNREACH',
  'ENETUNREACH',
  'ENOENT',
]);

/** The first string `code` along an error's `cause` chain (Node system errors). */
export function causeCode(e: unknown): string | undefined {
  let cur: unknown = e;
  for (let i = 0; i < 5 && cur; i++) {
    const c = (cur as { code?: unknown }).code;
    if (typeof c === 'string') return c;
    cur = (cur as { cause?: unknown }).cause;
  }
  return undefined;
}

/**
 * True when an HTTP upstream refused the request because it no longer knows the session
 * (Streamable HTTP: 404 for a request carrying an expired `Mcp-Session-Id`): nothing was
 * processed, so the request may be sent again on a new session.
 */
export function sessionExpired(e: unknown): boolean {
  return e instanceof StreamableHTTPError && e.code === 404;
}

/**
 * Classifies a failed request. `ctx.answered` (src/upstream/answers.ts) separates an
 * upstream's JSON-RPC error from the SDK's own -32000/-32001.
 */
export function classifyFailure(e: unknown, ctx: CallContext, capBytes: number): CallOutcome {
  const unauthorized = authorizationOutcome(e);
  if (unauthorized) return unauthorized;
  // This call's own response was cut at the cap: the upstream did answer (completed), too
  // large. A call whose connection was cut for another call's response never got an answer.
  if (ctx.overflowed) return { boundary: 'answered', tooLarge: { capBytes } };
  if (ctx.cutOff)
    return { boundary: 'maybe_sent', failure: "connection cut: another call's response exceeded the cap" };
  if (e instanceof McpError) {
    if (ctx.answered)
      return {
        boundary: 'answered',
        rpcError: { code: e.code, message: upstreamRpcMessage(e), data: e.data },
      };
    if (e.code === McpErrorCode.RequestTimeout) return { boundary: 'maybe_sent', failure: 'timeout' };
    if (e.code === McpErrorCode.ConnectionClosed)
      return {
        boundary: 'maybe_sent',
        failure: /cancel/i.test(e.message) ? 'cancelled' : 'connection closed',
      };
    return { boundary: 'maybe_sent', failure: `MCP error ${e.code}` };
  }
  if (e instanceof StreamableHTTPError) {
    if (e.code === 404) return { boundary: 'not_sent', failure: 'upstream session expired' };
    return { boundary: 'maybe_sent', failure: `HTTP ${e.code}` };
  }
  const code = causeCode(e);
  if (code && NOT_SENT_CODES.has(code)) return { boundary: 'not_sent', failure: code };
  if (/not connected/i.test((e as Error).message)) return { boundary: 'not_sent', failure: 'not connected' };
  if ((e as Error).name === 'AbortError') return { boundary: 'maybe_sent', failure: 'cancelled' };
  return { boundary: 'maybe_sent', failure: code ?? 'transport error' };
}
