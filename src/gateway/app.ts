/**
 * The fastify application (docs/spec/mcp.md, docs/spec/mcp.md#inbound): three plugins, each with its own authentication —
 * health (none), agent routes (agent tokens: /mcp, /sessions, /executions) and operator routes
 * (operator tokens: /operator/…). Errors leave as JSON with a stable `error_code`; never a
 * stack trace.
 */
import Fastify, { type FastifyBaseLogger, type FastifyInstance, type FastifyReply } from 'fastify';
import type { Logger } from 'pino';
import { type ConsoleDeps, consoleRoutes } from '../console/plugin.js';
import { metricsRoutes } from '../metrics/plugin.js';
import type { GatewayMetrics } from '../metrics/registry.js';
import type { AgentSessions, ExecutionReads } from '../session/ports.js';
import type { AgentLimits } from './agent/limits.js';
import type { ClientSessions } from './agent/mcp/client-sessions.js';
import type { McpEndpoint } from './agent/mcp/endpoint.js';
import type { InflightRequests } from './agent/mcp/inflight.js';
import type { OAuthVerifier } from './agent/oauth/index.js';
import { oauthMetadataRoutes } from './agent/oauth/metadata.js';
import { agentRoutes, type RefusalSink } from './agent/plugin.js';
import { NOT_UTF8 } from './edge/bodies.js';
import { type ConnectionLimitSettings, capConnections, connectionOptions } from './edge/connections.js';
import type { Authenticator } from './edge/credentials.js';
import { hostCheck } from './edge/host-check.js';
import { errorHandler } from './edge/replies.js';
import { OneLineRequestLog } from './edge/request-log.js';
import { healthRoutes } from './health/plugin.js';
import type { Readiness } from './health/readiness.js';
import type { Drain } from './lifecycle/drain.js';
import { type OperatorApi, operatorAuth, operatorRoutes } from './operator/plugin.js';

export type { OperatorApi } from './operator/plugin.js';

declare module 'fastify' {
  interface FastifyRequest {
    /** process.hrtime.bigint() at receipt, for `latency_us`. */
    startedAt: bigint;
  }
}

export interface AppDeps {
  logger: Logger;
  auth: Authenticator;
  mcp: McpEndpoint;
  sessions: AgentSessions;
  executions: ExecutionReads;
  maxRequestBytes: number;
  /** Records unauthenticated requests in the gateway chain. */
  recordAuthFailure: (route: string) => void;
  /** Records other refused requests (operator credential misuse, blocked agents). */
  recordRefusal?: RefusalSink;
  operator?: OperatorApi;
  /** The operator console (src/console/), served under /operator/ui with its own login. */
  console?: ConsoleDeps;
  /** Served at /metrics on this listener, behind the operator hook. */
  metrics?: GatewayMetrics;
  /** Answers /readyz. */
  readiness?: Readiness;
  /** The shutdown gate (drain.ts): refuses new requests once stopped, counts those in flight. */
  drain?: Drain;
  /** JWT access tokens for agents, and the RFC 9728 metadata route. */
  oauth?: OAuthVerifier;
  /** The agent a session belongs to (to record cross-agent probes), null: none. */
  sessionAgent?: (sessionId: string) => string | null | Promise<string | null>;
  /** Told every agent a JWT access token authenticated (operators can then block it). */
  onTokenAgent?: (agentId: string) => void;
  /** Per-agent limits (rate, in flight, open sessions); none without. */
  agentLimits?: AgentLimits;
  /** Per-connection timeouts and the connection cap; Node's and fastify's defaults without. */
  connections?: ConnectionLimitSettings;
  /** Client sessions (`Mcp-Session-Id`) and the requests waiting on clients (`/mcp`). */
  clientSessions: ClientSessions;
  inflight: InflightRequests;
  /** DNS-rebinding protection: the hosts Host and Origin may name (host-check.ts); absent: no check. */
  allowedHosts?: ReadonlySet<string>;
  /** Records requests refused by that check (aggregated). */
  recordHostRefusal?: (route: string) => void;
}

/** Builds (but does not start) the HTTP server. */
export function buildApp(d: AppDeps): FastifyInstance {
  const recordRefusal: RefusalSink = d.recordRefusal ?? (() => undefined);
  const app = Fastify({
    ...(d.connections ? connectionOptions(d.connections, () => recordRefusal) : {}),
    loggerInstance: d.logger as unknown as FastifyBaseLogger,
    logController: new OneLineRequestLog(), // one info line per request (request-log.ts)
    bodyLimit: d.maxRequestBytes,
    // Request logs carry method, url and status only: no headers (tokens), no bodies (arguments).
    // Execution ids are up to 200 printable characters, percent-encoded in paths.
    routerOptions: { maxParamLength: 1024 },
    // Schemas check types as sent: never turn a number into a string (schemas.ts).
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
  if (d.allowedHosts)
    app.addHook('onRequest', hostCheck(d.allowedHosts, d.recordHostRefusal ?? (() => undefined)));
  app.setErrorHandler(errorHandler(d.maxRequestBytes, recordRefusal));
  d.drain?.attach(app, recordRefusal);
  if (d.connections) capConnections(app, d.connections, recordRefusal);

  const operator = d.operator;
  app.register(healthRoutes(d.readiness));
  if (d.oauth) app.register(oauthMetadataRoutes(d.oauth));
  if (d.metrics)
    app.register(metricsRoutes(d.metrics, operatorAuth({ auth: d.auth, operator, recordRefusal })));
  app.register(operatorRoutes({ auth: d.auth, operator, recordRefusal }), { prefix: '/operator' });
  if (d.console) app.register(consoleRoutes(d.console), { prefix: '/operator/ui' });
  app.register(
    agentRoutes({
      auth: d.auth,
      mcp: d.mcp,
      sessions: d.sessions,
      executions: d.executions,
      isBlocked: (id) => operator?.isBlocked(id) ?? false,
      recordAuthFailure: d.recordAuthFailure,
      recordRefusal,
      ...(d.oauth ? { oauth: d.oauth } : {}),
      ...(d.sessionAgent ? { sessionAgent: d.sessionAgent } : {}),
      ...(d.onTokenAgent ? { onTokenAgent: d.onTokenAgent } : {}),
      ...(d.agentLimits ? { limits: d.agentLimits } : {}),
      clientSessions: d.clientSessions,
      inflight: d.inflight,
    }),
  );
  return app;
}

/**
 * JSON bodies must be valid UTF-8 (RFC 8259 §8.1). fastify's own parser decodes the bytes
 * leniently, replacing invalid sequences with U+FFFD, which would forward and hash text the
 * client never sent (the kind of fault C-JCS-1 names); here the bytes are decoded strictly and
 * an invalid body is refused as unparsable (400, PARSE_ERROR on /mcp) before fastify's JSON
 * parser (prototype-poisoning protection kept) sees it.
 */
function strictUtf8Json(app: FastifyInstance): void {
  const parseJson = app.getDefaultJsonParser('error', 'error');
  const utf8 = new TextDecoder('utf-8', { fatal: true, ignoreBOM: true });
  app.removeContentTypeParser('application/json');
  app.addContentTypeParser('application/json', { parseAs: 'buffer' }, (req, body, done) => {
    let text: string;
    try {
      text = utf8.decode(body as Buffer);
    } catch {
      done(
        Object.assign(new Error('the body is not valid UTF-8'), { statusCode: 400, code: NOT_UTF8 }),
        undefined,
      );
      return;
    }
    parseJson(req, text, done);
  });
}
