/**
 * The agent MCP plugin, `/mcp` (docs/spec/mcp.md#inbound): `POST` answers one JSON-RPC message — as JSON, or on an
 * SSE stream when the client accepts `text/event-stream` and something must reach it before
 * the result; client responses to server-to-client requests and `notifications/cancelled` are
 * routed to the request they concern. `GET` opens a client session's standalone SSE stream;
 * `DELETE` ends a client session. Registered inside the agent plugin (agent/plugin.ts): every request
 * here passed the Host check and the agent authentication hook.
 */

import { createHash, randomUUID } from 'node:crypto';
import type { Tracer } from '@opentelemetry/api';
import type { FastifyInstance, FastifyReply, FastifyRequest } from 'fastify';
import { type ClientChannel, jsonChannel } from '../../../relay/channel.js';
import { serverSpan } from '../../../tracing/mcp-spans.js';
import type { RefusalSink } from '../../edge/refusals.js';
import { jsonRpcError, readableId, sendRpcError } from '../../edge/replies.js';
import type { AgentLimits } from '../limits.js';
import { clientSessionRefusal } from '../limits.js';
import type { ClientSession, ClientSessions } from './client-sessions.js';
import type { McpEndpoint } from './endpoint.js';
import type { InflightRequests } from './inflight.js';
import { openEventStream, StreamChannel } from './stream-channel.js';

/** What the agent MCP plugin needs. */
export interface AgentMcpOptions {
  mcp: Pick<McpEndpoint, 'handle'>;
  clientSessions: ClientSessions;
  inflight: InflightRequests;
  /** Per-agent limits: the rate of client sessions opened (agent/limits.ts). */
  limits?: Pick<AgentLimits, 'clientSessions'>;
  recordRefusal?: RefusalSink;
  /** SERVER spans of the agents' requests (absent: tracing off). */
  tracer?: Tracer;
}

/**
 * The media types an Accept header lists (parameters and q-values ignored: presence is what MCP
 * asks). No Accept at all is taken as JSON (curl, scripts); one that lists neither JSON nor
 * SSE accepts nothing `/mcp` can answer with (406, MCP Streamable HTTP "Sending Messages").
 */
function accepted(req: FastifyRequest): { json: boolean; sse: boolean } {
  const header = (req.headers.accept ?? '').trim();
  if (header === '') return { json: true, sse: false };
  const types = header.split(',').map((t) => (t.split(';')[0] ?? '').trim().toLowerCase());
  const sse = types.includes('text/event-stream');
  const json = types.includes('application/json') || types.includes('*/*') || types.includes('application/*');
  return { json, sse };
}

function header(req: FastifyRequest, name: string): string | undefined {
  const v = req.headers[name];
  return typeof v === 'string' ? v : undefined;
}

type Session = { session: ClientSession | null } | { refused: true };

/**
 * The client session a request names, or the 404 it gets for an unknown one (already sent).
 * When the id is another agent's live session the probe is recorded (aggregated refusal record)
 * under the id's SHA-256, never the id itself: the answer stays the one an unknown id gets.
 */
function sessionOf(d: AgentMcpOptions, req: FastifyRequest, reply: FastifyReply): Session {
  const sid = header(req, 'mcp-session-id');
  if (sid === undefined) return { session: null };
  const session = d.clientSessions.get(sid, req.agentId);
  if (session) return { session };
  const owner = d.clientSessions.ownerOf(sid);
  if (owner !== null && owner !== req.agentId)
    d.recordRefusal?.(req.agentId, 'UNKNOWN_CLIENT_SESSION', {
      route: `${req.method} /mcp`,
      client_session_id_sha256: `sha256:${createHash('sha256').update(sid).digest('hex')}`,
      cross_agent: true,
    });
  void reply
    .code(404)
    .send(
      jsonRpcError(
        readableId(req.body),
        'UNKNOWN_CLIENT_SESSION',
        'unknown, expired or ended Mcp-Session-Id: initialize a new session',
      ),
    );
  return { refused: true };
}

function isObject(v: unknown): v is Record<string, unknown> {
  return typeof v === 'object' && v !== null && !Array.isArray(v);
}

/**
 * Settles what a client POSTs that is not a request: its answer to a server-to-client request
 * (true: answered 202 here) or its `notifications/cancelled` (the request it names is aborted;
 * the notification still gets its 202 from the MCP layer).
 */
function routeClientMessage(d: AgentMcpOptions, req: FastifyRequest, sid: string | undefined): boolean {
  const body = req.body;
  if (!isObject(body) || body.jsonrpc !== '2.0') return false;
  if (!Object.hasOwn(body, 'method') && (Object.hasOwn(body, 'result') || Object.hasOwn(body, 'error'))) {
    d.inflight.settle(req.agentId, body);
    return true;
  }
  if (body.method === 'notifications/cancelled' && !Object.hasOwn(body, 'id') && isObject(body.params))
    d.inflight.cancel(req.agentId, sid, body.params.requestId, body.params.reason);
  return false;
}

