/**
 * The agent REST plugin (docs/spec/mcp.md#inbound, docs/spec/execution.md): the session routes
 * (`POST /sessions`, close, claim, audit bundle) and the read-only execution view. Registered
 * inside the agent plugin: every request here passed the Host check and agent authentication.
 */
import { Readable } from 'node:stream';
import { setTimeout } from 'node:timers/promises';
import { fromB64u } from '@cmcp/verify/formats';
import type { FastifyInstance, FastifyReply, FastifyRequest } from 'fastify';
import { CmcpError } from '../../../errors/index.js';
import type { AgentSessions, ExecutionReads, ReceiptReads } from '../../../session/ports.js';
import { BODY_MEMBERS, strictBody } from '../../edge/bodies.js';
import type { RefusalSink } from '../../edge/refusals.js';
import { sendError } from '../../edge/replies.js';
import { errors, idParams, nullableStr, open, str } from '../../edge/schemas.js';
import type { AgentLimits } from '../limits.js';

/** What the agent REST plugin needs. */
export interface AgentRestOptions {
  sessions: AgentSessions;
  executions: ExecutionReads;
  /** A call's receipt and consistency proofs between checkpoints (docs/spec/transparency.md). */
  receipts: ReceiptReads;
  /** The agent a session belongs to, whatever the caller (null: no such session). */
  sessionAgent?: (sessionId: string) => string | null | Promise<string | null>;
  /** Per-agent limits: the open-session bound of `POST /sessions`. */
  limits?: AgentLimits;
  recordRefusal: RefusalSink;
}

/**
 * Runs a read of the caller's own session. When it answers UNKNOWN_SESSION for a session that
 * exists under another agent, the probe is recorded as a refusal (the caller's answer stays the
 * same as for a session that does not exist: nothing tells it the session is there).
 */
async function ownSession<T>(
  d: AgentRestOptions,
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
 * no serialisation. A version-2 claim is a few KB; a stored version-1 claim of a long session
 * is ~1.5 MB (serialising it held the loop 5–11 ms), hence the chunks.
 */
function sendClaimText(reply: FastifyReply, text: Buffer): FastifyReply {
  const chunks = async function* () {
    // The reply's start (hooks, headers) and the first chunk's write in two turns of the loop.
    await setTimeout(0);
    for (let at = 0; at < text.length; at += CLAIM_CHUNK_BYTES) {
      yield text.subarray(at, at + CLAIM_CHUNK_BYTES);
      // A socket that takes every chunk at once (loopback) would get the whole text in one
      // turn of the loop, ~4–5 ms for 1.5 MB: one chunk per turn instead.
      await new Promise((resolve) => setImmediate(resolve));
    }
  };
  return reply
    .type('application/json; charset=utf-8')
    .header('content-length', text.length)
    .send(Readable.from(chunks(), { objectMode: false }));
}

/** Registers the session and execution routes. */
export async function agentRestPlugin(app: FastifyInstance, d: AgentRestOptions): Promise<void> {
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
  app.post<{ Params: { id: string } }>('/sessions/:id/close', { schema: claimSchema }, async (req, reply) => {
    strictBody(req.body, BODY_MEMBERS.closeSession, 'POST /sessions/{id}/close');
    const text = await d.sessions.closeText(req.agentId, req.params.id);
    // The commit and the answer in two turns of the loop (a timer lets I/O run between them).
    await setTimeout(0);
    return sendClaimText(reply, text);
  });
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

  // A call's receipt: its entry, the checkpoint covering it and the inclusion proof (docs/spec/transparency.md).
  app.get<{ Params: { id: string; call_id: string } }>(
    '/sessions/:id/receipts/:call_id',
    { schema: receiptSchema },
    async (req) =>
      ownSession(d, req, req.params.id, () =>
        d.receipts.receipt(req.agentId, req.params.id, req.params.call_id),
      ),
  );
  app.get<{ Params: { id: string }; Querystring: { from: string; to?: string } }>(
    '/sessions/:id/consistency',
    { schema: consistencySchema },
    async (req) =>
      ownSession(d, req, req.params.id, () =>
        d.receipts.consistency(
          req.agentId,
          req.params.id,
          Number(req.query.from),
          req.query.to === undefined ? undefined : Number(req.query.to),
        ),
      ),
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
}

/** Schemas of the agent REST routes (/sessions, /executions), built as edge/schemas.ts says. */
/** `POST /sessions` `{challenge?: base64url | null}` (an absent body is `{}`). */
export const createSessionSchema = {
  body: { type: ['object', 'null'], properties: { challenge: nullableStr } },
  response: {
    201: {
      type: 'object',
      properties: {
        session_id: str,
        chain_root: str,
        binding: {
          type: 'object',
          properties: { provider: str, status: str, reason: nullableStr },
          required: ['provider', 'status', 'reason'],
        },
      },
      required: ['session_id', 'chain_root', 'binding'],
    },
    ...errors,
  },
} as const;

/** `POST /sessions/:id/close` and `GET /sessions/:id/claim`: the signed claim, as signed. */
export const claimSchema = {
  params: idParams,
  response: {
    200: open('a signed claim (docs/spec/claims.md): every member is signed, none may be dropped'),
    ...errors,
  },
} as const;

/** `GET /sessions/:id/audit`: the session chain's bundle of stored canonical texts. */
export const bundleSchema = {
  params: idParams,
  response: {
    200: open('an audit bundle (docs/spec/audit-entries.md): verifiers re-hash its canonical texts'),
    ...errors,
  },
} as const;

/** `GET /sessions/:id/receipts/:call_id`: a call's receipt (docs/spec/transparency.md#receipts). */
export const receiptSchema = {
  params: {
    type: 'object',
    properties: { id: str, call_id: str },
    required: ['id', 'call_id'],
  },
  response: {
    200: open(
      'a receipt (docs/spec/transparency.md#receipts): the entry, a signed checkpoint, the inclusion proof',
    ),
    ...errors,
  },
} as const;

const treeSize = { type: 'string', pattern: '^(0|[1-9][0-9]{0,14})$' } as const;

/** `GET /sessions/:id/consistency?from=&to=`: RFC 9162 consistency proof between two checkpoints. */
export const consistencySchema = {
  params: idParams,
  querystring: {
    type: 'object',
    // Tree sizes in decimal (query strings are not coerced: app.ts).
    properties: { from: treeSize, to: treeSize },
    required: ['from'],
    additionalProperties: false,
  },
  response: {
    200: open('the RFC 9162 consistency proof between two tree sizes and the checkpoint of the larger'),
    ...errors,
  },
} as const;

/** `GET /executions/:id`: the agent's view of one registry row (docs/spec/execution.md). */
export const executionSchema = {
  params: idParams,
  response: {
    200: {
      type: 'object',
      properties: {
        execution_id: str,
        state: str,
        call_id: str,
        session_id: str,
        tool_name: str,
        binding: str,
        created_at: str,
        updated_at: str,
        terminal_entry_hash: nullableStr,
      },
      required: ['execution_id', 'state', 'call_id', 'session_id', 'tool_name', 'binding'],
    },
    ...errors,
  },
} as const;
