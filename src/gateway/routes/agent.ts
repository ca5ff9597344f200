/**
 * Agent routes (docs/spec/mcp.md, docs/spec/mcp.md#inbound): `POST /mcp` (JSON-RPC), the session routes and the read-only
 * execution view, behind one agent authentication hook. The hook runs on the *matched* route
 * of this plugin (and on its not-found handler), so a path's spelling cannot move a request
 * from one authentication to another.
 */
import { CmcpError, type ErrorCode } from '@cmcp/verify/errors/index';
import { fromB64u } from '@cmcp/verify/format/canonical';
import type { FastifyInstance, FastifyReply, FastifyRequest } from 'fastify';
import type { ExecutionRegistry } from '../../execution/registry.js';
import type { SessionService } from '../../session/service.js';
import type { Authenticator } from '../auth.js';
import type { McpEndpoint } from '../mcp.js';
import { registerMcpUnauthenticated } from '../mcp-unauthenticated.js';
import { isJsonRpc, sendError, sendRpcError } from '../replies.js';
import { bundleSchema, claimSchema, createSessionSchema, executionSchema } from '../schemas.js';
import { BODY_MEMBERS, strictBody } from '../strict-body.js';
import { type McpRouteDeps, registerMcpRoutes } from './mcp-routes.js';

declare module 'fastify' {
  interface FastifyRequest {
    agentId: string;
    /** Decided once per request by the agent auth hook (operator kill switch). */
    agentBlocked: boolean;
  }
}

/** Records a refused request in the gateway chain. */
export type RefusalSink = (agentId: string | null, code: ErrorCode, detail: Record<string, unknown>) => void;

export interface AgentRouteDeps {
  auth: Authenticator;
  mcp: McpEndpoint;
  sessions: SessionService;
  executions: ExecutionRegistry;
  /** True when an operator blocked the agent (false without operator controls). */
  isBlocked(agentId: string): boolean;
  /** Records unauthenticated requests (rate-bounded, auth-failures.ts). */
  recordAuthFailure(route: string): void;
  /** Records other refused requests (operator credentials here, blocked agents). */
  recordRefusal: RefusalSink;
  /** Client sessions (`Mcp-Session-Id`) and the requests waiting on clients (routes/mcp-routes.ts). */
  clientSessions: McpRouteDeps['clientSessions'];
  inflight: McpRouteDeps['inflight'];
}

/**
 * The agent authentication hook: a known agent token (or dev mode's `dev`), never an operator
 * token. A blocked agent is refused here on REST routes; on JSON-RPC routes the MCP layer
 * answers it (a tools/call still gets its terminal tool_call entry).
 */
function agentAuth(d: AgentRouteDeps) {
  return async (req: FastifyRequest, reply: FastifyReply) => {
    const route = req.routeOptions.url ?? 'unknown';
    const rpc = isJsonRpc(req);
    const header = req.headers.authorization;
    const agent = d.auth.authenticate(header);
    if (!agent && d.auth.operator(header)) {
      d.recordRefusal(null, 'OPERATOR_CREDENTIAL_REFUSED', { route });
      const message = 'operator credentials are not accepted on agent routes';
      return rpc
        ? sendRpcError(reply, 'OPERATOR_CREDENTIAL_REFUSED', message)
        : sendError(reply, 'OPERATOR_CREDENTIAL_REFUSED', message);
    }
    if (!agent) {
      d.recordAuthFailure(route);
      reply.header('WWW-Authenticate', 'Bearer realm="cmcp"');
      if (rpc) {
        // Answered in preHandler, once the body (and its JSON-RPC id) is parsed.
        req.mcpUnauthenticated = true;
        return;
      }
      return sendError(reply, 'UNAUTHENTICATED', 'authentication required');
    }
    req.agentId = agent;
    req.agentBlocked = d.isBlocked(agent);
    if (req.agentBlocked && !rpc) {
      d.recordRefusal(agent, 'AGENT_BLOCKED', { route });
      return sendError(reply, 'AGENT_BLOCKED', 'this agent identity is blocked by an operator');
    }
  };
}

/** `challenge` of `POST /sessions`: exactly the form verifiers accept, unpadded base64url of 8–64 bytes. */
function readChallenge(req: FastifyRequest): string | null {
  const problem = req.validationError?.validation?.[0]?.instancePath;
  if (problem === '') throw new CmcpError('INVALID_REQUEST', 'body must be an object');
  const challenge = (req.body as { challenge?: unknown } | null | undefined)?.challenge;
  if (challenge === undefined || challenge === null) return null;
  let bytes = -1;
  try {
    if (typeof challenge === 'string' && challenge.length <= 86) bytes = fromB64u(challenge).length;
  } catch {
    bytes = -1;
  }
  if (bytes < 8 || bytes > 64 || fromB64u(challenge as string).toString('base64url') !== challenge)
    throw new CmcpError('INVALID_REQUEST', 'challenge must be unpadded base64url of 8–64 bytes');
  return challenge as string;
}

/** The agent routes plugin (registered at the root: its not-found handler is the root's). */
export function agentRoutes(d: AgentRouteDeps) {
  return async (app: FastifyInstance) => {
    registerMcpUnauthenticated(app);
    app.addHook('onRequest', agentAuth(d));
    app.setNotFoundHandler((_req, reply) => sendError(reply, 'NOT_FOUND', 'not found'));

    registerMcpRoutes(app, d);

    app.post('/sessions', { schema: createSessionSchema, attachValidation: true }, async (req, reply) => {
      const challenge = readChallenge(req);
      strictBody(req.body, BODY_MEMBERS.openSession, 'POST /sessions');
      const s = await d.sessions.create(req.agentId, { challenge });
      return reply.code(201).send(s);
    });
    app.post<{ Params: { id: string } }>('/sessions/:id/close', { schema: claimSchema }, async (req) => {
      strictBody(req.body, BODY_MEMBERS.closeSession, 'POST /sessions/{id}/close');
      return d.sessions.close(req.agentId, req.params.id);
    });
    app.get<{ Params: { id: string } }>('/sessions/:id/claim', { schema: claimSchema }, async (req) =>
      d.sessions.claim(req.agentId, req.params.id),
    );
    app.get<{ Params: { id: string } }>('/sessions/:id/audit', { schema: bundleSchema }, async (req) =>
      d.sessions.bundle(req.agentId, req.params.id),
    );

    // Read-only view of an execution for the agent that owns it (docs/spec/execution.md). Never invokes anything.
    app.get<{ Params: { id: string } }>('/executions/:id', { schema: executionSchema }, async (req) => {
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
  };
}
