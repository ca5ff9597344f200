/**
 * A 401 from `POST /mcp` answers with the request's JSON-RPC id when it could be read (docs/spec/refinements.md
 * item 4; docs/getting-started.md). Authentication is decided in `onRequest`, before the body is parsed; for `/mcp` the
 * refusal is deferred to `preHandler`, when the body (and its id) is there. A body that cannot
 * be parsed still gets the 401, with id null. The failure is recorded when it is decided.
 */
import { ERRORS } from '@cmcp/verify/errors/index';
import type { FastifyInstance, FastifyReply, FastifyRequest } from 'fastify';

declare module 'fastify' {
  interface FastifyRequest {
    /** Set in onRequest: an unauthenticated `/mcp` request, answered 401 once its body is read. */
    mcpUnauthenticated: boolean;
  }
}

/** The request's JSON-RPC id if it is a string or a safe integer, else null. */
export function readableId(body: unknown): string | number | null {
  const raw = (body as { id?: unknown } | null)?.id;
  return typeof raw === 'string' || (typeof raw === 'number' && Number.isSafeInteger(raw)) ? raw : null;
}

/** Sends the `/mcp` 401 (JSON-RPC error UNAUTHENTICATED) with `id`. */
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
 * Registers the deferred 401 in the agent routes plugin (the app decorates the request with
 * `mcpUnauthenticated: false`; the error handler answers a body that failed to parse).
 */
export function registerMcpUnauthenticated(app: FastifyInstance): void {
  app.addHook('preHandler', async (req: FastifyRequest, reply) => {
    if (req.mcpUnauthenticated) return sendMcpUnauthenticated(reply, readableId(req.body));
  });
}
