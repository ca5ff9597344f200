/**
 * The client side of one inbound MCP request, as the code that serves it sees it
 * (docs/spec/mcp.md#inbound), and the request a method handler serves. The relay and the call
 * path own these shapes; the HTTP edge (gateway/agent/mcp/) implements them. The HTTP edge builds one per request: on an SSE response it can
 * carry notifications and server-to-client requests before the result; on a JSON response it
 * carries only the result. Method handlers (tools/call, the relayed methods) use it to pass the
 * upstream's progress, log messages and server-to-client requests back to the client, and learn
 * from `signal` that the client went away or cancelled.
 */

import type { Caller } from '../call/types.js';
import { CmcpError } from '../errors/index.js';

/** A JSON-RPC notification or request as it travels to the client (no `jsonrpc`, no `id`). */
export interface ClientMessage {
  method: string;
  params?: Record<string, unknown>;
}

/** The channel to the client of one request. */
export interface ClientChannel {
  /** True when the client accepted `text/event-stream` for this request. */
  readonly streaming: boolean;
  /**
   * Sends a notification to the client ahead of the response (`notifications/progress`,
   * `notifications/message`, `notifications/cancelled`). Returns false when it could not be
   * delivered (a JSON response, or the client is gone); the caller decides whether that matters.
   */
  notify(message: ClientMessage): boolean;
  /**
   * Sends a server-to-client request (`sampling/createMessage`, `elicitation/create`,
   * `roots/list`) and resolves with the client's `result`.
   * @throws CmcpError `CLIENT_CHANNEL_UNAVAILABLE` when the response is JSON (the client cannot
   *   receive requests) or the client disconnected; a client JSON-RPC error rejects with a
   *   CmcpError carrying its code and message.
   */
  request(message: ClientMessage, options?: { signal?: AbortSignal }): Promise<Record<string, unknown>>;
  /** Aborted when the client disconnects or cancels this request (`notifications/cancelled`). */
  readonly signal: AbortSignal;
  /** The gateway's client session (`Mcp-Session-Id`), or undefined for a stateless request. */
  readonly clientSessionId?: string;
  /** The protocol revision the client session's `initialize` negotiated (absent without a session). */
  readonly protocolVersion?: string;
  /**
   * The client capabilities a stateless 2026-07-28 request declared in its `_meta` (set by the
   * MCP layer; absent for a request in a client session, whose `initialize` declared them).
   */
  declaredCapabilities?: Record<string, unknown>;
}

/**
 * The channel of a request answered with `application/json`: nothing reaches the client before
 * the result, and server-to-client requests are refused.
 * @param signal aborted when the client disconnects (default: never).
 */
export function jsonChannel(
  signal: AbortSignal = new AbortController().signal,
  clientSessionId?: string,
): ClientChannel {
  return {
    streaming: false,
    notify: () => false,
    request: () =>
      Promise.reject(
        new CmcpError(
          'CLIENT_CHANNEL_UNAVAILABLE',
          'the client accepts only application/json: it cannot receive requests',
        ),
      ),
    signal,
    ...(clientSessionId === undefined ? {} : { clientSessionId }),
  };
}

/**
 * The gateway's client sessions (`Mcp-Session-Id`, handshake-era clients), as the upstream side
 * sees them: where notifications that belong to no request go (`list_changed`,
 * `resources/updated`), and when a client session's upstream state can be let go.
 */
export interface ClientSessionEvents {
  /** Delivers a notification on the client session's standalone `GET /mcp` stream; false when none is open. */
  notify(clientSessionId: string, message: ClientMessage): boolean;
  /**
   * Delivers a notification on the standalone stream of every client session `to` accepts
   * (a list change on a shared upstream connection, which concerns every client using it).
   */
  notifyAll(message: ClientMessage, to: (clientSessionId: string, agentId: string) => boolean): void;
  /** Calls `callback` once when the client session ends (`DELETE /mcp`, expiry, shutdown). */
  onEnd(clientSessionId: string, callback: () => void): void;
  /** How long a client session, and an upstream connection of its own, may go unused (milliseconds). */
  readonly idleMs: number;
  /** The client capabilities the session's `initialize` declared (undefined: none, or no such session). */
  capabilities(clientSessionId: string): Record<string, unknown> | undefined;
  /**
   * Sends a server-to-client request that belongs to no client request (an upstream's
   * `roots/list` after `initialized`) on the client session's standalone stream, and resolves
   * with the client's `result` (MCP Streamable HTTP: the server may send requests on the `GET`
   * stream).
   * @throws CmcpError `CLIENT_CHANNEL_UNAVAILABLE` when the session has no standalone stream open
   *   or it closes before the answer; a client JSON-RPC error rejects with its code and message.
   */
  request(
    clientSessionId: string,
    message: ClientMessage,
    options?: { signal?: AbortSignal },
  ): Promise<Record<string, unknown>>;
}

/** A JSON-RPC request id as cmcp accepts it (a string or a safe integer). */
export type JsonRpcId = string | number;

/** One request whose envelope and protocol version were accepted, as a method handler sees it. */
export interface MethodRequest {
  caller: Caller;
  id: JsonRpcId;
  method: string;
  params: Record<string, unknown> | undefined;
  /** True for a stateless 2026-07-28 request. */
  stateless: boolean;
  /** The channel to the client of this request (notifications, server-to-client requests, abort). */
  channel: ClientChannel;
  /** process.hrtime.bigint() when the request arrived. */
  startedAt: bigint;
}

/** Serves one method: its JSON-RPC result, or a JSON-RPC error object. */
export type MethodHandler = (
  request: MethodRequest,
) => Promise<
  { result: Record<string, unknown> } | { error: { code: number; message: string; data?: unknown } }
>;
