/**
 * `GET /healthz`: liveness for load balancers and supervisors; no authentication, no state.
 * `GET /readyz`: readiness (src/gateway/health/readiness.ts) — 200 when every check passes, else 503
 * with the failing checks' reasons; no authentication.
 */
import type { FastifyInstance } from 'fastify';
import { healthSchema, readySchema } from '../edge/schemas.js';
import type { Readiness } from './readiness.js';

export function healthRoutes(readiness?: Readiness) {
  return async (app: FastifyInstance): Promise<void> => {
    app.get('/healthz', { schema: healthSchema }, async () => ({ status: 'ok' }));
    if (!readiness) return;
    app.get('/readyz', { schema: readySchema }, async (_req, reply) => {
      const r = await readiness.check();
      return reply
        .code(r.ready ? 200 : 503)
        .send({ status: r.ready ? 'ready' : 'not_ready', checks: r.checks });
    });
  };
}
