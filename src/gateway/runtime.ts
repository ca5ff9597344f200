/**
 * Composes a running gateway from a validated config, in start-up order: database and instance
 * lock, attestation provider, upstreams, catalog and policy, recovery, sessions, operator
 * controls, measurement, call path and HTTP app. Each module records its own start-up entries
 * in the gateway chain (gateway_start, attestation_provider, catalog_load, policy_load,
 * recovered calls, gateway_measurement) before the listener opens. The steps a replica takes
 * too (provider and upstreams, measurement, call path, relay, MCP layer, HTTP app) are
 * compose.ts's; this file holds SQLite's own, read top to bottom in start-up order.
 */
import { generateKeyPairSync } from 'node:crypto';
import { ed25519PublicJwk, jwkThumbprint } from '@cmcp/verify/formats';
import type { FastifyInstance } from 'fastify';
import pino, { type Logger } from 'pino';
import { AuditChain } from '../audit/chain.js';
import { SessionSensitivity } from '../call/sensitivity.js';
import { loadCatalogFile } from '../catalog/catalog.js';
import type { CatalogGuard } from '../catalog/guard.js';
import { startCatalog } from '../catalog/startup.js';
import { type GatewayConfig, isLoopback } from '../config/index.js';
import { ConsoleReadModel } from '../console/read-model.js';
import type { GatewayMetrics } from '../metrics/registry.js';
import { loadBundleDir } from '../policy/bundle.js';
import { parsePolicyPublicKey } from '../policy/signature.js';
import {
  configuredEntities,
  recordResumedPolicy,
  startPolicy,
  tokenAttributeNames,
} from '../policy/startup.js';
import type { PolicyState } from '../policy/state.js';
import type { Relay } from '../relay/relay.js';
import { recordRenewals } from '../relay/renewals.js';
import { type GatewayKey, type SessionFacts, SessionService } from '../session/service.js';
import type { Db } from '../store/db.js';
import type { CallStore, OperatorRecords } from '../store/port.js';
import { AttemptLog } from '../store/sqlite/attempts.js';
import { removeUnlinkedClaimParts } from '../store/sqlite/claim-text.js';
import type { ExecutionRegistry } from '../store/sqlite/executions.js';
import { openSqliteStorage, type SqliteStorageOptions } from '../store/sqlite/open.js';
import { CallRecovery } from '../store/sqlite/recovery.js';
import { sqliteRelayEntries } from '../store/sqlite/relay-entries.js';
import { sqliteSensitivityReads } from '../store/sqlite/sensitivity.js';
import { readSession, type SqliteSessionStore } from '../store/sqlite/session-store.js';
import { recordSelection } from '../tee/detect.js';
import type { AttestationProvider } from '../tee/provider.js';
import { requiredBindingTier } from '../tee/tier.js';
import { type ListenerTls, openListenerTls } from '../tls/listener.js';
import type { Tracing } from '../tracing/index.js';
import type { UpstreamPool } from '../upstream/pool.js';
import { recordAvailability } from '../upstream/record.js';
import type { ClientSessions } from './agent/mcp/client-sessions.js';
import type { McpEndpoint } from './agent/mcp/endpoint.js';
import { composeApp, composeServing, measureGateway, startCommon, startMetrics } from './compose.js';
import { Readiness } from './health/readiness.js';
import { Drain } from './lifecycle/drain.js';
import { recordGatewayStart, warnExposure } from './lifecycle/records.js';
import { gracefulShutdown, type ShutdownReport } from './lifecycle/shutdown.js';
import { blockLedger } from './operator/blocks.js';
import { OperatorControls } from './operator/controls.js';
import { SqliteReloads } from './operator/sqlite-reload.js';

