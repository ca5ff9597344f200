/**
 * Inbound MCP over Streamable HTTP (docs/spec/mcp.md#inbound): JSON-RPC 2.0 requests POSTed to `/mcp`,
 * answered with `application/json`. The gateway holds no MCP protocol session: handshake-era
 * clients (`initialize` 2025-06-18 / 2025-11-25) and stateless 2026-07-28 requests (protocol
 * version and client capabilities in each request's `_meta`) are served by the same code.
 */

import type { CallOrchestrator } from '../../../call/orchestrator.js';
import type { Caller, CallLink } from '../../../call/types.js';
import { asUrlElicitation, declaresUrlElicitation } from '../../../call/url-elicitation.js';
import { clip, ERRORS, type ErrorCode } from '../../../errors/index.js';
import {
  type ClientChannel,
  type JsonRpcId,
  jsonChannel,
  type MethodHandler,
  type MethodRequest,
} from '../../../relay/channel.js';
import type { ToolDefinition, UpstreamPool } from '../../../upstream/pool.js';
import { JSONRPC_REQUEST_MEMBERS, unknownMembers } from '../../edge/bodies.js';
import { jsonRpcError } from '../../edge/replies.js';

/** What `tools/list` shows (docs/spec/policy.md); default: the live tools. */
export interface McpControls {
  /** The tools agents see (the catalog's approved definitions when a catalog is configured). */
  listTools?: () => ToolDefinition[];
  /** Told the method of every request whose envelope was read (metrics). */
  onMethod?: (method: string) => void;
  /**
   * Handlers for methods beyond the gateway's own (`initialize`, `server/discover`, `ping`,
   * `tools/list`, `tools/call`), keyed by JSON-RPC method; a method with no handler is
   * METHOD_NOT_FOUND.
   */
  methods?: ReadonlyMap<string, MethodHandler>;
  /** The server capabilities `initialize` and `server/discover` advertise (default: tools only). */
  capabilities?: () => Promise<Record<string, unknown>>;
  /** How a tools/call reaches its upstream for this client (src/relay/calls.ts). */
  callLink?: (request: MethodRequest) => CallLink;
  /**
   * The client capabilities a request's client declared (its session's `initialize`, or a
   * stateless request's `_meta`); absent: none known.
   */
  declaredCapabilities?: (channel: ClientChannel) => Record<string, unknown> | undefined;
  /** Told every notification a client sends (`notifications/roots/list_changed` is relayed). */
  onNotification?: (caller: Caller, method: string, channel: ClientChannel) => void;
}

/**
 * Protocol revisions answered by `initialize` (newest first): every revision the official SDK
 * negotiates; a client asking for one of them gets it.
 */
export const HANDSHAKE_VERSIONS = [
  '2025-11-25',
  '2025-06-18',
  '2025-03-26',
  '2024-11-05',
  '2024-10-07',
] as const;
/** Stateless protocol revisions (no handshake; `_meta` on every request). */
export const STATELESS_VERSIONS = ['2026-07-28'] as const;
const META_VERSION = 'io.modelcontextprotocol/protocolVersion';
const META_CAPS = 'io.modelcontextprotocol/clientCapabilities';

/** What the HTTP layer sends back. `body: null` means 202 with no body. */
export interface RpcReply {
  status: number;
  body: Record<string, unknown> | null;
}

export const SERVER_INFO = { name: 'cmcp', version: '0.1.0' };

function rpcError(
  id: JsonRpcId | null,
  code: ErrorCode,
  message: string,
  status = 200,
  data: Record<string, unknown> = {},
): RpcReply {
  return { status, body: jsonRpcError(id, code, message, data) };
}

function validId(id: unknown): id is JsonRpcId {
  return typeof id === 'string' || (typeof id === 'number' && Number.isSafeInteger(id));
}

export class McpEndpoint {
  constructor(
    private readonly calls: CallOrchestrator,
    private readonly upstreams: UpstreamPool,
    /** Records requests refused before dispatch (batches, invalid envelopes). */
    private readonly recordRefusal: (
      agentId: string,
      code: ErrorCode,
      detail: Record<string, unknown>,
    ) => void,
    private readonly controls: McpControls = {},
  ) {}

