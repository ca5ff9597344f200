/**
 * The composition steps a gateway takes on either engine, once its storage, sessions, policy and
 * catalog are up (lifecycle/start.ts, on either engine): the call path, the
 * refusal record, the relay, client sessions and the MCP layer over them ({@link composeServing}),
 * and the HTTP app of the edge's plugins ({@link composeApp}). What differs by engine comes in as
 * ports (store/port.ts `CallStore`, session/ports.ts, the relay's `RelayEntrySink`, the gateway
 * chain's `GatewayChainSink`).
 */

import type { Tracer } from '@opentelemetry/api';
import type { FastifyInstance } from 'fastify';
import type { Logger } from 'pino';
import { CallOrchestrator } from '../call/orchestrator.js';
import type { SessionSensitivity } from '../call/sensitivity.js';
import type { CatalogGuard } from '../catalog/guard.js';
import { catalogToolList } from '../catalog/startup.js';
import type { GatewayConfig } from '../config/index.js';
import type { ConsoleDeps } from '../console/plugin.js';
import { GatewayMeasurer } from '../measure/record.js';
import { countedWrites } from '../metrics/audit-writes.js';
import { countBindingFailures } from '../metrics/bindings.js';
import { callTelemetry } from '../metrics/call-telemetry.js';
import { startMetricsListener } from '../metrics/plugin.js';
import { GatewayMetrics } from '../metrics/registry.js';
import type { PolicyState } from '../policy/state.js';
import { callLink } from '../relay/calls.js';
import type { RelayEntrySink } from '../relay/evidence.js';
import { notificationLimits } from '../relay/notification-budget.js';
import { Relay } from '../relay/relay.js';
import {
  CheckpointSigner,
  checkpointedRelayEntries,
  checkpointedWrites,
  gatewayNoteSigner,
} from '../session/checkpoints.js';
import type { AgentSessions, ExecutionReads, RelaySessionReads } from '../session/ports.js';
import { ReceiptService } from '../session/receipts.js';
import type { GatewayKey, SessionFacts } from '../session/types.js';
import type { AuditFeed, CallStore, GatewayChainSink, TreeStore } from '../store/port.js';
import type { Db } from '../store/sqlite/db.js';
import { selectProvider } from '../tee/detect.js';
import type { AttestationProvider } from '../tee/provider.js';
import { assertTierReached } from '../tee/tier.js';
import type { ListenerTls } from '../tls/listener.js';
import type { Tracing } from '../tracing/index.js';
import { startTracing } from '../tracing/index.js';
import { UpstreamPool } from '../upstream/pool.js';
import { edgeLimits } from './agent/limits.js';
import { ClientSessions } from './agent/mcp/client-sessions.js';
import { McpEndpoint } from './agent/mcp/endpoint.js';
import { InflightRequests } from './agent/mcp/inflight.js';
import { OAuthVerifier } from './agent/oauth/verifier.js';
import type { AgentRestOptions } from './agent/rest/plugin.js';
import { buildApp } from './app.js';
import { Authenticator } from './edge/credentials.js';
import { allowedHosts, hostCheck } from './edge/host-check.js';
import type { GatewayRefusals } from './edge/refusals.js';
import type { Readiness } from './health/readiness.js';
import type { Drain } from './lifecycle/drain.js';
import { gatewayRefusals, recordClientSession } from './lifecycle/records.js';
import type { OperatorApi } from './operator/plugin.js';
import { upstreamOAuthPlugin } from './upstream-oauth/plugin.js';

/**
 * The attestation provider (configured or auto-detected; `minimum_tier` refuses here,
 * docs/spec/attestation.md#selection-and-tiers), tracing, metrics and the upstreams, in that
 * order; each one's closer goes onto `opened`.
 * @param metricsDb SQLite's connection and file for the metrics' gauges; null on PostgreSQL.
 * @throws AttestationStartError; upstream or tool-name-clash errors.
 */
export async function startCommon(
  cfg: GatewayConfig,
  log: Logger,
  opened: (() => unknown)[],
  metricsDb: { db: Db; dbPath: string } | null,
) {
  const selection = await selectProvider(cfg.attestation, cfg.instance_id);
  const provider = selection.provider;
  opened.push(() => provider.close());
  log.info(selection.detail, 'attestation provider selected');
  const tracing = startTracing(cfg.tracing);
  opened.push(() => tracing.shutdown());
  const metrics = cfg.metrics.enabled
    ? new GatewayMetrics({
        db: metricsDb?.db ?? null,
        dbPath: metricsDb?.dbPath ?? '',
        upstreams: cfg.upstreams.map((u) => u.name),
      })
    : null;
  if (metrics) countBindingFailures(provider, metrics);
  const upstreams = new UpstreamPool(
    cfg.upstreams,
    log,
    cfg.limits.max_result_bytes,
    tracing.enabled ? tracing.tracer : undefined,
  );
  opened.push(() => upstreams.close());
  await upstreams.start();
  if (metrics) {
    metrics.upstreamHealth((name) => upstreams.availability.get(name) === null);
    metrics.knowTools((name) => upstreams.listTools().some((t) => t.name === name));
  }
  return { selection, provider, tracing, metrics, upstreams };
}

