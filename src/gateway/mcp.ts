/**
 * Inbound MCP over Streamable HTTP (design §8): JSON-RPC 2.0 requests POSTed to `/mcp`,
 * answered with `application/json`. The gateway holds no MCP protocol session: handshake-era
 * clients (`initialize` 2025-06-18 / 2025-11-25) and stateless 2026-07-28 requests (protocol
 * version and client capabilities in each request's `_meta`) are served by the same code.
 */

import { CmcpError, clip, type ErrorCode } from '@cmcp/verify/errors/index';
import type { CallPipeline } from '../call/pipeline.js';
import type { ToolDefinition, UpstreamPool } from '../upstream/pool.js';
import { JSONRPC_REQUEST_MEMBERS, unknownMembers } from './strict-body.js';

/** What `tools/list` shows and who is blocked (issue 6); defaults: live tools, nobody. */
export interface McpControls {
  /** The tools agents see (the catalog's approved definitions when a catalog is configured). */
  listTools?: () => ToolDefinition[];
  isBlocked?: (agentId: string) => boolean;
}

/** Protocol revisions answered by `initialize` (newest first). */
export const HANDSHAKE_VERSIONS = ['2025-11-25', '2025-06-18'] as const;
/** Stateless protocol revisions (no handshake; `_meta` on every request). */
export const STATELESS_VERSIONS = ['2026-07-28'] as const;
const META_VERSION = 'io.modelcontextprotocol/protocolVersion';
const META_CAPS = 'io.modelcontextprotocol/clientCapabilities';

export type JsonRpcId = string | number;

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
  const e = new CmcpError(code, message);
  return {
    status,
    body: { jsonrpc: '2.0', id, error: { code: e.rpc, message, data: { error_code: code, ...data } } },
  };
}

function validId(id: unknown): id is JsonRpcId {
  return typeof id === 'string' || (typeof id === 'number' && Number.isSafeInteger(id));
}