export interface Gateway {
  app: FastifyInstance;
  db: Db;
  chain: AuditChain;
  sessions: SessionService;
  upstreams: UpstreamPool;
  executions: ExecutionRegistry;
  provider: AttestationProvider;
  key: GatewayKey;
  /** Policy bundle hash, catalog hash, enforcement mode (mutated by a policy reload). */
  facts: SessionFacts;
  policy: PolicyState | null;
  catalog: CatalogGuard | null;
  operator: OperatorControls;
  /** The relayed MCP methods and the client sessions' upstream connections (src/relay/). */
  relay: Relay;
  /** The MCP layer behind `POST /mcp` (the HTTP edge hands it each request and its channel). */
  mcp: McpEndpoint;
  /** `http://host:port` once listening. */
  url: string;
  /** The separate metrics listener's `http://host:port` (metrics.listen), else null. */
  metricsUrl: string | null;
  /** Client sessions (`Mcp-Session-Id`) of the HTTP edge. */
  clientSessions: ClientSessions;
  /** TLS of the listeners (null: plain HTTP). */
  tls: ListenerTls | null;
  close(): Promise<void>;
  /**
   * Graceful shutdown (shutdown.ts): stop admitting, drain for `drainMs` (default
   * `shutdown.drain_ms`), record what did not drain, close open sessions with claims, close.
   */
  shutdown(drainMs?: number): Promise<ShutdownReport>;
}

/** A fresh in-memory Ed25519 gateway key (docs/spec/binding.md). Never written to disk. */
export function newGatewayKey(): GatewayKey {
  const { privateKey } = generateKeyPairSync('ed25519');
  const jwk = ed25519PublicJwk(privateKey);
  return { privateKey, jwk, thumbprint: jwkThumbprint(jwk) };
}

/**
 * Loads the configured policy bundle and catalog (both optional) before anything starts.
 * @throws PolicyBundleError | CatalogError | PolicyKeyError
 */
function loadPolicyAndCatalog(cfg: GatewayConfig) {
  const catalog = cfg.catalog ? loadCatalogFile(cfg.catalog.file) : null;
  if (!cfg.policy) return { catalog, bundle: null, signingKey: null };
  const bundle = loadBundleDir(cfg.policy.bundle);
  const signingKey = cfg.policy.signing_key ? parsePolicyPublicKey(cfg.policy.signing_key) : null;
  return { catalog, bundle, signingKey };
}

/** What the controls phase needs from the core. */
interface Core {
  db: Db;
  chain: AuditChain;
  /** The sessions' side of the storage port. */
  sessionStore: SqliteSessionStore;
  key: GatewayKey;
  provider: AttestationProvider;
  upstreams: UpstreamPool;
  executions: ExecutionRegistry;
  /** The operators' side of the storage port (agent blocks). */
  operatorRecords: OperatorRecords;
  log: Logger;
}

/** Metrics (null when disabled), the tracer, and readiness: what observes the gateway. */
interface Observers {
  metrics: GatewayMetrics | null;
  tracing: Tracing;
  readiness: Readiness;
  drain: Drain;
  /** The call path's side of the storage port. */
  callStore: CallStore;
  /** TLS of the listeners (null: plain HTTP). */
  tls: ListenerTls | null;
}

/**
 * Catalog, policy, recovery, sessions, operator controls and measurement, in that order:
 * everything a session binding names is settled before the first session can open.
 */
