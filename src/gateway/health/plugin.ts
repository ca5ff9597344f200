/**
 * The health plugin, without authentication: `GET /healthz` (liveness for load balancers and
 * supervisors, no state) and `GET /readyz` (readiness.ts: 200 when every check passes, else 503
 * with the failing checks' reasons).
 */
import type { FastifyInstance } from 'fastify';
import { nullableStr, str } from '../edge/schemas.js';
import type { Readiness } from './readiness.js';

const healthSchema = {
  response: { 200: { type: 'object', properties: { status: str }, required: ['status'] } },
} as const;

/**
 * `GET /readyz`: `{status, checks: {database, upstreams: {name: reason | null},
 * required_upstreams: [name], attestation, shutdown}}`, and `lease` on a replica on PostgreSQL (readiness.ts).
 */
const readyBody = {
  type: 'object',
  properties: {
    status: str,
    checks: {
      type: 'object',
      properties: {
        database: nullableStr,
        upstreams: { type: 'object', additionalProperties: nullableStr },
        required_upstreams: { type: 'array', items: str },
        attestation: nullableStr,
        shutdown: nullableStr,
        lease: nullableStr,
      },
      required: ['database', 'upstreams', 'required_upstreams', 'attestation', 'shutdown'],
    },
  },
  required: ['status', 'checks'],
} as const;
const readySchema = { response: { 200: readyBody, 503: readyBody } } as const;

/** What the health plugin needs: the readiness checks (absent: no `/readyz`). */
export interface HealthOptions {
  readiness?: Readiness;
}

/** Registers `/healthz` and `/readyz`. */
export async function healthPlugin(app: FastifyInstance, opts: HealthOptions): Promise<void> {
  app.get('/healthz', { schema: healthSchema }, async () => ({ status: 'ok' }));
  const readiness = opts.readiness;
  if (!readiness) return;
  app.get('/readyz', { schema: readySchema }, async (_req, reply) => {
    const r = await readiness.check();
    return reply
      .code(r.ready ? 200 : 503)
      .send({ status: r.ready ? 'ready' : 'not_ready', checks: r.checks });
  });
}
