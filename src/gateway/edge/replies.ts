/**
 * The HTTP edge's error bodies (docs/spec/errors.md, docs/spec/mcp.md#inbound): REST routes answer `{"error":{"error_code",
 * "message", …}}` with the registry's HTTP status; JSON-RPC routes (`config.jsonRpc`) answer a
 * JSON-RPC error with `id: null` and `data.error_code`. Codes come only from the registry.
 */

import type { FastifyReply, FastifyRequest } from 'fastify';
import { CmcpError, ERRORS, type ErrorCode } from '../../errors/index.js';
import { isStoreWriteFailure } from '../../store/sqlite/db.js';
import { classifyBodyError } from './bodies.js';
import type { RefusalSink } from './refusals.js';

declare module 'fastify' {
  interface FastifyRequest {
    /** Set in onRequest: an unauthenticated `/mcp` request, answered 401 once its body is read. */
    mcpUnauthenticated: boolean;
  }
  interface FastifyContextConfig {
    /** The route speaks JSON-RPC (`/mcp`): its errors are JSON-RPC error objects. */
    jsonRpc?: boolean;
  }
}

/** True when the matched route answers in JSON-RPC. */
export function isJsonRpc(req: FastifyRequest): boolean {
  return req.routeOptions.config?.jsonRpc === true;
}

/** The request's JSON-RPC id if it is a string or a safe integer, else null. */
export function readableId(body: unknown): string | number | null {
  const raw = (body as { id?: unknown } | null)?.id;
  return typeof raw === 'string' || (typeof raw === 'number' && Number.isSafeInteger(raw)) ? raw : null;
}

/** A REST error reply with the code's registered HTTP status. */
export function sendError(
  reply: FastifyReply,
  code: ErrorCode,
  message: string,
  extra: Record<string, unknown> = {},
) {
  return reply.code(ERRORS[code].http).send({ error: { error_code: code, message, ...extra } });
}

/**
 * The one JSON-RPC 2.0 error response body (§5.1) of the gateway's own errors: the registry's
 * JSON-RPC code, and the cmcp code in `data.error_code`.
 */
export function jsonRpcError(
  id: string | number | null,
  code: ErrorCode,
  message: string,
  data: Record<string, unknown> = {},
): Record<string, unknown> {
  return {
    jsonrpc: '2.0',
    id,
    error: { code: ERRORS[code].rpc, message, data: { error_code: code, ...data } },
  };
}

/** A JSON-RPC error reply (id null: the request could not be read or was refused before it). */
export function sendRpcError(
  reply: FastifyReply,
  code: ErrorCode,
  message: string,
  status = ERRORS[code].http,
) {
  return reply.code(status).send(jsonRpcError(null, code, message));
}

/**
 * The `/mcp` 401 (JSON-RPC error UNAUTHENTICATED) with `id`. Authentication is decided in
 * `onRequest`, before the body is parsed; for `/mcp` the refusal waits for `preHandler`, when
 * the body (and its id) is there, so the 401 answers with the request's JSON-RPC id when it
 * could be read (docs/spec/refinements.md); a body that cannot be parsed still gets the
 * 401, with id null (errorHandler). The failure is recorded when it is decided.
 */
export function sendMcpUnauthenticated(reply: FastifyReply, id: string | number | null) {
  // The agent hook may have set the OAuth challenge (resource_metadata) already.
  if (!reply.hasHeader('WWW-Authenticate')) reply.header('WWW-Authenticate', 'Bearer realm="cmcp"');
  return reply.code(401).send({
    jsonrpc: '2.0',
    id,
    error: {
      code: ERRORS.UNAUTHENTICATED.rpc,
      message: 'authentication required',
      data: { error_code: 'UNAUTHENTICATED' },
    },
  });
}

/**
 * The application's error handler: a CmcpError leaves with its code and data; fastify's own
 * errors (body too large, media type, unparsable body) get their registered codes and are
 * recorded (bodies.ts); anything else is an INTERNAL_ERROR whose details stay in the log.
 * @param maxRequestBytes the body limit, named in PAYLOAD_TOO_LARGE messages.
 * @param recordRefusal the aggregated refusal record, told each refused body.
 */
export function errorHandler(maxRequestBytes: number, recordRefusal: RefusalSink = () => undefined) {
  return (err: Error & { statusCode?: number; code?: string }, req: FastifyRequest, reply: FastifyReply) => {
    // An unauthenticated /mcp request whose body did not parse: still the 401, with id null.
    if (req.mcpUnauthenticated) return sendMcpUnauthenticated(reply, null);
    const rpc = isJsonRpc(req);
    let code: ErrorCode = 'INTERNAL_ERROR';
    let message = 'internal error';
    let extra: Record<string, unknown> = {};
    const body = err instanceof CmcpError ? null : classifyBodyError(err, rpc, maxRequestBytes);
    if (err instanceof CmcpError) {
      code = err.code;
      message = err.message;
      extra = err.data;
    } else if (body) {
      ({ code, message } = body);
      const route = `${req.method} ${req.routeOptions.url ?? 'unknown'}`;
      const operator = req.operatorId ? { operator_id: req.operatorId } : {};
      recordRefusal(req.agentId || null, code, { route, reason: body.reason, ...operator });
    } else if (isStoreWriteFailure(err)) {
      // The store could not write (a full disk, an unreachable database): unavailable for now,
      // not a fault of this code. The code only, no message (it may name paths).
      code = 'STORE_WRITE_FAILED';
      message = 'the store could not commit the write; retry later';
      req.log.error({ code: err.code }, 'store write failed');
    } else if (err.statusCode === 400) {
      code = rpc ? 'PARSE_ERROR' : 'INVALID_REQUEST';
      message = rpc ? 'the body is not valid JSON' : 'bad request';
    } else {
      req.log.error({ err: err.message, code: err.code }, 'unhandled error');
    }
    if (rpc) return sendRpcError(reply, code, message);
    return sendError(reply, code, message, extra);
  };
}
