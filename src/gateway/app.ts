/**
 * The fastify application: authentication, `POST /mcp`, and the REST routes for sessions
 * (design §1, §8). Errors leave as JSON with a stable `error_code`; never a stack trace.
 */

import { CmcpError, ERRORS, type ErrorCode } from '@cmcp/verify/errors/index';
import { fromB64u } from '@cmcp/verify/format/canonical';
import Fastify, {
  type FastifyBaseLogger,
  type FastifyInstance,
  type FastifyReply,
  type FastifyRequest,
} from 'fastify';
import type { Logger } from 'pino';
import type { ExecutionRegistry } from '../execution/registry.js';
import type { SessionService } from '../session/service.js';
import type { Authenticator } from './auth.js';
import type { McpEndpoint } from './mcp.js';
import { registerMcpUnauthenticated, sendMcpUnauthenticated } from './mcp-unauthenticated.js';
import { BODY_MEMBERS, strictBody, strictOrNull } from './strict-body.js';

declare module 'fastify' {
  interface FastifyRequest {
    agentId: string;
    operatorId: string;
    startedAt: bigint;
  }
}

/** Operator actions behind /operator/* (issue 6 item 6); implemented in operator.ts. */
export interface OperatorApi {
  isBlocked(agentId: string): boolean;
  reloadPolicy(operatorId: string, body: unknown): Record<string, unknown>;
  blockAgent(operatorId: string, agentId: string, body: unknown): Record<string, unknown>;
  unblockAgent(operatorId: string, agentId: string): Record<string, unknown>;
  status(): Record<string, unknown>;
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
  /** Records other refused requests (operator credential misuse, blocked agents). */
  recordRefusal?: (agentId: string | null, code: ErrorCode, detail: Record<string, unknown>) => void;
  operator?: OperatorApi;
}

