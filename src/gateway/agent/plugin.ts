/**
 * Agent routes (docs/spec/mcp.md, docs/spec/mcp.md#inbound): `POST /mcp` (JSON-RPC), the session routes and the read-only
 * execution view, behind one agent authentication hook. The hook runs on the *matched* route
 * of this plugin (and on its not-found handler), so a path's spelling cannot move a request
 * from one authentication to another.
 */
import { Readable } from 'node:stream';
import { setTimeout } from 'node:timers/promises';
import { CmcpError, type ErrorCode } from '@cmcp/verify/errors/index';
import { fromB64u } from '@cmcp/verify/format/canonical';
import type { FastifyInstance, FastifyReply, FastifyRequest } from 'fastify';
import type { ClaimTextPieces } from '../../claim/parts.js';
import type { AgentSessions, ExecutionReads } from '../../session/ports.js';
import type { Authenticator } from '../edge/credentials.js';
import { registerMcpUnauthenticated } from '../edge/mcp-unauthenticated.js';
import { isJsonRpc, sendError, sendRpcError } from '../edge/replies.js';
import { bundleSchema, claimSchema, createSessionSchema, executionSchema } from '../edge/schemas.js';
import { BODY_MEMBERS, strictBody } from '../edge/strict-body.js';
import { type AgentLimits, registerAgentLimits } from './limits.js';
import type { McpEndpoint } from './mcp/endpoint.js';
import { type McpRouteDeps, registerMcpRoutes } from './mcp/plugin.js';
import { bearerJwt, type OAuthVerifier, TokenRefused } from './oauth/index.js';

declare module 'fastify' {
  interface FastifyRequest {
    agentId: string;
    /** Decided once per request by the agent auth hook (operator kill switch). */
    agentBlocked: boolean;
    /** Cedar principal attributes from a JWT access token (null for static tokens). */
    agentTokenAttributes: Record<string, unknown> | null;
  }
}

/** Records a refused request in the gateway chain. */
export type RefusalSink = (agentId: string | null, code: ErrorCode, detail: Record<string, unknown>) => void;

export interface AgentRouteDeps {
  auth: Authenticator;
  mcp: McpEndpoint;
  sessions: AgentSessions;
  executions: ExecutionReads;
  /** True when an operator blocked the agent (false without operator controls). */
  isBlocked(agentId: string): boolean;
  /** Records unauthenticated requests (rate-bounded, auth-failures.ts). */
  recordAuthFailure(route: string): void;
  /** Records other refused requests (operator credentials here, blocked agents). */
  recordRefusal: RefusalSink;
  /** JWT access tokens (the `oauth` section), or absent: static tokens only. */
  oauth?: OAuthVerifier;
  /** The agent a session belongs to, whatever the caller (null: no such session). */
  sessionAgent?: (sessionId: string) => string | null | Promise<string | null>;
  /** Told every agent a JWT access token authenticated. */
  onTokenAgent?: (agentId: string) => void;
  /** Per-agent rate, in-flight and open-session limits (agent-limits.ts); none without. */
  limits?: AgentLimits;
  /** Client sessions (`Mcp-Session-Id`) and the requests waiting on clients (routes/mcp-routes.ts). */
  clientSessions: McpRouteDeps['clientSessions'];
  inflight: McpRouteDeps['inflight'];
}

/**
 * Runs a read of the caller's own session. When it answers UNKNOWN_SESSION for a session that
 * exists under another agent, the probe is recorded as a refusal (the caller's answer stays the
 * same as for a session that does not exist: nothing tells it the session is there).
 */