/**
 * The gateway measurement (docs/spec/measurement.md) of what runs now, in every session's
 * binding, taken again after every reload; `minimum_tier` must be reached, not only configured
 * (src/tee/tier.ts).
 * @throws AttestationStartError when the provider does not reach the required tier.
 */
export async function measureGateway(
  cfg: GatewayConfig,
  provider: AttestationProvider,
  chain: GatewayChainSink,
  facts: SessionFacts,
  log: Logger,
): Promise<GatewayMeasurer> {
  const measurer = new GatewayMeasurer(provider, chain, facts, log);
  const started = await measurer.start({
    policyBundleHash: facts.policyBundleHash,
    catalogHash: facts.catalogHash,
    config: cfg,
  });
  assertTierReached(cfg.attestation, provider, started);
  return measurer;
}

/**
 * The separate metrics listener when `metrics.listen` names one (else null), with the same
 * DNS-rebinding protection as the main listener and its refusals in the same record.
 * @throws a busy port.
 */
export function startMetrics(
  cfg: GatewayConfig,
  metrics: GatewayMetrics | null,
  refusals: GatewayRefusals,
  tls?: ListenerTls | null,
): Promise<{ url: string; close(): Promise<void> } | null> {
  const listen = cfg.metrics.listen;
  if (!metrics || !listen) return Promise.resolve(null);
  const check = hostCheck(allowedHosts(listen), (route) => refusals.hostRefusals.record(route));
  return startMetricsListener(metrics, listen.host, listen.port, check, tls ?? undefined);
}

/** What the serving parts are built over. */
export interface ServingInputs {
  store: CallStore;
  sessions: AgentSessions & RelaySessionReads;
  upstreams: UpstreamPool;
  /** Each session's highest forwarded sensitivity (call/sensitivity.ts). */
  sensitivity: SessionSensitivity;
  catalog: CatalogGuard | null;
  policy: PolicyState | null;
  /** The gateway chain: refusals and client-session records. */
  chain: GatewayChainSink;
  /** Where relayed requests' entries go. */
  relayEntries: RelayEntrySink;
  /** The chains' trees and signed checkpoints (receipts, consistency proofs). */
  trees: TreeStore;
  /** This process's gateway key: it signs the checkpoints. */
  key: GatewayKey;
  metrics: GatewayMetrics | null;
  tracing: Tracing;
  log: Logger;
}

/** The call path and the MCP layer of one gateway, not yet behind HTTP. */
export interface Serving {
  calls: CallOrchestrator;
  refusals: GatewayRefusals;
  relay: Relay;
  clientSessions: ClientSessions;
  mcp: McpEndpoint;
  /** Server-to-client requests waiting for the client's answer (request and standalone streams). */
  inflight: InflightRequests;
  /** The tracer of the agents' requests' SERVER spans (null: tracing off). */
  tracer: Tracer | null;
  /** Signs the session chains' checkpoints, batched per window. */
  checkpoints: CheckpointSigner;
  receipts: ReceiptService;
  /** The upstreams (the OAuth callback brings one in once authorized). */
  upstreams: UpstreamPool;
}