  /**
   * Handles one parsed POST body for an authenticated agent.
   * @param caller the agent and whether it is blocked, as the agent auth hook decided.
   * @param headerVersion the `MCP-Protocol-Version` header, if sent.
   * @param channel the channel to the client (default: a JSON response that carries only the result).
   */
  async handle(
    caller: Caller,
    body: unknown,
    headerVersion: string | undefined,
    startedAt: bigint,
    channel: ClientChannel = jsonChannel(),
  ): Promise<RpcReply> {
    const env = this.envelope(caller, body);
    if ('reply' in env) {
      if (env.notification !== undefined) this.controls.onNotification?.(caller, env.notification, channel);
      return env.reply;
    }
    const { msg, id, method } = env;
    this.controls.onMethod?.(method);
    // A tools/call refused here still ends in its one terminal tool_call entry (docs/spec/audit-entries.md).
    const refuse = async (v: Refused): Promise<RpcReply> => {
      if (method !== 'tools/call') return rpcError(id, v.code, v.message, v.status, v.data);
      const r = await this.calls.refuseEnvelope(caller.agentId, v.code, v.message, startedAt);
      const error =
        'error' in r
          ? { ...r.error, data: { ...r.error.data, ...v.data } }
          : { code: ERRORS.INTERNAL_ERROR.rpc, message: v.message };
      return { status: v.status, body: { jsonrpc: '2.0', id, error } };
    };
    // Strict like every other body: only the JSON-RPC 2.0 request members.
    const unknown = unknownMembers(msg, JSONRPC_REQUEST_MEMBERS);
    if (unknown)
      return refuse({
        status: 400,
        code: 'INVALID_REQUEST',
        message: `JSON-RPC request: ${unknown.message}`,
        data: unknown.data,
      });
    const params = msg.params;
    if (params !== undefined && (typeof params !== 'object' || params === null || Array.isArray(params))) {
      return refuse({ status: 200, code: 'INVALID_PARAMS', message: 'params must be an object' });
    }
    const version = negotiate(method, params as Record<string, unknown> | undefined, headerVersion);
    if ('refused' in version) return refuse(version.refused);
    return this.dispatch(
      caller,
      method,
      id,
      params as Record<string, unknown> | undefined,
      version.stateless,
      startedAt,
      channel,
    );
  }

  /**
   * The JSON-RPC envelope: batches, non-objects, client responses, notifications, blocked
   * agents (all methods but tools/call) and ids are settled here.
   */
  private envelope(
    caller: Caller,
    body: unknown,
  ):
    | { reply: RpcReply; notification?: string }
    | { msg: Record<string, unknown>; id: JsonRpcId; method: string } {
    const { agentId } = caller;
    if (Array.isArray(body)) {
      this.recordRefusal(agentId, 'BATCH_NOT_SUPPORTED', { items: body.length });
      return { reply: rpcError(null, 'BATCH_NOT_SUPPORTED', 'JSON-RPC batches are not supported', 400) };
    }
    if (typeof body !== 'object' || body === null) {
      this.recordRefusal(agentId, 'INVALID_REQUEST', { reason: 'not an object' });
      return { reply: rpcError(null, 'INVALID_REQUEST', 'the body must be a JSON-RPC request object', 400) };
    }
    const msg = body as Record<string, unknown>;
    const hasId = Object.hasOwn(msg, 'id');
    const id = hasId && validId(msg.id) ? msg.id : null;
    if (
      msg.jsonrpc === '2.0' &&
      !Object.hasOwn(msg, 'method') &&
      (Object.hasOwn(msg, 'result') || Object.hasOwn(msg, 'error'))
    ) {
      // A response from the client: accepted (Streamable HTTP), though the gateway never
      // sends server-to-client requests.
      return { reply: { status: 202, body: null } };
    }
    if (msg.jsonrpc !== '2.0' || typeof msg.method !== 'string') {
      this.recordRefusal(agentId, 'INVALID_REQUEST', { reason: 'jsonrpc or method missing' });
      return { reply: rpcError(id, 'INVALID_REQUEST', 'jsonrpc must be "2.0" and method a string', 400) };
    }
    // A notification: accepted, never answered (JSON-RPC 2.0 §4.1).
    if (!hasId) return { reply: { status: 202, body: null }, notification: msg.method };
    if (caller.blocked && msg.method !== 'tools/call') {
      // tools/call goes on to the call path, which records its terminal tool_call refusal.
      this.recordRefusal(agentId, 'AGENT_BLOCKED', { method: clip(msg.method, 64) });
      return { reply: rpcError(id, 'AGENT_BLOCKED', 'this agent identity is blocked by an operator') };
    }
    if (id === null) {
      this.recordRefusal(agentId, 'INVALID_REQUEST', { reason: 'id must be a string or an integer' });
      return { reply: rpcError(null, 'INVALID_REQUEST', invalidIdMessage(msg.id), 400) };
    }
    return { msg, id, method: msg.method };
  }

