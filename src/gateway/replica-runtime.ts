/**
 * Composes a gateway replica serving on a shared PostgreSQL (`database:` a postgres:// URL;
 * docs/replicas.md), in start-up order: the pool and the schema, the replica's lease in place of
 * the instance lock (its own expired work recovered before anything else, then a heartbeat and
 * the sweep that seals other replicas' expired work), attestation provider, upstreams, the
 * start-up records, the configured catalog and policy, the replica's measurement, sessions (any replica
 * serving any session, default sessions too), the call path over the replica's fenced write
 * commands, the relay, and the HTTP app behind the lease gate.
 * What a replica does not serve yet is refused with POSTGRES_FEATURE_UNAVAILABLE
 * (lifecycle/replica-unavailable.ts). The steps both engines take are compose.ts's; this file
 * holds the replica's own, runtime.ts the SQLite gateway's; cli/start.ts picks one.
 */
import { GATEWAY_CHAIN_ID } from '@cmcp/verify/formats';
import type { FastifyInstance } from 'fastify';
import type pg from 'pg';
import pino, { type Logger } from 'pino';
import type { EntryInput } from '../audit/chain.js';
import { SessionSensitivity } from '../call/sensitivity.js';
import { loadCatalogFile } from '../catalog/catalog.js';
import { CatalogGuard } from '../catalog/guard.js';
import { catalogLoadEntry, watchCatalog } from '../catalog/startup.js';
import type { GatewayConfig } from '../config/index.js';
import type { GatewayMeasurer } from '../measure/record.js';
import { loadBundleDir } from '../policy/bundle.js';
import { parsePolicyPublicKey } from '../policy/signature.js';
import { configuredEntities, policyLoadEntry, policyState, tokenAttributeNames } from '../policy/startup.js';
import type { PolicyState } from '../policy/state.js';
import { recordRenewals } from '../relay/renewals.js';
import { attestReplica } from '../session/replica-start.js';
import { SessionService } from '../session/service.js';
import type { SessionFacts } from '../session/types.js';
import { maybeDie } from '../store/faults.js';
import { DatabaseUnavailableError, redactPostgresUrl } from '../store/migrations/index.js';
import { getExecution } from '../store/postgres/executions.js';
import { openPostgresStorage, type PostgresStorage } from '../store/postgres/open.js';
import { appendRelayEntry } from '../store/postgres/relay-entries.js';
import { recordReplicaStart } from '../store/postgres/replica-evidence.js';
import type { ReplicaLease } from '../store/postgres/replica-lease.js';
import { recoverOwnWork } from '../store/postgres/sealing.js';
import { isConnectionLoss } from '../store/postgres/transaction.js';
import type { AttestationProvider } from '../tee/provider.js';
import { requiredBindingTier } from '../tee/tier.js';
import { openListenerTls } from '../tls/listener.js';
import type { UpstreamPool } from '../upstream/pool.js';
import { recordAvailability } from '../upstream/record.js';
import { composeApp, composeServing, measureGateway, startCommon, startMetrics } from './compose.js';
import { Readiness } from './health/readiness.js';
import { Drain } from './lifecycle/drain.js';
import { LeaseGate, startReplicaLease } from './lifecycle/lease-gate.js';
import { type GatewayChainSink, gatewayStartEntry, warnExposure } from './lifecycle/records.js';
import { assertReplicaConfig, refuseConsole, replicaGauges } from './lifecycle/replica-unavailable.js';
import { blockLedger, closeEachOpen } from './operator/blocks.js';
import { BLOCK_READ_MS, OperatorControls } from './operator/controls.js';
import { ReplicaReloads } from './operator/replica-reload.js';
import { newGatewayKey } from './runtime.js';

/** A running replica. */
export interface ReplicaGateway {
  app: FastifyInstance;
  pool: pg.Pool;
  lease: ReplicaLease;
  gate: LeaseGate;
  sessions: SessionService;
  upstreams: UpstreamPool;
  provider: AttestationProvider;
  /** `http://host:port` once listening. */
  url: string;
  metricsUrl: string | null;
  close(): Promise<void>;
  /**
   * Stops admitting, waits up to `drainMs` for what was admitted, seals this replica's calls
   * still open (`outcome_unknown`, reason `gateway_stopped`), releases the lease and closes. Open
   * sessions stay open: the other replicas serve them.
   */
  shutdown(drainMs?: number): Promise<{ drained: boolean; sealed: number }>;
}

/** The reason recorded on a replica's own calls still open when it stops. */
const STOPPED_REASON = 'gateway_stopped';