/** The matched route pattern (e.g. `/sessions/:id/close`), or the raw path when none matched. */
function routeOf(req: FastifyRequest): string {
  return req.routeOptions.url ?? req.url.split('?')[0] ?? '';
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
    // Execution ids are up to 200 printable characters, percent-encoded in paths.
    routerOptions: { maxParamLength: 1024 },
    // Errors raised by the router itself (bad percent-encoding, over-long parameters) leave in
    // cmcp's error format, without echoing the URL.
    frameworkErrors: (_err, _req, reply) => {
      void (reply as FastifyReply)
        .code(400)
        .send({ error: { error_code: 'INVALID_REQUEST', message: 'malformed request URL' } });
    },
  });
  // JSON only: without this, fastify's default text/plain parser would hand strings to the routes.
  app.removeContentTypeParser('text/plain');
  app.decorateRequest('agentId', '');
  app.decorateRequest('operatorId', '');
  app.decorateRequest('startedAt', 0n);
  registerMcpUnauthenticated(app);
  const record = d.recordRefusal ?? (() => undefined);

  app.addHook('onRequest', async (req, reply) => {
    req.startedAt = process.hrtime.bigint();
    // Decisions use the matched route pattern, never the raw URL: `/%6Fperator/…` is routed
    // to the operator handlers and must be authenticated as an operator request.
    const routePath = routeOf(req);
    if (routePath === '/healthz') return;
    const route = req.routeOptions.url ?? 'unknown';
    if (routePath === '/operator' || routePath.startsWith('/operator/')) {
      // Operator routes: operator tokens only; an agent token is refused here.
      const op = d.auth.operator(req.headers.authorization);
      if (!op) {
        const isAgent = req.headers.authorization ? d.auth.authenticate(req.headers.authorization) : null;
        record(isAgent, 'OPERATOR_UNAUTHENTICATED', { route, agent_token: isAgent !== null });
        reply.header('WWW-Authenticate', 'Bearer realm="cmcp-operator"');
        return sendError(
          reply,
          'OPERATOR_UNAUTHENTICATED',
          isAgent !== null
            ? 'operator routes do not accept agent credentials'
            : 'operator authentication required',
        );
      }
      req.operatorId = op;
      return;
    }
    const agent = d.auth.authenticate(req.headers.authorization);
    if (!agent && d.auth.operator(req.headers.authorization)) {
      record(null, 'OPERATOR_CREDENTIAL_REFUSED', { route });
      const message = 'operator credentials are not accepted on agent routes';
      if (routePath === '/mcp') {
        return reply.code(ERRORS.OPERATOR_CREDENTIAL_REFUSED.http).send({
          jsonrpc: '2.0',
          id: null,
          error: {
            code: ERRORS.OPERATOR_CREDENTIAL_REFUSED.rpc,
            message,
            data: { error_code: 'OPERATOR_CREDENTIAL_REFUSED' },
          },
        });
      }
      return sendError(reply, 'OPERATOR_CREDENTIAL_REFUSED', message);
    }
    if (!agent) {
      d.recordAuthFailure(req.routeOptions.url ?? 'unknown');
      reply.header('WWW-Authenticate', 'Bearer realm="cmcp"');
      if (routePath === '/mcp') {
        req.mcpUnauthenticated = true; // answered in preHandler, with the request's id (issue 16)
        return;
      }
      return sendError(reply, 'UNAUTHENTICATED', 'authentication required');
    }
    req.agentId = agent;
    // A blocked agent: refused on every REST route here; on /mcp the MCP layer answers with a
    // JSON-RPC error (and a tools/call still gets its terminal tool_call entry).
    if (d.operator?.isBlocked(agent) && routePath !== '/mcp') {
      record(agent, 'AGENT_BLOCKED', { route });
      return sendError(reply, 'AGENT_BLOCKED', 'this agent identity is blocked by an operator');
    }
  });

  app.setErrorHandler((err: Error & { statusCode?: number; code?: string }, req, reply) => {
    if (req.mcpUnauthenticated) return sendMcpUnauthenticated(reply, null);
    const isMcp = routeOf(req) === '/mcp';
    let code: ErrorCode = 'INTERNAL_ERROR';
    let message = 'internal error';
    let extra: Record<string, unknown> = {};
    if (err instanceof CmcpError) {
      code = err.code;
      message = err.message;
      extra = err.data;
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
    return sendError(reply, code, message, extra);
  });
  app.setNotFoundHandler((_req, reply) => sendError(reply, 'NOT_FOUND', 'not found'));

  app.get('/healthz', async () => ({ status: 'ok' }));

  app.post('/mcp', async (req: FastifyRequest, reply) => {
    const hv = req.headers['mcp-protocol-version'];
    let r: Awaited<ReturnType<McpEndpoint['handle']>>;
    try {
      r = await d.mcp.handle(req.agentId, req.body, typeof hv === 'string' ? hv : undefined, req.startedAt);
    } catch (e) {
      // Answer the request that caused it, by its own id, without internals.
      req.log.error({ err: (e as Error).message }, 'MCP request fault');
      const raw = (req.body as { id?: unknown } | null)?.id;
      const id =
        typeof raw === 'string' || (typeof raw === 'number' && Number.isSafeInteger(raw)) ? raw : null;
      return reply.code(200).send({
        jsonrpc: '2.0',
        id,
        error: {
          code: ERRORS.INTERNAL_ERROR.rpc,
          message: 'internal error',
          data: { error_code: 'INTERNAL_ERROR' },
        },
      });
    }
    if (r.body === null) return reply.code(202).send();
    return reply.code(r.status).type('application/json').send(r.body);
  });
  // No server-initiated stream and no protocol session to delete (design §8).
  app.get('/mcp', async (_req, reply) => reply.code(405).header('Allow', 'POST').send());
  app.delete('/mcp', async (_req, reply) => reply.code(405).header('Allow', 'POST').send());

  app.post('/sessions', async (req, reply) => {
    const body = strictBody(req.body, BODY_MEMBERS.openSession, 'POST /sessions');
    let challenge: string | null = null;
    if (body.challenge !== undefined && body.challenge !== null) {
      let bytes = -1;
      try {
        // Exactly the form verifiers accept: unpadded base64url, 8–64 bytes.
        if (typeof body.challenge === 'string' && body.challenge.length <= 86)
          bytes = fromB64u(body.challenge).length;
      } catch {
        bytes = -1;
      }
      if (
        bytes < 8 ||
        bytes > 64 ||
        fromB64u(body.challenge as string).toString('base64url') !== body.challenge
      )
        throw new CmcpError('INVALID_REQUEST', 'challenge must be unpadded base64url of 8–64 bytes');
      challenge = body.challenge;
    }
    const s = await d.sessions.create(req.agentId, { challenge });
    return reply.code(201).send(s);
  });
  app.post<{ Params: { id: string } }>('/sessions/:id/close', async (req) => {
    strictBody(req.body, BODY_MEMBERS.closeSession, 'POST /sessions/{id}/close');
    return d.sessions.close(req.agentId, req.params.id);
  });
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

  if (d.operator) {
    const op = d.operator;
    app.get('/operator/status', async () => op.status());
    app.post('/operator/policy/reload', async (req) =>
      op.reloadPolicy(
        req.operatorId,
        strictOrNull(req.body, BODY_MEMBERS.policyReload, 'POST /operator/policy/reload'),
      ),
    );
    app.post<{ Params: { agent_id: string } }>('/operator/agents/:agent_id/block', async (req) =>
      op.blockAgent(
        req.operatorId,
        req.params.agent_id,
        strictBody(req.body, BODY_MEMBERS.blockAgent, 'POST /operator/agents/{agent_id}/block'),
      ),
    );
    app.post<{ Params: { agent_id: string } }>('/operator/agents/:agent_id/unblock', async (req) => {
      strictBody(req.body, BODY_MEMBERS.unblockAgent, 'POST /operator/agents/{agent_id}/unblock');
      return op.unblockAgent(req.operatorId, req.params.agent_id);
    });
  }

  return app;
}