/** The channel of one request: an SSE-capable one when the client accepts event streams. */
function channelFor(
  d: AgentMcpOptions,
  req: FastifyRequest,
  reply: FastifyReply,
  session: ClientSession | null,
  headers: Record<string, string>,
): { channel: ClientChannel; stream: StreamChannel | null; ctl: AbortController } {
  const accept = accepted(req);
  if (accept.sse) {
    // A client in a session speaks Streamable HTTP in full (SDK clients): it gets the stream as
    // from an SDK server. Without a session (stateless requests, curl, scripts) the stream opens
    // only when something must reach the client before the result.
    const eager = !accept.json || session !== null;
    const stream = new StreamChannel(
      reply.raw,
      d.inflight,
      req.agentId,
      headers,
      session?.id,
      eager,
      () => reply.hijack(),
      session?.replays ?? null,
    );
    if (session) stream.protocolVersion = session.protocolVersion;
    return { channel: stream, stream, ctl: stream.controller };
  }
  const ctl = new AbortController();
  reply.raw.on('close', () => {
    if (!reply.raw.writableFinished) ctl.abort();
  });
  const protocol = session ? { protocolVersion: session.protocolVersion } : {};
  return { channel: { ...jsonChannel(ctl.signal, session?.id), ...protocol }, stream: null, ctl };
}

async function postMcp(d: AgentMcpOptions, req: FastifyRequest, reply: FastifyReply) {
  const acceptable = accepted(req);
  if (!acceptable.json && !acceptable.sse) {
    d.recordRefusal?.(req.agentId, 'INVALID_REQUEST', { route: 'POST /mcp', reason: 'not_acceptable' });
    const message = 'Accept must list application/json or text/event-stream (MCP Streamable HTTP)';
    return reply.code(406).send(jsonRpcError(readableId(req.body), 'INVALID_REQUEST', message));
  }
  const s = sessionOf(d, req, reply);
  if ('refused' in s) return reply;
  const { session } = s;
  if (routeClientMessage(d, req, session?.id)) return reply.code(202).send();
  const headers: Record<string, string> = session ? { 'mcp-session-id': session.id } : {};
  const { channel, stream, ctl } = channelFor(d, req, reply, session, headers);
  // A shutdown past the drain time answers on the stream (lifecycle/drain.ts answerPending).
  if (stream) req.finishStream = (b) => stream.finish(b, 200);
  const body = req.body as Record<string, unknown> | null;
  const id = readableId(body);
  const untrack = id !== null ? d.inflight.track(req.agentId, session?.id, id, ctl) : () => undefined;
  const hv = header(req, 'mcp-protocol-version') ?? session?.protocolVersion;
  // One JSON-RPC message per POST: at most one tools/call, recorded under this call_id.
  req.callId = randomUUID();
  const caller = {
    agentId: req.agentId,
    blocked: req.agentBlocked,
    callId: req.callId,
    // A JWT's scopes and mapped claims: Cedar principal attributes (gateway/oauth/).
    ...(req.agentTokenAttributes ? { attributes: req.agentTokenAttributes } : {}),
  };
  let r: Awaited<ReturnType<McpEndpoint['handle']>>;
  try {
    const handle = () => d.mcp.handle(caller, body, hv, req.startedAt, channel);
    const method = body?.method;
    r =
      d.tracer && typeof method === 'string'
        ? await serverSpan(
            d.tracer,
            { method, id: body?.id, params: body?.params, headers: req.headers, transport: 'tcp' },
            handle,
          )
        : await handle();
  } catch (e) {
    req.log.error({ err: (e as Error).message }, 'MCP request fault');
    r = { status: 200, body: jsonRpcError(id, 'INTERNAL_ERROR', 'internal error') };
  } finally {
    untrack();
  }
  // A successful initialize opens a client session (handshake-era clients).
  const result = isObject(r.body) ? r.body.result : undefined;
  if (isObject(body) && body.method === 'initialize' && isObject(result)) {
    const refused = clientSessionRefusal(d.limits?.clientSessions, d.recordRefusal, req.agentId, id);
    if (refused) {
      r = refused;
      headers['retry-after'] = String(refused.retryAfterS);
    } else {
      const params = isObject(body.params) ? body.params : {};
      const caps = isObject(params.capabilities) ? params.capabilities : undefined;
      const opened = d.clientSessions.open(
        req.agentId,
        String(result.protocolVersion),
        params.clientInfo,
        caps,
      );
      headers['mcp-session-id'] = opened.id;
    }
  }
  if (stream?.finish(r.body, r.status)) return reply;
  // A shutdown answered it already (lifecycle/drain.ts answerPending): a late answer is sent nowhere.
  if (reply.sent || reply.raw.headersSent) return reply;
  if (r.body === null) return reply.code(202).headers(headers).send();
  return reply.code(r.status).headers(headers).type('application/json').send(r.body);
}