/**
 * Seals this replica's own calls left in flight by its previous run (`replica_restart`), then
 * starts the sweep of other replicas' expired leases: both sign entries with this replica's
 * key, so both come after its evidence is recorded, and before it serves.
 * @throws (rejects) LeaseLostError; pg errors.
 */
async function beginLease(lease: ReplicaLease, log: Logger): Promise<void> {
  await lease.begin();
  maybeDie('own_work_recovered');
  if (lease.recovered && (lease.recovered.attempts || lease.recovered.executions))
    log.warn(
      { ...lease.recovered },
      "recorded this replica's calls in flight in its previous run as outcome_unknown",
    );
}

/** The configured policy bundle, loaded before anything starts (a replica never serves without it). */
function loadPolicy(cfg: GatewayConfig) {
  if (!cfg.policy) return null;
  const key = cfg.policy.signing_key ? parsePolicyPublicKey(cfg.policy.signing_key) : null;
  return { cfg: cfg.policy, bundle: loadBundleDir(cfg.policy.bundle), key };
}

/** The configured catalog, loaded before anything starts. @throws CatalogError */
function loadCatalog(cfg: GatewayConfig) {
  return cfg.catalog ? { cfg: cfg.catalog, loaded: loadCatalogFile(cfg.catalog.file) } : null;
}

/**
 * Schema, key, lease, provider, tracing, metrics and upstreams, in that order. Each opened
 * part's closer goes onto `opened`.
 */
async function startCore(
  cfg: GatewayConfig,
  log: Logger,
  storage: PostgresStorage,
  opened: (() => unknown)[],
) {
  await storage.migrate();
  const { pool } = storage;
  const key = newGatewayKey();
  // Before anything else writes: a live lease of this instance_id refuses the start. An expired
  // one of ours has its open calls sealed later (startServing), once this key's evidence is
  // recorded: no entry is signed by a key without evidence, whenever the start-up dies.
  const gate = new LeaseGate();
  const lease = await startReplicaLease(pool, {
    instanceId: cfg.instance_id,
    replicas: cfg.replicas,
    keyThumbprint: key.thumbprint.toString('base64url'),
    key: key.privateKey,
    gate,
    log,
    regain: true,
  });
  opened.push(() => lease.stop());
  maybeDie('lease_acquired');
  const { selection, provider, tracing, metrics, upstreams } = await startCommon(cfg, log, opened, null);
  if (metrics) replicaGauges(metrics, pool);
  const tls = await openListenerTls(cfg);
  return { storage, pool, key, gate, lease, selection, provider, tracing, metrics, upstreams, tls, log };
}

type Core = Awaited<ReturnType<typeof startCore>>;

/**
 * The start-up records, policy, measurement, sessions, the call path, the relay and the MCP
 * layer over the replica's store.
 */
async function startServing(
  cfg: GatewayConfig,
  c: Core,
  loaded: ReturnType<typeof loadPolicy>,
  catalogFile: ReturnType<typeof loadCatalog>,
) {
  const { pool, lease, provider, upstreams, metrics, log } = c;
  const store = c.storage.sessionStore(lease.fence);
  const chain: GatewayChainSink = {
    appendAwaited: async (chainId: string, input: EntryInput) =>
      (await store.appendEntries(chainId, [input]))[0] as Awaited<
        ReturnType<GatewayChainSink['appendAwaited']>
      >,
  };
  recordAvailability(upstreams, chain, log);
  recordRenewals(upstreams, chain, log);
  // The catalog's drift records go to this replica's gateway chain; each replica checks the
  // upstreams' listings it sees itself (docs/replicas.md#serving-as-a-replica).
  const catalog = catalogFile
    ? new CatalogGuard(catalogFile.loaded.catalog, catalogFile.loaded.hash, chain, log)
    : null;
  const policy = loaded
    ? policyState(
        loaded.bundle,
        loaded.key,
        loaded.cfg,
        configuredEntities(cfg, catalog, upstreams),
        tokenAttributeNames(cfg),
      )
    : null;
  await store.appendEntries(GATEWAY_CHAIN_ID, [
    gatewayStartEntry(cfg, c.key, provider, upstreams.listTools().length),
    { entry_type: 'attestation_provider', detail: c.selection.detail },
    ...(catalogFile
      ? [
          catalogLoadEntry(
            catalogFile.loaded,
            catalogFile.cfg,
            cfg.upstreams.map((u) => u.name),
          ),
        ]
      : []),
    ...(loaded ? [policyLoadEntry(loaded.bundle, loaded.key, loaded.cfg)] : []),
  ]);
  maybeDie('start_recorded');
  if (catalog) watchCatalog(catalog, upstreams);
  warnExposure(cfg, log);
  const facts: SessionFacts = {
    gatewayMeasurement: null,
    policyBundleHash: policy?.engine.bundle.hash ?? null,
    catalogHash: catalog?.hash ?? null,
    enforcementMode: policy?.mode ?? 'none',
  };
  // The replica's own measurement (docs/spec/measurement.md), in its sessions' bindings.
  const measurer = await measureGateway(cfg, provider, chain, facts, log);
  maybeDie('measured');
  // Its key and measurement in its own evidence, before it serves: what a /2 claim lists for
  // every replica that wrote into the chain (docs/spec/binding.md#replica-binding).
  await attestReplica(
    (m) => recordReplicaStart(pool, lease.fence, m),
    lease.fence,
    c.key,
    provider,
    facts,
    log,
  );
  maybeDie('evidence_recorded');
  await beginLease(lease, log);
  const sessions = new SessionService(store, c.key, facts, provider, log, {
    limits: {
      defaultMaxCalls: cfg.sessions.default_max_calls,
      defaultMaxAgeS: cfg.sessions.default_max_age_s,
    },
    requiredTier: requiredBindingTier(cfg.attestation),
  });
  const callStore = c.storage.callStore(lease.fence);
  const serving = composeServing(cfg, {
    store: callStore,
    sessions,
    upstreams,
    sensitivity: new SessionSensitivity(null, upstreams, catalog),
    catalog,
    policy,
    chain,
    relayEntries: (sessionId, input) => appendRelayEntry(pool, lease.fence, sessionId, input),
    metrics,
    tracing: c.tracing,
    log,
  });
  const { relist, operator } = await startControls(cfg, c, {
    sessions,
    facts,
    policy,
    catalog,
    measurer,
    chain,
  });
  return { measurer, sessions, callStore, facts, ...serving, relist, operator };
}

