/**
 * The operator plugin (docs/spec/policy.md#operator-controls): routes under `/operator`, and
 * `/metrics` when it is served on the main listener, behind the operator authentication hook:
 * operator tokens only, an agent token is refused. The hook runs on the matched route (and on
 * the prefix's not-found handler), so `/%6Fperator/…` is authenticated as an operator request.
 */
import type { FastifyInstance, FastifyReply, FastifyRequest } from 'fastify';
import { EXPORT_FORMATS, type ExportFormat, formatLine } from '../../audit/export-lines.js';
import { metricsRoutes } from '../../metrics/plugin.js';
import type { GatewayMetrics } from '../../metrics/registry.js';
import type { AuditFeed } from '../../store/port.js';
import { BODY_MEMBERS, strictBody, strictOrNull } from '../edge/bodies.js';
import type { Authenticator } from '../edge/credentials.js';
import type { RefusalSink } from '../edge/refusals.js';
import { sendError } from '../edge/replies.js';
import { agentIdParams, errors, open, str } from '../edge/schemas.js';

declare module 'fastify' {
  interface FastifyRequest {
    operatorId: string;
  }
}

/** Operator actions behind /operator/*; implemented in controls.ts on either engine. */
export interface OperatorApi {
  isBlocked(agentId: string): boolean;
  /** Resolves once every session it closes has its claim (closed in batches). */
  reloadPolicy(operatorId: string, body: unknown): Promise<Record<string, unknown>>;
  /** Resolves once every session it closes has its claim (closed in batches). */
  blockAgent(operatorId: string, agentId: string, body: unknown): Promise<Record<string, unknown>>;
  unblockAgent(operatorId: string, agentId: string): Promise<Record<string, unknown>>;
  status(): Record<string, unknown>;
}

/** What the operator plugin needs. */
export interface OperatorOptions {
  auth: Authenticator;
  /** The operator controls; without them only authentication and not-found answer here. */
  operator?: OperatorApi;
  recordRefusal: RefusalSink;
  /** Served at /metrics behind the operator hook (absent: metrics off, or on a listener of their own). */
  metrics?: GatewayMetrics;
  /** The audit export feed served at `GET /operator/audit` (absent: not served). */
  audit?: AuditFeed;
}

/** The operator authentication hook (also guards /metrics); an agent credential is named in the refusal record. */
export function operatorAuth(d: OperatorOptions) {
  return async (req: FastifyRequest, reply: FastifyReply) => {
    const op = d.auth.operator(req.headers.authorization);
    if (op) {
      req.operatorId = op;
      return;
    }
    const agent = req.headers.authorization ? d.auth.authenticate(req.headers.authorization) : null;
    d.recordRefusal(agent, 'OPERATOR_UNAUTHENTICATED', {
      route: req.routeOptions.url ?? 'unknown',
      agent_token: agent !== null,
    });
    reply.header('WWW-Authenticate', 'Bearer realm="cmcp-operator"');
    return sendError(
      reply,
      'OPERATOR_UNAUTHENTICATED',
      agent !== null ? 'operator routes do not accept agent credentials' : 'operator authentication required',
    );
  };
}

