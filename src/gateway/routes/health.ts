/** `GET /healthz`: liveness for load balancers and supervisors; no authentication, no state. */
import type { FastifyInstance } from 'fastify';
import { healthSchema } from '../schemas.js';

export async function healthRoutes(app: FastifyInstance): Promise<void> {
  app.get('/healthz', { schema: healthSchema }, async () => ({ status: 'ok' }));
}