/**
 * The catalog's periodic re-list, signed reloads and the operator controls; the blocks and
 * reloads recorded before (through any replica) apply before this replica serves.
 */
async function startControls(
  cfg: GatewayConfig,
  c: Core,
  p: {
    sessions: SessionService;
    facts: SessionFacts;
    policy: PolicyState | null;
    catalog: CatalogGuard | null;
    measurer: GatewayMeasurer;
    chain: GatewayChainSink;
  },
) {
  const { lease, upstreams, log } = c;
  const records = c.storage.operatorRecords(lease.fence);
  // Periodic re-list for drift checks (catches definitions changed without a notification).
  const relist =
    p.catalog && cfg.catalog && cfg.catalog.relist_interval_s > 0
      ? setInterval(() => void upstreams.refreshAll('interval'), cfg.catalog.relist_interval_s * 1000)
      : null;
  relist?.unref();
  const reloads = new ReplicaReloads({
    records,
    policy: p.policy,
    facts: p.facts,
    sessions: p.sessions,
    chain: p.chain,
    onInstall: (bundle) => p.measurer.reload(bundle),
    log,
  });
  if (p.policy) p.sessions.checkUsable((row) => reloads.usable(row));
  const operator = new OperatorControls({
    blocks: blockLedger(records, {
      closeOpenOf: closeEachOpen(records, (agentId, sid) =>
        p.sessions.closeAwaited(agentId, sid, 'agent_blocked'),
      ),
      knownBySessions: true,
      replicaId: lease.fence.replicaId,
    }),
    reloads,
    facts: p.facts,
    policy: p.policy,
    catalog: p.catalog,
    knownAgents: new Set([...cfg.agents.map((a) => a.agent_id), ...(cfg.dev_mode ? ['dev'] : [])]),
    log,
  });
  await operator.start(BLOCK_READ_MS);
  return { relist, operator };
}

type Serving = Awaited<ReturnType<typeof startServing>>;

/** The HTTP app (not yet listening) behind the lease gate, with the console refused. */
function buildReplicaApp(cfg: GatewayConfig, c: Core, s: Serving, drain: Drain): FastifyInstance {
  const app = composeApp(cfg, s, {
    log: c.log,
    drain,
    readiness: new Readiness(c.storage.writeProbe(cfg.instance_id), c.upstreams, c.provider, drain, c.gate, {
      requiredUpstreams: cfg.upstreams.filter((u) => u.required).map((u) => u.name),
    }),
    sessions: s.sessions,
    executions: { get: (agentId, executionId) => getExecution(c.pool, agentId, executionId) },
    sessionAgent: (id) => s.sessions.agentOf(id),
    operator: s.operator,
    metrics: c.metrics,
    tls: c.tls,
  });
  c.gate.attach(app);
  refuseConsole(app);
  return app;
}

