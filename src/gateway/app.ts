/**
 * The fastify application: authentication, `POST /mcp`, and the REST routes for sessions
 * (design §1, §8). Errors leave as JSON with a stable `error_code`; never a stack trace.
 */
import Fastify, {
  type FastifyBaseLogger,
  type FastifyInstance,
  type FastifyReply,
  type FastifyRequest,
} from 'fastify';
import type { Logger } from 'pino';
import { CmcpError, ERRORS, type ErrorCode } from '../errors/index.js';
import type { ExecutionRegistry } from '../execution/registry.js';
import type { SessionService } from '../session/service.js';
import type { Authenticator } from './auth.js';
import type { McpEndpoint } from './mcp.js';

declare module 'fastify' {
  interface FastifyRequest {
    agentId: string;
    startedAt: bigint;
  }
}

export interface AppDeps {
  logger: Logger;
  auth: Authenticator;
  mcp: McpEndpoint;
  sessions: SessionService;
  executions: ExecutionRegistry;
  maxRequestBytes: number;
  /** Records unauthenticated requests in the gateway chain. */
  recordAuthFailure: (route: string) => void;
}

function sendError(
  reply: FastifyReply,
  code: ErrorCode,
  message: string,
  extra: Record<string, unknown> = {},
) {
  return reply.code(ERRORS[code].http).send({ error: { error_code: code, message, ...extra } });
}

/** Builds (but does not start) the HTTP server. */
export function buildApp(d: AppDeps): FastifyInstance {
  const app = Fastify({
    loggerInstance: d.logger as unknown as FastifyBaseLogger,
    bodyLimit: d.maxRequestBytes,
    // Request logs carry method, url and status only: no headers (tokens), no bodies (arguments).
  });
  app.decorateRequest('agentId', '');
  app.decorateRequest('startedAt', 0n);

  app.addHook('onRequest', async (req, reply) => {
    req.startedAt = process.hrtime.bigint();
    if (req.url === '/healthz') return;
    const agent = d.auth.authenticate(req.headers.authorization);
    if (!agent) {
      d.recordAuthFailure(req.routeOptions.url ?? 'unknown');
      reply.header('WWW-Authenticate', 'Bearer realm="cmcp"');
      if (req.url.startsWith('/mcp')) {
        return reply.code(401).send({
          jsonrpc: '2.0',
          id: null,
          error: {
            code: ERRORS.UNAUTHENTICATED.rpc,
            message: 'authentication required',
            data: { error_code: 'UNAUTHENTICATED' },
          },
        });
      }
      return sendError(reply, 'UNAUTHENTICATED', 'authentication required');
    }
    req.agentId = agent;
  });

  app.setErrorHandler((err: Error & { statusCode?: number; code?: string }, req, reply) => {
    const isMcp = req.url.startsWith('/mcp');
    let code: ErrorCode = 'INTERNAL_ERROR';
    let message = 'internal error';
    if (err instanceof CmcpError) {
      code = err.code;
      message = err.message;
    } else if (err.code === 'FST_ERR_CTP_BODY_TOO_LARGE' || err.statusCode === 413) {
      code = 'PAYLOAD_TOO_LARGE';
      message = `request body exceeds the limit of ${d.maxRequestBytes} bytes`;
    } else if (err.code === 'FST_ERR_CTP_INVALID_MEDIA_TYPE' || err.statusCode === 415) {
      code = 'UNSUPPORTED_MEDIA_TYPE';
      message = 'Content-Type must be application/json';
    } else if (err.statusCode === 400) {
      code = isMcp ? 'PARSE_ERROR' : 'INVALID_REQUEST';
      message = isMcp ? 'the body is not valid JSON' : 'bad request';
    } else {
      req.log.error({ err: err.message, code: err.code }, 'unhandled error');
    }
    if (isMcp) {
      const spec = ERRORS[code];
      return reply
        .code(spec.http)
        .send({ jsonrpc: '2.0', id: null, error: { code: spec.rpc, message, data: { error_code: code } } });
    }
    return sendError(reply, code, message);
  });
  app.setNotFoundHandler((_req, reply) => sendError(reply, 'NOT_FOUND', 'not found'));

  app.get('/healthz', async () => ({ status: 'ok' }));

  app.post('/mcp', async (req: FastifyRequest, reply) => {
    const hv = req.headers['mcp-protocol-version'];
    const r = await d.mcp.handle(
      req.agentId,
      req.body,
      typeof hv === 'string' ? hv : undefined,
      req.startedAt,
    );
    if (r.body === null) return reply.code(202).send();
    return reply.code(r.status).type('application/json').send(r.body);
  });
  // No server-initiated stream and no protocol session to delete (design §8).
  app.get('/mcp', async (_req, reply) => reply.code(405).header('Allow', 'POST').send());
  app.delete('/mcp', async (_req, reply) => reply.code(405).header('Allow', 'POST').send());

  app.post('/sessions', async (req, reply) => {
    const body = (req.body ?? {}) as { challenge?: unknown };
    if (typeof body !== 'object' || Array.isArray(body))
      throw new CmcpError('INVALID_REQUEST', 'body must be an object');
    let challenge: string | null = null;
    if (body.challenge !== undefined && body.challenge !== null) {
      if (typeof body.challenge !== 'string' || !/^[A-Za-z0-9_-]{1,172}$/.test(body.challenge))
        throw new CmcpError('INVALID_REQUEST', 'challenge must be base64url, at most 128 bytes');
      challenge = body.challenge;
    }
    const s = await d.sessions.create(req.agentId, { challenge });
    return reply.code(201).send(s);
  });
  app.post<{ Params: { id: string } }>('/sessions/:id/close', async (req) =>
    d.sessions.close(req.agentId, req.params.id),
  );
  app.get<{ Params: { id: string } }>('/sessions/:id/claim', async (req) =>
    d.sessions.claim(req.agentId, req.params.id),
  );
  app.get<{ Params: { id: string } }>('/sessions/:id/audit', async (req) =>
    d.sessions.bundle(req.agentId, req.params.id),
  );

  // Read-only view of an execution for the agent that owns it (design §6). Never invokes anything.
  app.get<{ Params: { id: string } }>('/executions/:id', async (req) => {
    const row = d.executions.get(req.agentId, req.params.id);
    if (!row) throw new CmcpError('EXECUTION_NOT_FOUND', 'unknown execution');
    return {
      execution_id: row.execution_id,
      state: row.state,
      call_id: row.call_id,
      session_id: row.session_id,
      tool_name: row.tool_name,
      binding: row.binding,
      created_at: row.created_at,
      updated_at: row.updated_at,
      terminal_entry_hash: row.terminal_entry_hash,
    };
  });

  return app;
}