/** Builds the call path, the refusal record, the relay, client sessions and the MCP layer. */
export function composeServing(cfg: GatewayConfig, i: ServingInputs): Serving {
  const { upstreams, catalog, metrics, log } = i;
  const policy = () => i.policy?.engine ?? null;
  const agentAttrs = new Map(cfg.agents.map((a) => [a.agent_id, a.attributes as Record<string, unknown>]));
  const agentAttributes = (id: string) => agentAttrs.get(id) ?? {};
  const checkpoints = new CheckpointSigner(
    i.trees,
    gatewayNoteSigner(i.key),
    cfg.sessions.checkpoint_window_ms,
    log,
  );
  const receipts = new ReceiptService(i.trees, checkpoints, (agentId, sessionId) =>
    i.sessions.get(agentId, sessionId),
  );
  const calls = new CallOrchestrator(
    checkpointedWrites(metrics ? countedWrites(i.store, metrics) : i.store, checkpoints),
    i.sessions,
    upstreams,
    i.sensitivity,
    log,
    { policy, catalog, agentAttributes },
    callTelemetry(metrics, i.tracing.enabled ? i.tracing.tracer : null),
  );
  const refusals = gatewayRefusals(i.chain, log, metrics ? (code) => metrics.refused(code) : undefined);
  const listTools = catalog ? () => catalogToolList(catalog, upstreams) : () => upstreams.listTools();
  const relay = new Relay({
    pool: upstreams,
    entries: checkpointedRelayEntries(i.relayEntries, checkpoints),
    sessions: i.sessions,
    log,
    policy,
    agentAttributes,
    maxSensitivity: (id, row) => calls.sensitivity.max(id, row),
    listTools,
    catalogued: catalog !== null,
    pageSize: cfg.limits.list_page_size,
    notificationLimits: notificationLimits(cfg.limits),
    onNotificationDropped: (agentId, detail) =>
      refusals.refused(agentId, 'UPSTREAM_NOTIFICATIONS_LIMITED', { route: 'notification', ...detail }),
    ...(metrics ? { onRefusal: (code: string) => metrics.refused(code) } : {}),
  });
  // Server-to-client requests awaiting the client's POSTed answer, on any stream.
  const inflight = new InflightRequests();
  // The ClientSessionEvents the relayed methods notify on (standalone streams, session ends).
  const clientSessions = new ClientSessions({
    idleMs: cfg.sessions.client_idle_s * 1000,
    onOpen: (s, clientInfo) => recordClientSession(i.chain, s, clientInfo, log),
    inflight,
    streams: cfg.streams,
  });
  relay.attach(clientSessions);
  const mcp = new McpEndpoint(calls, upstreams, refusals.refused, {
    ...(catalog ? { listTools } : {}),
    ...(metrics ? { onMethod: (m: string) => metrics.request(m) } : {}),
    methods: relay.methods,
    capabilities: () => relay.capabilities(),
    callLink: (req) => callLink(relay, req),
    declaredCapabilities: (channel) =>
      channel.clientSessionId === undefined
        ? channel.declaredCapabilities
        : clientSessions.capabilities(channel.clientSessionId),
    onNotification: (caller, method, channel) => {
      if (method === 'notifications/roots/list_changed' && channel.clientSessionId !== undefined)
        relay.sessions.rootsChanged(caller.agentId, channel.clientSessionId);
    },
  });
  return {
    calls,
    refusals,
    relay,
    clientSessions,
    mcp,
    inflight,
    tracer: i.tracing.enabled ? i.tracing.tracer : null,
    checkpoints,
    receipts,
    upstreams,
  };
}

/** What the HTTP app is built over, beyond the serving parts. */
export interface AppInputs {
  log: Logger;
  drain: Drain;
  readiness: Readiness;
  sessions: AgentSessions;
  executions: ExecutionReads;
  sessionAgent: AgentRestOptions['sessionAgent'];
  operator: OperatorApi;
  /** The audit export feed (`GET /operator/audit`). */
  audit: AuditFeed;
  metrics: GatewayMetrics | null;
  /** Told every agent a JWT access token authenticated (absent: not told). */
  onTokenAgent?: (agentId: string) => void;
  /** The operator console over the same credentials (absent: not served). */
  console?: (auth: Authenticator, recordAuthFailure: (route: string) => void) => ConsoleDeps;
  /** TLS of the listeners (src/tls/listener.ts); absent: plain HTTP. */
  tls?: ListenerTls | null;
}

/** Builds the HTTP app of the edge's plugins over the serving parts (not yet listening). */
export function composeApp(cfg: GatewayConfig, s: Serving, i: AppInputs): FastifyInstance {
  const auth = new Authenticator(cfg.agents, cfg.dev_mode, cfg.operators);
  const oauth = cfg.oauth ? new OAuthVerifier(cfg.oauth) : null;
  const { agentLimits, connections } = edgeLimits(cfg);
  const app = buildApp({
    server: {
      logger: i.log,
      maxRequestBytes: cfg.limits.max_request_bytes,
      refusals: s.refusals,
      connections,
      allowedHosts: allowedHosts(cfg.listen),
      drain: i.drain,
      ...(i.tls ? { tls: i.tls } : {}),
    },
    auth,
    health: { readiness: i.readiness },
    agent: {
      ...(oauth ? { oauth } : {}),
      ...(i.onTokenAgent ? { onTokenAgent: i.onTokenAgent } : {}),
      limits: agentLimits,
      mcp: {
        mcp: s.mcp,
        clientSessions: s.clientSessions,
        inflight: s.inflight,
        ...(s.tracer ? { tracer: s.tracer } : {}),
      },
      rest: {
        sessions: i.sessions,
        executions: i.executions,
        receipts: s.receipts,
        ...(i.sessionAgent ? { sessionAgent: i.sessionAgent } : {}),
      },
    },
    // /metrics on the main listener (operator token) unless metrics.listen names a listener of its own.
    operator: {
      operator: i.operator,
      audit: i.audit,
      ...(i.metrics && !cfg.metrics.listen ? { metrics: i.metrics } : {}),
    },
    ...(i.console ? { console: i.console(auth, (route) => s.refusals.authFailures.record(route)) } : {}),
  });
  if (oauth) app.addHook('onClose', () => oauth.close());
  app.register(upstreamOAuthPlugin, { upstreams: s.upstreams });
  return app;
}