async function startControls(
  cfg: GatewayConfig,
  loaded: ReturnType<typeof loadPolicyAndCatalog>,
  core: Core,
) {
  const { db, chain, key, provider, upstreams, executions, log } = core;
  // Catalog and policy (docs/spec/policy.md): their hashes go into every session binding and claim.
  const catalog =
    loaded.catalog && cfg.catalog
      ? startCatalog(
          loaded.catalog,
          cfg.catalog,
          cfg.upstreams.map((u) => u.name),
          chain,
          upstreams,
          log,
        )
      : null;
  const policy =
    loaded.bundle && cfg.policy
      ? startPolicy(
          loaded.bundle,
          loaded.signingKey,
          cfg.policy,
          configuredEntities(cfg, catalog, upstreams),
          chain,
          tokenAttributeNames(cfg),
        )
      : null;
  const facts: SessionFacts = {
    gatewayMeasurement: null,
    policyBundleHash: policy?.engine.bundle.hash ?? null,
    catalogHash: catalog?.hash ?? null,
    enforcementMode: policy?.mode ?? 'none',
  };

  const sessions = new SessionService(core.sessionStore, key, facts, provider, log, {
    limits: {
      defaultMaxCalls: cfg.sessions.default_max_calls,
      defaultMaxAgeS: cfg.sessions.default_max_age_s,
    },
    requiredTier: requiredBindingTier(cfg.attestation),
  });
  // Recovery before the listener opens (and before stale sessions close, so each interrupted
  // call lands in the session chain it ran in): nothing forwarded by an earlier process stays
  // without a terminal entry.
  const recovery = new CallRecovery(
    db,
    chain,
    new AttemptLog(db, cfg.instance_id),
    executions,
    core.sessionStore,
  );
  const recovered = recovery.run(
    'in flight at start-up: the previous process stopped before a terminal outcome was recorded',
  );
  if (recovered.attempts || recovered.executions)
    log.warn(recovered, 'recorded calls in flight in a previous run as outcome_unknown');
  // A close stopped between its claim text's parts and its closing transaction left parts no
  // claim links (store/sqlite/claim-text.ts); its session is still open and closes again below or later.
  const orphanParts = removeUnlinkedClaimParts(db, cfg.instance_id);
  if (orphanParts) log.warn({ parts: orphanParts }, "removed a previous run's unlinked claim text parts");
  // Made unusable now, closed in batches while start-up goes on (awaited once listening).
  const staleClosed = sessions.closeStale().then((stale) => {
    if (stale)
      log.warn(
        { sessions: stale },
        'closed sessions left open by a previous run (claims issued, binding absent)',
      );
  });
  warnExposure(cfg, log);

  const knownAgents = new Set(cfg.agents.map((a) => a.agent_id));
  if (cfg.dev_mode) knownAgents.add('dev');
  // Token agents are not listed in the config: those that opened sessions before are known.
  if (cfg.oauth)
    for (const r of db.prepare<[], { agent_id: string }>('SELECT DISTINCT agent_id FROM sessions').all())
      knownAgents.add(r.agent_id);
  const reloads = new SqliteReloads(chain, sessions, facts, policy, log);
  const operator = new OperatorControls({
    blocks: blockLedger(core.operatorRecords, {
      closeOpenOf: (agentId) => sessions.closeOpenInBatches(agentId, 'agent_blocked'),
      knownBySessions: false,
    }),
    reloads,
    facts,
    policy,
    catalog,
    knownAgents,
    log,
  });
  await operator.start();
  const resumed = reloads.resumeReloaded();
  if (resumed && policy) {
    facts.policyBundleHash = resumed.hash;
    recordResumedPolicy(chain, resumed, policy);
    log.info(
      { bundle_hash: resumed.hash, version: resumed.manifest.version },
      'resumed the last reloaded policy',
    );
  }
  const measurer = await measureGateway(cfg, provider, chain, facts, log);
  reloads.onReload((bundle) => measurer.reload(bundle));

  return { catalog, policy, facts, sessions, operator, measurer, recovery, staleClosed };
}

/** The call path, the MCP layer and the HTTP app over them (not yet listening). */
function buildHttp(
  cfg: GatewayConfig,
  core: Omit<Core, 'key' | 'provider' | 'operatorRecords'> & { sessions: SessionService },
  catalog: CatalogGuard | null,
  policy: PolicyState | null,
  operator: OperatorControls,
  obs: Observers,
) {
  const { db, chain, sessions, upstreams, executions, log } = core;
  const serving = composeServing(cfg, {
    store: obs.callStore,
    sessions,
    upstreams,
    sensitivity: new SessionSensitivity(sqliteSensitivityReads(db, chain), upstreams, catalog),
    catalog,
    policy,
    chain,
    relayEntries: sqliteRelayEntries(chain, core.sessionStore),
    metrics: obs.metrics,
    tracing: obs.tracing,
    log,
  });
  const app = composeApp(cfg, serving, {
    log,
    drain: obs.drain,
    readiness: obs.readiness,
    sessions,
    executions,
    sessionAgent: (id) => readSession(db, id)?.agent_id ?? null,
    operator,
    metrics: obs.metrics,
    tls: obs.tls,
    onTokenAgent: (id) => operator.noteAgent(id),
    console: (auth, recordAuthFailure) => ({
      auth,
      read: new ConsoleReadModel(db, chain, operator, operator.agentIds()),
      block: (op, agent, reason) => operator.blockAgent(op, agent, reason ? { reason } : {}),
      unblock: (op, agent) => operator.unblockAgent(op, agent),
      secureCookie: !isLoopback(cfg.listen.host),
      recordAuthFailure,
    }),
  });
  return { app, ...serving };
}

/**
 * Starts a gateway and listens. On any start-up failure what was opened is closed again.
 * @throws InstanceBusyError when the instance runs elsewhere; AttestationStartError; upstream
 *   or tool-name-clash errors; PolicyBundleError, CatalogError or PolicyKeyError for an
 *   unusable policy or catalog (the gateway never starts with a policy it could not load); a
 *   busy port.
 * @param storageOptions SQLite mechanisms turned off for a measurement (tests); none by default.
 */
