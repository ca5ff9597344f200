/**
 * The fastify application (docs/spec/mcp.md, docs/spec/mcp.md#inbound), composed of the edge's
 * plugins, each with its own authentication: health (none, health/), OAuth metadata (none,
 * agent/oauth/), operator (operator tokens: /operator/…, /metrics, operator/), the console
 * (its own login: /operator/ui, src/console/) and agent (agent tokens: /mcp, /sessions,
 * /executions, agent/). Before any of them every request passes the server-wide hooks: the Host
 * check, the shutdown gate and the connection limits (edge/, lifecycle/drain.ts). Errors leave as
 * JSON with a stable `error_code`; never a stack trace.
 */
import type { Server as TlsServer } from 'node:tls';
import Fastify, {
  type FastifyBaseLogger,
  type FastifyInstance,
  type FastifyReply,
  type FastifyRequest,
  LogController,
} from 'fastify';
import type { Logger } from 'pino';
import { type ConsoleDeps, consoleRoutes } from '../console/plugin.js';
import type { ListenerTls } from '../tls/listener.js';
import { oauthMetadataPlugin } from './agent/oauth/metadata.js';
import { type AgentOptions, agentPlugin } from './agent/plugin.js';
import { strictUtf8Json } from './edge/bodies.js';
import { type ConnectionLimitSettings, capConnections, connectionOptions } from './edge/connections.js';
import type { Authenticator } from './edge/credentials.js';
import { hostCheck } from './edge/host-check.js';
import type { GatewayRefusals } from './edge/refusals.js';
import { errorHandler } from './edge/replies.js';
import { tlsEvidenceRoute } from './edge/tls-evidence.js';
import { type HealthOptions, healthPlugin } from './health/plugin.js';
import type { Drain } from './lifecycle/drain.js';
import { type OperatorOptions, operatorPlugin } from './operator/plugin.js';

declare module 'fastify' {
  interface FastifyRequest {
    /** process.hrtime.bigint() at receipt, for `latency_us`. */
    startedAt: bigint;
  }
}

/** What every request passes before a plugin: the server's limits, hooks and refusal record. */
export interface ServerOptions {
  logger: Logger;
  maxRequestBytes: number;
  /** Where refused requests are recorded (every plugin records into the same one). */
  refusals: GatewayRefusals;
  /** Per-connection timeouts and the connection cap; Node's and fastify's defaults without. */
  connections?: ConnectionLimitSettings;
  /** DNS-rebinding protection: the hosts Host and Origin may name (edge/host-check.ts); absent: no check. */
  allowedHosts?: ReadonlySet<string>;
  /** The shutdown gate: refuses new requests once stopped, counts those in flight. */
  drain?: Drain;
  /** TLS of the listener (src/tls/listener.ts) and its evidence route; absent: plain HTTP. */
  tls?: ListenerTls;
}

/** The edge of one gateway: the server, and each plugin's own options. */
export interface GatewayEdge {
  server: ServerOptions;
  /** Agent and operator tokens, read by the agent, operator and console plugins. */
  auth: Authenticator;
  health: HealthOptions;
  /** The agent plugin; credentials, the kill switch and the refusal record come from above. */
  agent: Omit<AgentOptions, 'auth' | 'isBlocked' | 'recordAuthFailure' | 'recordRefusal'>;
  /** The operator controls and the metrics served on this listener (either may be absent). */
  operator: Pick<OperatorOptions, 'operator' | 'metrics' | 'audit'>;
  /** The operator console, served under /operator/ui with its own login. */
  console?: ConsoleDeps;
}

/** Builds (but does not start) the HTTP server. */
export function buildApp(e: GatewayEdge): FastifyInstance {
  const { server, auth } = e;
  const refusals = server.refusals;
  const recordRefusal = refusals.refused;
  const app = Fastify({
    ...(server.tls ? { https: server.tls.serverOptions() } : {}),
    ...(server.connections ? connectionOptions(server.connections, () => recordRefusal) : {}),
    loggerInstance: server.logger as unknown as FastifyBaseLogger,
    logController: new OneLineRequestLog(), // one info line per request (below)
    bodyLimit: server.maxRequestBytes,
    // Request logs carry method, url and status only: no headers (tokens), no bodies (arguments).
    // Execution ids are up to 200 printable characters, percent-encoded in paths.
    routerOptions: { maxParamLength: 1024 },
    // Schemas check types as sent: never turn a number into a string (edge/schemas.ts).
    ajv: { customOptions: { coerceTypes: false, allowUnionTypes: true } },
    // Errors raised by the router itself (bad percent-encoding, over-long parameters) leave in
    // cmcp's error format, without echoing the URL.
    frameworkErrors: (_err, _req, reply) => {
      void (reply as FastifyReply)
        .code(400)
        .send({ error: { error_code: 'INVALID_REQUEST', message: 'malformed request URL' } });
    },
  });
  // JSON only: without this, fastify's default text/plain parser would hand strings to the routes.
  app.removeContentTypeParser('text/plain');
  strictUtf8Json(app);
  app.decorateRequest('startedAt', 0n);
  app.decorateRequest('agentId', '');
  app.decorateRequest('agentBlocked', false);
  app.decorateRequest('agentTokenAttributes', null);
  app.decorateRequest('operatorId', '');
  app.decorateRequest('mcpUnauthenticated', false);
  app.addHook('onRequest', async (req) => {
    req.startedAt = process.hrtime.bigint();
  });
  // Before every authentication hook: a rebinding page never reaches a token check.
  if (server.allowedHosts)
    app.addHook(
      'onRequest',
      hostCheck(server.allowedHosts, (route) => refusals.hostRefusals.record(route)),
    );
  app.setErrorHandler(errorHandler(server.maxRequestBytes, recordRefusal));
  server.drain?.attach(app, recordRefusal);
  if (server.connections) capConnections(app, server.connections, recordRefusal);

  const operator = e.operator.operator;
  app.register(healthPlugin, e.health);
  if (server.tls) {
    server.tls.attach(app.server as unknown as TlsServer);
    app.register(tlsEvidenceRoute(server.tls));
  }
  if (e.agent.oauth) app.register(oauthMetadataPlugin, { oauth: e.agent.oauth });
  app.register(operatorPlugin, { ...e.operator, auth, recordRefusal });
  if (e.console) app.register(consoleRoutes(e.console), { prefix: '/operator/ui' });
  app.register(agentPlugin, {
    ...e.agent,
    auth,
    isBlocked: (id) => operator?.isBlocked(id) ?? false,
    recordAuthFailure: (route) => refusals.authFailures.record(route),
    recordRefusal,
  });
  return app;
}

/**
 * One log line per HTTP request instead of fastify's two: `incoming request` (with the parsed
 * request) goes to `debug`, and `request completed` at `info` carries method, URL, status and
 * response time. Under load the second info line per call was a measurable share of the event
 * loop; nothing is lost at `debug`. Errors stay as fastify logs them.
 */
class OneLineRequestLog extends LogController {
  override incomingRequest(request: FastifyRequest): void {
    request.log.debug({ req: request }, 'incoming request');
  }

  override requestCompleted(
    error: Error | null | undefined,
    request: FastifyRequest,
    reply: FastifyReply,
  ): void {
    if (error) {
      super.requestCompleted(error, request, reply);
      return;
    }
    reply.log.info(
      {
        method: request.method,
        url: request.url,
        statusCode: reply.statusCode,
        responseTime: reply.elapsedTime,
      },
      'request completed',
    );
  }
}