/** The `/operator` routes. */
function operatorRoutes(d: OperatorOptions) {
  return async (app: FastifyInstance) => {
    app.addHook('onRequest', operatorAuth(d));
    app.setNotFoundHandler((_req, reply) => sendError(reply, 'NOT_FOUND', 'not found'));
    const feed = d.audit;
    // One page of the export (docs/audit-export.md#the-operator-route): JSON lines after the
    // `after` cursor; the cursor to ask with next is in a header (the given one when empty).
    if (feed)
      app.get<{ Querystring: { after?: string; limit?: string; format?: ExportFormat } }>(
        '/audit',
        { schema: auditSchema },
        async (req, reply) => {
          const { after, limit = '500', format = 'cmcp' } = req.query;
          const page = await feed.after(after ?? null, Number(limit));
          const next = page[page.length - 1]?.cursor ?? after;
          if (next) reply.header('cmcp-audit-cursor', next);
          return reply
            .type('application/x-ndjson; charset=utf-8')
            .send(page.map((f) => `${formatLine(f, format)}\n`).join(''));
        },
      );
    const op = d.operator;
    if (!op) return;
    app.get('/status', { schema: operatorStatusSchema }, async () => op.status());
    // A malformed reload is refused and recorded by reloadPolicy itself (schemas.ts, reloadSchema).
    app.post('/policy/reload', { schema: reloadSchema, attachValidation: true }, async (req) =>
      op.reloadPolicy(
        req.operatorId,
        strictOrNull(req.body, BODY_MEMBERS.policyReload, 'POST /operator/policy/reload'),
      ),
    );
    // The body's shape is checked by blockAgent, after the agent is known to exist (as before
    // the schema): `attachValidation` leaves the answer and its order to it.
    app.post<{ Params: { agent_id: string } }>(
      '/agents/:agent_id/block',
      { schema: blockSchema, attachValidation: true },
      async (req) =>
        op.blockAgent(
          req.operatorId,
          req.params.agent_id,
          strictBody(req.body, BODY_MEMBERS.blockAgent, 'POST /operator/agents/{agent_id}/block'),
        ),
    );
    app.post<{ Params: { agent_id: string } }>(
      '/agents/:agent_id/unblock',
      { schema: unblockSchema },
      async (req) => {
        strictBody(req.body, BODY_MEMBERS.unblockAgent, 'POST /operator/agents/{agent_id}/unblock');
        return op.unblockAgent(req.operatorId, req.params.agent_id);
      },
    );
  };
}

/** Registers `/metrics` (with `metrics`) and the `/operator` routes, each behind the operator hook. */
export async function operatorPlugin(app: FastifyInstance, d: OperatorOptions): Promise<void> {
  if (d.metrics) app.register(metricsRoutes(d.metrics, operatorAuth(d)));
  app.register(operatorRoutes(d), { prefix: '/operator' });
}

/** Schemas of the operator routes (/operator/…), built as edge/schemas.ts says. */
export const auditSchema = {
  querystring: {
    type: 'object',
    properties: {
      after: { type: 'string', pattern: '^[0-9a-f]{64}$' },
      // Query strings are not coerced (app.ts): a decimal from 1 to 1000.
      limit: { type: 'string', pattern: '^([1-9][0-9]{0,2}|1000)$' },
      format: { type: 'string', enum: [...EXPORT_FORMATS] },
    },
    additionalProperties: false,
  },
  response: { ...errors },
} as const;

export const operatorStatusSchema = {
  response: { 200: open('running policy, catalog, drifted tools and blocked agents'), ...errors },
} as const;

/**
 * `POST /operator/policy/reload` `{files: {name: base64url}, signature}`. The route attaches
 * (does not answer) a schema failure: the reload's own decoder refuses a malformed request
 * *and records it* as `policy_reload_refused` (policy/state.ts), which a schema refusal would
 * skip.
 */
export const reloadSchema = {
  body: {
    type: 'object',
    properties: { files: { type: 'object', additionalProperties: str }, signature: str },
    required: ['files'],
  },
  response: { 200: open('the installed bundle, the re-measured gateway and the sessions closed'), ...errors },
} as const;

/**
 * `POST /operator/agents/:agent_id/block` `{reason?: string}` (arrays and no body are accepted).
 * Attached, not answered: blockAgent checks the body after the agent is known to exist.
 */
export const blockSchema = {
  params: agentIdParams,
  body: { type: ['object', 'array', 'null'], properties: { reason: str } },
  response: { 200: open('the block and the sessions it closed'), ...errors },
} as const;

export const unblockSchema = {
  params: agentIdParams,
  response: { 200: open('the agent and whether it is blocked'), ...errors },
} as const;
