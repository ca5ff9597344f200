/**
 * The agent plugin (docs/spec/mcp.md#inbound): one agent authentication hook and the per-agent
 * limits over its two children, agent MCP (`/mcp`, mcp/plugin.ts) and agent REST (`/sessions`,
 * `/executions`, rest/plugin.ts). The hook runs on the *matched* route (and on this plugin's
 * not-found handler, the root's), so a path's spelling cannot move a request from one
 * authentication to another.
 */
import type { FastifyInstance, FastifyReply, FastifyRequest } from 'fastify';
import type { Authenticator } from '../edge/credentials.js';
import type { RefusalSink } from '../edge/refusals.js';
import { isJsonRpc, readableId, sendError, sendMcpUnauthenticated, sendRpcError } from '../edge/replies.js';
import { type AgentLimits, registerAgentLimits } from './limits.js';
import { type AgentMcpOptions, agentMcpPlugin } from './mcp/plugin.js';
import { bearerJwt, type OAuthVerifier, TokenRefused } from './oauth/verifier.js';
import { type AgentRestOptions, agentRestPlugin } from './rest/plugin.js';

declare module 'fastify' {
  interface FastifyRequest {
    agentId: string;
    /** Decided once per request by the agent auth hook (operator kill switch). */
    agentBlocked: boolean;
    /** Cedar principal attributes from a JWT access token (null for static tokens). */
    agentTokenAttributes: Record<string, unknown> | null;
  }
}

/** What the agent plugin needs: who the caller is, what it may do, and its two children's parts. */
export interface AgentOptions {
  auth: Authenticator;
  /** JWT access tokens (the `oauth` section), or absent: static tokens only. */
  oauth?: OAuthVerifier;
  /** True when an operator blocked the agent (false without operator controls). */
  isBlocked(agentId: string): boolean;
  /** Told every agent a JWT access token authenticated. */
  onTokenAgent?: (agentId: string) => void;
  /** Records unauthenticated requests (rate-bounded, edge/refusals.ts). */
  recordAuthFailure(route: string): void;
  /** Records other refused requests (operator credentials here, blocked agents, limits). */
  recordRefusal: RefusalSink;
  /** Per-agent rate, in-flight, open-session and client-session limits (limits.ts); none without. */
  limits?: AgentLimits;
  mcp: Omit<AgentMcpOptions, 'limits' | 'recordRefusal'>;
  rest: Omit<AgentRestOptions, 'limits' | 'recordRefusal'>;
}

/**
 * The agent authentication hook: a known agent token (or dev mode's `dev`), never an operator
 * token. A blocked agent is refused here on REST routes; on JSON-RPC routes the MCP layer
 * answers it (a tools/call still gets its terminal tool_call entry).
 */
function agentAuth(d: AgentOptions) {
  return async (req: FastifyRequest, reply: FastifyReply) => {
    const route = req.routeOptions.url ?? 'unknown';
    const rpc = isJsonRpc(req);
    const header = req.headers.authorization;
    let agent = d.auth.authenticate(header);
    let refused: TokenRefused | null = null;
    const jwt = !agent && d.oauth ? bearerJwt(header) : null;
    if (jwt && d.oauth) {
      try {
        const p = await d.oauth.verify(jwt);
        agent = p.agentId;
        req.agentTokenAttributes = p.attributes;
        d.onTokenAgent?.(agent);
      } catch (e) {
        refused = e instanceof TokenRefused ? e : new TokenRefused('malformed', 'token not verifiable');
        req.log.info({ reason: refused.reason }, 'access token refused');
      }
    }
    if (!agent && d.auth.operator(header)) {
      d.recordRefusal(null, 'OPERATOR_CREDENTIAL_REFUSED', { route });
      const message = 'operator credentials are not accepted on agent routes';
      return rpc
        ? sendRpcError(reply, 'OPERATOR_CREDENTIAL_REFUSED', message)
        : sendError(reply, 'OPERATOR_CREDENTIAL_REFUSED', message);
    }
    if (!agent) {
      d.recordAuthFailure(route);
      reply.header('WWW-Authenticate', challenge(d.oauth, refused));
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

/**
 * The 401 challenge (RFC 6750 §3; with OAuth, RFC 9728 §5.1 `resource_metadata`, as the MCP
 * authorization spec asks). `error="invalid_token"` only when a token was presented and refused.
 */
function challenge(oauth: OAuthVerifier | undefined, refused: TokenRefused | null): string {
  if (!oauth) return 'Bearer realm="cmcp"';
  const error = refused ? ', error="invalid_token"' : '';
  return `Bearer realm="cmcp", resource_metadata="${oauth.metadataUrl()}"${error}`;
}

/** Registers the agent plugin at the root (its not-found handler is the root's). */
export async function agentPlugin(app: FastifyInstance, d: AgentOptions): Promise<void> {
  // The deferred `/mcp` 401 (edge/replies.ts sendMcpUnauthenticated), once the body is parsed.
  app.addHook('preHandler', async (req: FastifyRequest, reply) => {
    if (req.mcpUnauthenticated) return sendMcpUnauthenticated(reply, readableId(req.body));
  });
  if (d.limits) registerAgentLimits(app, d.limits, d.recordRefusal);
  app.addHook('onRequest', agentAuth(d));
  app.setNotFoundHandler((_req, reply) => sendError(reply, 'NOT_FOUND', 'not found'));
  const shared = { recordRefusal: d.recordRefusal, ...(d.limits ? { limits: d.limits } : {}) };
  app.register(agentMcpPlugin, { ...d.mcp, ...shared });
  app.register(agentRestPlugin, { ...d.rest, ...shared });
}