/** The replica's close (everything, once) and graceful shutdown (drain, seal, release, close). */
function stopping(
  cfg: GatewayConfig,
  c: Core,
  s: Serving,
  app: FastifyInstance,
  drain: Drain,
  metricsListener: { close(): Promise<void> } | null,
) {
  let closed = false;
  const close = async () => {
    if (closed) return;
    closed = true;
    if (s.relist) clearInterval(s.relist);
    s.operator.stop();
    await c.tls?.close();
    await metricsListener?.close();
    s.clientSessions.close();
    await app.close();
    await s.relay.close();
    s.refusals.authFailures.flush();
    s.refusals.hostRefusals.flush();
    await c.upstreams.close();
    await s.measurer.settled();
    await c.lease.stop().catch((e) => c.log.warn({ err: (e as Error).message }, 'lease not released'));
    c.provider.close();
    await c.tracing.shutdown();
    await c.storage.close();
  };
  const shutdown = async (drainMs = cfg.shutdown.drain_ms) => {
    drain.stop();
    const drained = await drain.idle(drainMs);
    let sealed = 0;
    // No attempt begins after this, so the seal below sees every call that may reach an upstream.
    await s.callStore
      .closeAttempts()
      .catch((e) => c.log.error({ err: (e as Error).message }, 'call attempts not closed'));
    try {
      // Calls still at an upstream after the drain: on the record before the lease is released.
      if (c.lease.live) sealed = (await recoverOwnWork(c.pool, c.lease.fence, STOPPED_REASON)).attempts;
    } catch (e) {
      c.log.error(
        { err: (e as Error).message },
        'could not seal undrained calls (sealed by another replica)',
      );
    }
    app.server.closeAllConnections();
    await close();
    return { drained, sealed };
  };
  return { close, shutdown };
}

/**
 * Starts a replica on the PostgreSQL `cfg.database` and listens. On a start-up failure what
 * was opened is closed again.
 * @throws CmcpError POSTGRES_FEATURE_UNAVAILABLE (a config section a replica does not serve);
 *   PolicyBundleError | PolicyKeyError | CatalogError (an unusable policy or catalog); DatabaseUnavailableError (the
 *   server unreachable, or the connection lost at any step of the start); SchemaTooNewError; InstanceBusyError (INSTANCE_RUNNING: another live
 *   lease of `instance_id`); AttestationStartError; upstream errors; a busy port.
 */
export async function startReplicaGateway(cfg: GatewayConfig, logger?: Logger): Promise<ReplicaGateway> {
  const log = logger ?? pino({ level: process.env.CMCP_LOG_LEVEL ?? 'info' });
  assertReplicaConfig(cfg);
  const loaded = loadPolicy(cfg);
  const catalogFile = loadCatalog(cfg);
  const storage = openPostgresStorage(cfg);
  const { pool } = storage;
  const opened: (() => unknown)[] = [() => storage.close()]; // closed in reverse on a failed start
  try {
    const core = await startCore(cfg, log, storage, opened);
    const serving = await startServing(cfg, core, loaded, catalogFile);
    const drain = new Drain();
    const app = buildReplicaApp(cfg, core, serving, drain);
    const url = await app.listen({ host: cfg.listen.host, port: cfg.listen.port });
    opened.push(() => app.close());
    maybeDie('listening');
    // Only a listening replica extends the measurement (the TPM provider: its PCR and event log).
    await serving.measurer.listening(cfg.instance_id);
    const { metrics, upstreams, provider, tls } = core;
    await tls?.bind({ instanceId: cfg.instance_id, key: core.key, facts: serving.facts, provider, log });
    const metricsListener = await startMetrics(cfg, metrics, serving.refusals, tls);
    log.info(
      { url, provider: provider.name, tools: upstreams.listTools().length, replica: cfg.instance_id },
      'cmcp gateway replica listening (PostgreSQL)',
    );
    return {
      app,
      pool,
      lease: core.lease,
      gate: core.gate,
      sessions: serving.sessions,
      upstreams,
      provider,
      url,
      metricsUrl: metricsListener?.url ?? null,
      ...stopping(cfg, core, serving, app, drain, metricsListener),
    };
  } catch (e) {
    // Each part closed whatever the others do: a closer's own failure (the lease's release on
    // a database that is gone) must not replace the start's failure.
    for (const c of opened.reverse())
      await Promise.resolve()
        .then(c)
        .catch((err: Error) => log.warn({ err: err.message }, 'closing after a failed start'));
    // The database gone during the start (refused, ended, timed out) is one failure for the
    // supervisor, whatever step met it: DATABASE_UNAVAILABLE, its own exit code (cli/start.ts).
    if (isConnectionLoss(e) && !(e instanceof DatabaseUnavailableError))
      throw new DatabaseUnavailableError(
        `lost ${redactPostgresUrl(cfg.database)} during start-up: ${(e as Error).message}`,
      );
    throw e;
  }
}