export async function startGateway(
  cfg: GatewayConfig,
  logger?: Logger,
  storageOptions?: SqliteStorageOptions,
): Promise<Gateway> {
  const log = logger ?? pino({ level: process.env.CMCP_LOG_LEVEL ?? 'info' });
  const loaded = loadPolicyAndCatalog(cfg);
  const opened: (() => void | Promise<void>)[] = []; // closed in reverse on a failed start
  const storage = openSqliteStorage(cfg, log, storageOptions);
  const { db } = storage;
  opened.push(() => storage.close());
  try {
    const chain = new AuditChain(db);
    const callStore = storage.callStore(chain);
    const sessionStore = storage.sessionStore(chain);
    const executions = callStore.local.executions;
    const key = newGatewayKey();
    const { selection, provider, tracing, metrics, upstreams } = await startCommon(cfg, log, opened, {
      db,
      dbPath: cfg.database,
    });
    recordGatewayStart(chain, cfg, key, provider, upstreams.listTools().length);
    recordSelection(chain, selection);
    recordAvailability(upstreams, chain, log);
    recordRenewals(upstreams, chain, log);

    const { catalog, policy, facts, sessions, operator, measurer, recovery, staleClosed } =
      await startControls(cfg, loaded, {
        db,
        chain,
        sessionStore,
        key,
        provider,
        upstreams,
        executions,
        operatorRecords: storage.operatorRecords(chain),
        log,
      });
    const drain = new Drain();
    const tls = await openListenerTls(cfg);
    const { app, refusals, calls, relay, mcp, clientSessions } = buildHttp(
      cfg,
      { db, chain, sessionStore, sessions, upstreams, executions, log },
      catalog,
      policy,
      operator,
      {
        metrics,
        tracing,
        readiness: new Readiness(storage.writeProbe(cfg.instance_id), upstreams, provider, drain, null, {
          requiredUpstreams: cfg.upstreams.filter((u) => u.required).map((u) => u.name),
        }),
        drain,
        callStore,
        tls,
      },
    );
    const url = await app.listen({ host: cfg.listen.host, port: cfg.listen.port });
    opened.push(() => app.close());
    // Only a listening gateway extends the measurement PCR (queued before any session's quote).
    const extended = measurer.listening(cfg.instance_id);
    extended.catch(() => undefined); // awaited below; observed here should a later step fail first
    await staleClosed;
    const metricsListener = await startMetrics(cfg, metrics, refusals, tls);
    // Periodic re-list for drift checks (catches definitions changed without a notification).
    const relist =
      catalog && cfg.catalog && cfg.catalog.relist_interval_s > 0
        ? setInterval(() => void upstreams.refreshAll('interval'), cfg.catalog.relist_interval_s * 1000)
        : null;
    relist?.unref();
    await extended;
    await tls?.bind({ instanceId: cfg.instance_id, key, facts, provider, log });
    log.info({ url, provider: provider.name, tools: upstreams.listTools().length }, 'cmcp gateway listening');
    let closed = false;
    const close = async () => {
      if (closed) return;
      closed = true;
      if (relist) clearInterval(relist);
      await tls?.close();
      calls.pendingTerminals.close(); // what is still pending is sealed by the next start's recovery
      await metricsListener?.close();
      clientSessions.close();
      await app.close();
      refusals.authFailures.flush();
      refusals.hostRefusals.flush();
      await relay.close();
      await upstreams.close();
      await measurer.settled();
      provider.close();
      await tracing.shutdown();
      await storage.close();
    };
    const parts = {
      app,
      drain,
      calls,
      pendingTerminals: calls.pendingTerminals,
      recovery,
      sessions,
      log,
      close,
    };
    return {
      app,
      db,
      chain,
      sessions,
      upstreams,
      executions,
      provider,
      key,
      facts,
      policy,
      catalog,
      operator,
      relay,
      mcp,
      url,
      metricsUrl: metricsListener?.url ?? null,
      clientSessions,
      tls,
      close,
      shutdown: (drainMs = cfg.shutdown.drain_ms) => gracefulShutdown(parts, drainMs),
    };
  } catch (e) {
    for (const close of opened.reverse()) await close();
    throw e;
  }
}
