/**
 * `GET /metrics` (Prometheus text exposition): a fastify plugin for the main listener (behind
 * the operator authentication hook) and, when `metrics.listen` is configured, a listener of
 * its own that serves only /metrics, without authentication (loopback unless allowed), behind
 * the same Host/Origin check as the main listener (gateway/edge/host-check.ts, passed in as `guard`).
 */
import type { Server as TlsServer } from 'node:tls';
import Fastify, { type FastifyInstance, type onRequestHookHandler } from 'fastify';
import type { ListenerTls } from '../tls/listener.js';
import type { GatewayMetrics } from './registry.js';

/** The /metrics route; `guard` (the operator hook) runs first when given. */
export function metricsRoutes(metrics: GatewayMetrics, guard?: onRequestHookHandler) {
  return async (app: FastifyInstance) => {
    if (guard) app.addHook('onRequest', guard);
    app.get('/metrics', async (_req, reply) => {
      reply.type(metrics.contentType);
      return metrics.render();
    });
  };
}

/**
 * Starts the separate metrics listener.
 * @param hostCheck the DNS-rebinding check (gateway/edge/host-check.ts hostCheck), run on every
 *   request before the route.
 * @param tls the main listener's TLS (same key, certificate and rotations); absent: plain HTTP.
 * @returns its `http://host:port` and how to close it. @throws a busy port.
 */
export async function startMetricsListener(
  metrics: GatewayMetrics,
  host: string,
  port: number,
  hostCheck: onRequestHookHandler,
  tls?: ListenerTls,
): Promise<{ url: string; close: () => Promise<void> }> {
  const app = Fastify({
    logger: false,
    ...(tls ? { https: tls.serverOptions() } : {}),
  }) as unknown as FastifyInstance;
  if (tls) tls.attach(app.server as unknown as TlsServer);
  app.addHook('onRequest', hostCheck);
  app.register(metricsRoutes(metrics));
  const url = await app.listen({ host, port });
  return { url, close: () => app.close() };
}