  /** Answers a request whose envelope and protocol version were accepted. */
  private async dispatch(
    caller: Caller,
    method: string,
    id: JsonRpcId,
    params: Record<string, unknown> | undefined,
    stateless: boolean,
    startedAt: bigint,
    channel: ClientChannel,
  ): Promise<RpcReply> {
    const ok = (result: Record<string, unknown>): RpcReply => ({
      status: 200,
      body: { jsonrpc: '2.0', id, result: stateless ? { resultType: 'complete', ...result } : result },
    });
    const capabilities = async () =>
      this.controls.capabilities ? await this.controls.capabilities() : { tools: { listChanged: false } };
    // A stateless request's capabilities travel with it (its upstream connection declares them).
    if (stateless) {
      const meta = (params?._meta ?? {}) as Record<string, unknown>;
      channel.declaredCapabilities = meta[META_CAPS] as Record<string, unknown>;
    }
    const request: MethodRequest = { caller, id, method, params, stateless, channel, startedAt };
    switch (method) {
      case 'initialize': {
        const requested = params?.protocolVersion;
        const version =
          typeof requested === 'string' && (HANDSHAKE_VERSIONS as readonly string[]).includes(requested)
            ? requested
            : HANDSHAKE_VERSIONS[0];
        return ok({
          protocolVersion: version,
          capabilities: await capabilities(),
          serverInfo: SERVER_INFO,
        });
      }
      case 'server/discover':
        return ok({
          supportedVersions: [...STATELESS_VERSIONS, ...HANDSHAKE_VERSIONS],
          capabilities: await capabilities(),
          serverInfo: SERVER_INFO,
        });
      case 'ping':
        return ok({});
      case 'tools/list':
        // The relay pages the list with the gateway's cursor when it is composed in.
        if (this.controls.methods?.has(method)) break;
        return ok({
          tools: this.controls.listTools ? this.controls.listTools() : this.upstreams.listTools(),
        });
      case 'tools/call': {
        const { _meta: _ignored, ...callParams } = params ?? {};
        const answer = await this.calls.call(
          caller,
          callParams,
          startedAt,
          this.controls.callLink?.(request),
        );
        // A user's authorization an upstream needs reaches a client that can open URLs as one.
        const r = declaresUrlElicitation(this.controls.declaredCapabilities?.(channel))
          ? asUrlElicitation(answer)
          : answer;
        if ('result' in r) return ok(r.result);
        return { status: 200, body: { jsonrpc: '2.0', id, error: r.error } };
      }
    }
    const handler = this.controls.methods?.get(method);
    if (!handler) return rpcError(id, 'METHOD_NOT_FOUND', 'method not found');
    const r = await handler(request);
    if ('result' in r) return ok(r.result);
    return { status: 200, body: { jsonrpc: '2.0', id, error: r.error } };
  }
}

/** A refusal before dispatch: its HTTP status, code, message and extra error data. */
interface Refused {
  status: number;
  code: ErrorCode;
  message: string;
  data?: Record<string, unknown>;
}

/**
 * The protocol revision of a request: stateless 2026-07-28 when `_meta` names it (it must
 * agree with the header and carry client capabilities), else a handshake-era revision.
 */
function negotiate(
  method: string,
  params: Record<string, unknown> | undefined,
  headerVersion: string | undefined,
): { stateless: boolean } | { refused: Refused } {
  const meta = params?._meta as Record<string, unknown> | undefined;
  const metaVersion = meta && typeof meta === 'object' ? meta[META_VERSION] : undefined;
  if (metaVersion !== undefined) {
    if (typeof metaVersion !== 'string' || !(STATELESS_VERSIONS as readonly string[]).includes(metaVersion))
      return {
        refused: {
          status: 400,
          code: 'INVALID_REQUEST',
          message: 'unsupported protocol version in _meta',
          data: { supported: [...STATELESS_VERSIONS] },
        },
      };
    if (headerVersion !== undefined && headerVersion !== metaVersion)
      return {
        refused: {
          status: 400,
          code: 'INVALID_REQUEST',
          message: 'MCP-Protocol-Version header does not match _meta',
        },
      };
    if (typeof meta?.[META_CAPS] !== 'object' || meta[META_CAPS] === null)
      return {
        refused: {
          status: 200,
          code: 'INVALID_PARAMS',
          message: `_meta["${META_CAPS}"] is required on stateless requests`,
        },
      };
    return { stateless: true };
  }
  if (
    headerVersion !== undefined &&
    method !== 'initialize' &&
    !(HANDSHAKE_VERSIONS as readonly string[]).includes(headerVersion)
  )
    return {
      refused: {
        status: 400,
        code: 'INVALID_REQUEST',
        message:
          headerVersion === STATELESS_VERSIONS[0]
            ? `${headerVersion} requests carry their protocol version and client capabilities in params._meta`
            : 'unsupported MCP-Protocol-Version',
        data: { supported: [...HANDSHAKE_VERSIONS, ...STATELESS_VERSIONS] },
      },
    };
  return { stateless: false };
}

/**
 * Why a JSON-RPC id was refused (JSON-RPC 2.0 §4: a String, Number or Null; cmcp takes strings
 * and safe integers only, null is refused — field case C-MCP-2), naming the id as sent so the
 * caller can find the request: `1.5` is named, not reported as null.
 */
/** The refusal message for an id that is not a string or a safe integer. */
export function invalidIdMessage(id: unknown): string {
  const rule = 'must be a string or an integer';
  if (id === null) return `id ${rule} (null is not allowed)`;
  if (typeof id === 'number') {
    if (Number.isInteger(id)) return `id ${id} ${rule} within ±(2^53 − 1) (RFC 8259 §6)`;
    return `id ${Number.isFinite(id) ? id : JSON.stringify(id)} ${rule} (it has a fraction)`;
  }
  if (typeof id === 'boolean') return `id ${id} ${rule}`;
  return `id ${rule}, not ${Array.isArray(id) ? 'an array' : 'an object'}`;
}
