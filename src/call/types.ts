import type { ReceiptJson } from '@cmcp/verify/formats';
import type { CallOutcome, RoutedTool } from '../upstream/pool.js';

/** Who is calling, as the HTTP edge decided it once for this request. */
export interface Caller {
  agentId: string;
  /** True when an operator blocked this agent (kill switch), decided by the agent auth hook. */
  blocked: boolean;
  /** Cedar principal attributes from a JWT access token (scopes, configured claims). */
  attributes?: Record<string, unknown>;
  /**
   * The call_id a `tools/call` of this request is recorded under, chosen by the HTTP edge so a
   * shutdown's CALL_INTERRUPTED answer can name its entry (gateway/lifecycle/drain.ts); absent: a fresh one.
   */
  callId?: string;
}

/**
 * How one `tools/call` reaches its upstream for the client that sent it (src/relay/calls.ts):
 * on the client session's own upstream connection, with its progress and cancellation.
 */
export interface CallLink {
  /** Sends the call upstream (never throws: the outcome says how far it got). */
  forward(
    route: RoutedTool,
    args: Record<string, unknown> | undefined,
    sessionId: string,
  ): Promise<CallOutcome>;
  /**
   * The route of a tool only this client's own upstream connection offers (an upstream's tools
   * gated on the client's capabilities), or undefined; absent: none.
   */
  route?(exposedName: string): Promise<RoutedTool | undefined>;
}

/** A `tools/call` whose params passed ingress: everything later stages read. */
export interface CallRequest {
  /** `_cmcp.session_id`, or undefined: the agent's default session. */
  sessionId: string | undefined;
  workflowId: string | null;
  toolName: string;
  /** `params.arguments` as sent (undefined when absent: forwarded as absent). */
  arguments: Record<string, unknown> | undefined;
  /** `sha256:` of JCS of `{name, arguments}` (arguments `{}` when absent). */
  requestPayloadHash: string;
  executionId: string | null;
  actionTimestamp: string | null;
}

/** A stage's refusal: the orchestrator records it as the call's terminal entry. */
export type { Refusal } from '../store/port.js';

/** Evidence returned in `result._meta["dev.cmcp/evidence"]` and in error data (docs/spec/mcp.md#inbound). */
export type CallEvidence = ReceiptJson;

/** A JSON-RPC error produced by the call path (the MCP layer wraps it in a response). */
export interface CallError {
  code: number;
  message: string;
  data: Record<string, unknown>;
}

export type CallResponse = { result: Record<string, unknown> } | { error: CallError };