async function ownSession<T>(
  d: AgentRouteDeps,
  req: FastifyRequest,
  sessionId: string,
  read: () => T | Promise<T>,
): Promise<T> {
  try {
    return await read();
  } catch (e) {
    const owner =
      e instanceof CmcpError && e.code === 'UNKNOWN_SESSION' ? await d.sessionAgent?.(sessionId) : null;
    if (owner && owner !== req.agentId)
      d.recordRefusal(req.agentId, 'UNKNOWN_SESSION', {
        route: req.routeOptions.url ?? 'unknown',
        session_id: sessionId,
        cross_agent: true,
      });
    throw e;
  }
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

/** Chunks of a claim's text written to the socket one at a time. */
const CLAIM_CHUNK_BYTES = 64 * 1024;

/**
 * Sends a stored claim's canonical text (UTF-8 JCS, docs/spec/claims.md) as the JSON body, in
 * chunks of {@link CLAIM_CHUNK_BYTES}: the bytes that were signed and hashed, with no parse and
 * no serialisation (a 10,000-call claim is ~1.5 MB; serialising it held the loop 5–11 ms), a
 * stored text's parts read one at a time as the socket takes them (claim/parts.ts).
 */
function sendClaimText(reply: FastifyReply, text: Buffer | ClaimTextPieces): FastifyReply {
  const { textBytes, pieces } = Buffer.isBuffer(text) ? { textBytes: text.length, pieces: [text] } : text;
  const chunks = async function* () {
    // The reply's start (hooks, headers) and the first chunk's write in two turns of the loop.
    await setTimeout(0);
    for (const piece of pieces)
      for (let at = 0; at < piece.length; at += CLAIM_CHUNK_BYTES) {
        yield piece.subarray(at, at + CLAIM_CHUNK_BYTES);
        // A socket that takes every chunk at once (loopback) would get the whole text in one
        // turn of the loop, ~4–5 ms for 1.5 MB: one chunk per turn instead.
        await new Promise((resolve) => setImmediate(resolve));
      }
  };
  return reply
    .type('application/json; charset=utf-8')
    .header('content-length', textBytes)
    .send(Readable.from(chunks(), { objectMode: false }));
}

/** The agent routes plugin (registered at the root: its not-found handler is the root's). */
export function agentRoutes(d: AgentRouteDeps) {
  return async (app: FastifyInstance) => {
    registerMcpUnauthenticated(app);
    if (d.limits) registerAgentLimits(app, d.limits, d.recordRefusal);
    app.addHook('onRequest', agentAuth(d));
    app.setNotFoundHandler((_req, reply) => sendError(reply, 'NOT_FOUND', 'not found'));

    registerMcpRoutes(app, d);

    app.post('/sessions', { schema: createSessionSchema, attachValidation: true }, async (req, reply) => {
      const challenge = readChallenge(req);
      strictBody(req.body, BODY_MEMBERS.openSession, 'POST /sessions');
      const create = () => d.sessions.create(req.agentId, { challenge });
      const s = d.limits
        ? await d.limits.withSessionSlot(req.agentId, await d.sessions.openCount(req.agentId), create)
        : await create();
      if (s === null) {
        d.recordRefusal(req.agentId, 'AGENT_TOO_MANY_SESSIONS', { route: 'POST /sessions' });
        const max = d.limits?.settings.maxOpenSessions;
        return sendError(
          reply,
          'AGENT_TOO_MANY_SESSIONS',
          `this agent has ${max} open sessions; close one first`,
        );
      }
      return reply.code(201).send(s);
    });
    // Both answer with the claim's stored canonical text (sendClaimText), never parsed and serialised again.
    app.post<{ Params: { id: string } }>(
      '/sessions/:id/close',
      { schema: claimSchema },
      async (req, reply) => {
        strictBody(req.body, BODY_MEMBERS.closeSession, 'POST /sessions/{id}/close');
        const text = await d.sessions.closeText(req.agentId, req.params.id);
        // The commit and the answer in two turns of the loop (a timer lets I/O run between them).
        await setTimeout(0);
        return sendClaimText(reply, text);
      },
    );
    app.get<{ Params: { id: string } }>('/sessions/:id/claim', { schema: claimSchema }, async (req, reply) =>
      sendClaimText(
        reply,
        await ownSession(d, req, req.params.id, () => d.sessions.claimText(req.agentId, req.params.id)),
      ),
    );
    // Streamed in pages (docs/operations.md#the-wal): never one long read or one serialisation.
    app.get<{ Params: { id: string } }>('/sessions/:id/audit', { schema: bundleSchema }, async (req, reply) =>
      reply
        .type('application/json')
        .send(await ownSession(d, req, req.params.id, () => d.sessions.bundle(req.agentId, req.params.id))),
    );

    // Read-only view of an execution for the agent that owns it (docs/spec/execution.md). Never invokes anything.
    app.get<{ Params: { id: string } }>('/executions/:id', { schema: executionSchema }, async (req) => {
      const row = await d.executions.get(req.agentId, req.params.id);
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