/** `GET /mcp`: the standalone SSE stream of the client session named by `Mcp-Session-Id`. */
async function getMcp(d: AgentMcpOptions, req: FastifyRequest, reply: FastifyReply) {
  if (!accepted(req).sse)
    return sendRpcError(reply, 'INVALID_REQUEST', 'GET /mcp serves text/event-stream only', 406);
  if (header(req, 'mcp-session-id') === undefined) return reply.code(405).header('Allow', 'POST').send();
  const s = sessionOf(d, req, reply);
  if ('refused' in s || !s.session) return reply;
  const lastEventId = header(req, 'last-event-id');
  if (lastEventId !== undefined && s.session.replays)
    return resumeStream(d, req, reply, s.session, lastEventId);
  reply.hijack();
  if (!d.clientSessions.attach(s.session, reply.raw)) {
    reply.raw.writeHead(409, { 'content-type': 'application/json' });
    reply.raw.end(
      JSON.stringify(
        jsonRpcError(null, 'INVALID_REQUEST', 'this client session already has its standalone stream open'),
      ),
    );
  }
  return reply;
}

/**
 * `GET /mcp` with `Last-Event-ID` (./replay.ts): the events of that stream after the id, then
 * the stream itself when it still runs (the standalone stream, or a request not yet answered);
 * 204 when an ended stream has nothing more; 409 `STREAM_REPLAY_UNAVAILABLE` when what was
 * missed is no longer kept.
 */
function resumeStream(
  d: AgentMcpOptions,
  req: FastifyRequest,
  reply: FastifyReply,
  session: ClientSession,
  lastEventId: string,
) {
  const r = session.replays?.resume(lastEventId);
  if (!r || 'gap' in r) {
    const why = r && 'gap' in r ? r.gap : 'this session keeps no streams';
    d.recordRefusal?.(req.agentId, 'STREAM_REPLAY_UNAVAILABLE', { route: 'GET /mcp' });
    return sendRpcError(reply, 'STREAM_REPLAY_UNAVAILABLE', `cannot resume from Last-Event-ID: ${why}`, 409);
  }
  const { stream, frames } = r;
  if (stream === session.standalone) {
    reply.hijack();
    if (!d.clientSessions.attach(session, reply.raw, frames)) {
      reply.raw.writeHead(409, { 'content-type': 'application/json' });
      reply.raw.end(
        JSON.stringify(
          jsonRpcError(null, 'INVALID_REQUEST', 'this client session already has its standalone stream open'),
        ),
      );
    }
    return reply;
  }
  if (stream.ended && frames.length === 0) return reply.code(204).send();
  reply.hijack();
  openEventStream(reply.raw, { 'mcp-session-id': session.id });
  for (const frame of frames) reply.raw.write(frame);
  if (stream.ended) reply.raw.end();
  else stream.onResume?.(reply.raw);
  return reply;
}

/** `DELETE /mcp`: ends the client session named by `Mcp-Session-Id`. */
async function deleteMcp(d: AgentMcpOptions, req: FastifyRequest, reply: FastifyReply) {
  if (header(req, 'mcp-session-id') === undefined)
    return sendRpcError(reply, 'INVALID_REQUEST', 'DELETE /mcp needs the Mcp-Session-Id to end', 400);
  const s = sessionOf(d, req, reply);
  if ('refused' in s || !s.session) return reply;
  d.clientSessions.end(s.session.id);
  return reply.code(204).send();
}

/** Registers `POST`, `GET` and `DELETE /mcp` (JSON-RPC routes: errors are JSON-RPC error objects). */
export async function agentMcpPlugin(app: FastifyInstance, d: AgentMcpOptions): Promise<void> {
  // No response schema: a JSON-RPC result is the upstream's MCP result plus evidence, and
  // must reach the agent intact (C-MCP-5); a schema's serializer would drop what it does not name.
  app.post('/mcp', { config: { jsonRpc: true } }, (req, reply) => postMcp(d, req, reply));
  app.get('/mcp', { config: { jsonRpc: true } }, (req, reply) => getMcp(d, req, reply));
  app.delete('/mcp', { config: { jsonRpc: true } }, (req, reply) => deleteMcp(d, req, reply));
}