export class McpEndpoint {
  constructor(
    private readonly pipeline: CallPipeline,
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
   * @param headerVersion the `MCP-Protocol-Version` header, if sent.
   */
  async handle(
    agentId: string,
    body: unknown,
    headerVersion: string | undefined,
    startedAt: bigint,
  ): Promise<RpcReply> {
    if (Array.isArray(body)) {
      this.recordRefusal(agentId, 'BATCH_NOT_SUPPORTED', { items: body.length });
      return rpcError(null, 'BATCH_NOT_SUPPORTED', 'JSON-RPC batches are not supported', 400);
    }
    if (typeof body !== 'object' || body === null) {
      this.recordRefusal(agentId, 'INVALID_REQUEST', { reason: 'not an object' });
      return rpcError(null, 'INVALID_REQUEST', 'the body must be a JSON-RPC request object', 400);
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
      return { status: 202, body: null };
    }
    if (msg.jsonrpc !== '2.0' || typeof msg.method !== 'string') {
      this.recordRefusal(agentId, 'INVALID_REQUEST', { reason: 'jsonrpc or method missing' });
      return rpcError(id, 'INVALID_REQUEST', 'jsonrpc must be "2.0" and method a string', 400);
    }
    if (!hasId) {
      // A notification: accepted, never answered (JSON-RPC 2.0 §4.1).
      return { status: 202, body: null };
    }
    if (this.controls.isBlocked?.(agentId) && msg.method !== 'tools/call') {
      // tools/call goes on to the pipeline, which records its terminal tool_call refusal.
      this.recordRefusal(agentId, 'AGENT_BLOCKED', { method: clip(msg.method, 64) });
      return rpcError(
        validId(msg.id) ? msg.id : null,
        'AGENT_BLOCKED',
        'this agent identity is blocked by an operator',
      );
    }
    if (!validId(msg.id)) {
      this.recordRefusal(agentId, 'INVALID_REQUEST', { reason: 'id must be a string or an integer' });
      return rpcError(
        null,
        'INVALID_REQUEST',
        'id must be a string or an integer (null is not allowed)',
        400,
      );
    }
    // A tools/call refused here still ends in its one terminal tool_call entry (design §3).
    const refuse = (
      status: number,
      code: ErrorCode,
      message: string,
      data: Record<string, unknown> = {},
    ): RpcReply => {
      if (msg.method !== 'tools/call') return rpcError(id, code, message, status, data);
      const r = this.pipeline.refuseEnvelope(agentId, code, message, startedAt);
      const error =
        'error' in r ? { ...r.error, data: { ...r.error.data, ...data } } : { code: -32603, message };
      return { status, body: { jsonrpc: '2.0', id, error } };
    };
    // Strict like every other body (issue 16 item 5): only JSON-RPC 2.0 request members.
    const unknown = unknownMembers(msg, JSONRPC_REQUEST_MEMBERS);
    if (unknown) return refuse(400, 'INVALID_REQUEST', `JSON-RPC request: ${unknown.message}`, unknown.data);
    const params = msg.params;
    if (params !== undefined && (typeof params !== 'object' || params === null || Array.isArray(params))) {
      return refuse(200, 'INVALID_PARAMS', 'params must be an object');
    }

    // Stateless 2026-07-28: the version travels in _meta and must agree with the header.
    const meta = (params as { _meta?: Record<string, unknown> } | undefined)?._meta;
    const metaVersion = meta && typeof meta === 'object' ? meta[META_VERSION] : undefined;
    let stateless = false;
    if (metaVersion !== undefined) {
      if (
        typeof metaVersion !== 'string' ||
        !(STATELESS_VERSIONS as readonly string[]).includes(metaVersion)
      ) {
        return refuse(400, 'INVALID_REQUEST', 'unsupported protocol version in _meta', {
          supported: [...STATELESS_VERSIONS],
        });
      }
      if (headerVersion !== undefined && headerVersion !== metaVersion) {
        return refuse(400, 'INVALID_REQUEST', 'MCP-Protocol-Version header does not match _meta');
      }
      if (typeof meta?.[META_CAPS] !== 'object' || meta[META_CAPS] === null) {
        return refuse(200, 'INVALID_PARAMS', `_meta["${META_CAPS}"] is required on stateless requests`);
      }
      stateless = true;
    } else if (
      headerVersion !== undefined &&
      msg.method !== 'initialize' &&
      !([...HANDSHAKE_VERSIONS, '2025-03-26'] as string[]).includes(headerVersion)
    ) {
      return refuse(
        400,
        'INVALID_REQUEST',
        headerVersion === STATELESS_VERSIONS[0]
          ? `${headerVersion} requests carry their protocol version and client capabilities in params._meta`
          : 'unsupported MCP-Protocol-Version',
        { supported: [...HANDSHAKE_VERSIONS, ...STATELESS_VERSIONS] },
      );
    }

    const ok = (result: Record<string, unknown>): RpcReply => ({
      status: 200,
      body: { jsonrpc: '2.0', id, result: stateless ? { resultType: 'complete', ...result } : result },
    });
    switch (msg.method) {
      case 'initialize': {
        const requested = (params as { protocolVersion?: unknown } | undefined)?.protocolVersion;
        const version =
          typeof requested === 'string' && (HANDSHAKE_VERSIONS as readonly string[]).includes(requested)
            ? requested
            : HANDSHAKE_VERSIONS[0];
        return ok({
          protocolVersion: version,
          capabilities: { tools: { listChanged: false } },
          serverInfo: SERVER_INFO,
        });
      }
      case 'server/discover':
        return ok({
          supportedVersions: [...STATELESS_VERSIONS, ...HANDSHAKE_VERSIONS],
          capabilities: { tools: { listChanged: false } },
          serverInfo: SERVER_INFO,
        });
      case 'ping':
        return ok({});
      case 'tools/list':
        return ok({
          tools: this.controls.listTools ? this.controls.listTools() : this.upstreams.listTools(),
        });
      case 'tools/call': {
        const { _meta: _ignored, ...callParams } = (params ?? {}) as Record<string, unknown>;
        const r = await this.pipeline.call(agentId, callParams, startedAt);
        if ('result' in r) return ok(r.result);
        return { status: 200, body: { jsonrpc: '2.0', id, error: r.error } };
      }
      default:
        return rpcError(id, 'METHOD_NOT_FOUND', 'method not found');
    }
  }
}
