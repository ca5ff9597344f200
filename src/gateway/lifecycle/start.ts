/**
 * The one start of a gateway, on either engine (`database`: a file path is SQLite, a
 * `postgres://` URL a replica; docs/replicas.md), in start-up order: the storage (SQLite under
 * its instance lock; PostgreSQL migrated, then the replica's lease), attestation provider,
 * upstreams, the start-up records (gateway_start, attestation_provider, catalog_load,
 * policy_load), sessions and what the previous run left (engine.ts `recover`), the measurement
 * and a replica's evidence and own work (`attest`), operator controls, the call path, relay and
 * MCP layer, and the HTTP app. What differs by engine is a narrow hook of engine.ts; everything
 * else is written once here and in compose.ts.
 */
import { generateKeyPairSync } from 'node:crypto';
import { ed25519PublicJwk, jwkThumbprint } from '@cmcp/verify/formats';
import type { FastifyInstance } from 'fastify';
import type pg from 'pg';
import pino, { type Logger } from 'pino';
import { SessionSensitivity } from '../../call/sensitivity.js';
import { loadCatalogFile } from '../../catalog/catalog.js';
import { CatalogGuard } from '../../catalog/guard.js';
import { catalogLoadEntry, watchCatalog } from '../../catalog/startup.js';
import type { GatewayConfig } from '../../config/index.js';
import type { ConsoleDeps } from '../../console/plugin.js';
import { loadBundleDir } from '../../policy/bundle.js';
import { parsePolicyPublicKey } from '../../policy/signature.js';
import {
  configuredEntities,
  policyLoadEntry,
  policyState,
  tokenAttributeNames,
} from '../../policy/startup.js';
import type { PolicyState } from '../../policy/state.js';
import type { Relay } from '../../relay/relay.js';
import { recordRenewals } from '../../relay/renewals.js';
import type { CheckpointSigner } from '../../session/checkpoints.js';
import type { ExecutionReads } from '../../session/ports.js';
import { type GatewayKey, type SessionFacts, SessionService } from '../../session/service.js';
import { maybeDie } from '../../store/faults.js';
import { DatabaseUnavailableError, isPostgresUrl, redactPostgresUrl } from '../../store/migrations/index.js';
import { openStorage, type Storage } from '../../store/open.js';
import type { ReplicaLease } from '../../store/postgres/replica-lease.js';
import { isConnectionLoss } from '../../store/postgres/transaction.js';
import type { AuditChain } from '../../store/sqlite/chain.js';
import type { Db } from '../../store/sqlite/db.js';
import type { SqliteStorageOptions } from '../../store/sqlite/open.js';
import type { AttestationProvider } from '../../tee/provider.js';
import { requiredBindingTier } from '../../tee/tier.js';
import { type ListenerTls, openListenerTls } from '../../tls/listener.js';
import type { UpstreamPool } from '../../upstream/pool.js';
import { recordAvailability } from '../../upstream/record.js';
import type { ClientSessions } from '../agent/mcp/client-sessions.js';
import type { McpEndpoint } from '../agent/mcp/endpoint.js';
import { composeApp, composeServing, measureGateway, startCommon, startMetrics } from '../compose.js';
import { Readiness } from '../health/readiness.js';
import { blockLedger } from '../operator/blocks.js';
import { OperatorControls } from '../operator/controls.js';
import { Drain } from './drain.js';
import type { LeaseGate } from './lease-gate.js';
import { gatewayStartEntry, warnExposure } from './records.js';
import { replicaEngine } from './replica-engine.js';
import { assertReplicaConfig } from './replica-unavailable.js';
import { gracefulShutdown, type ShutdownReport } from './shutdown.js';
import { sqliteEngine } from './sqlite-engine.js';

/** A running gateway, on either engine. */
export interface Gateway {
  app: FastifyInstance;
  /** The opened storage (`engine`: sqlite or postgres). */
  storage: Storage;
  sessions: SessionService;
  upstreams: UpstreamPool;
  executions: ExecutionReads;
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
  /** Signs the session chains' checkpoints, batched per window (session/checkpoints.ts). */
  checkpoints: CheckpointSigner;
  /** TLS of the listeners (null: plain HTTP). */
  tls: ListenerTls | null;
  /** SQLite's connection (tests and tools). @throws Error on PostgreSQL. */
  readonly db: Db;
  /** SQLite's chain object (tests and tools). @throws Error on PostgreSQL. */
  readonly chain: AuditChain;
  close(): Promise<void>;
  /**
   * Graceful shutdown (shutdown.ts): stop admitting, drain for `drainMs` (default
   * `shutdown.drain_ms`), seal what did not drain, on SQLite close open sessions with claims, close.
   */
  shutdown(drainMs?: number): Promise<ShutdownReport>;
}

/** A running replica: the gateway on PostgreSQL, with its pool, lease and lease gate. */
export interface ReplicaGateway extends Gateway {
  pool: pg.Pool;
  lease: ReplicaLease;
  gate: LeaseGate;
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

/** The storage's engine: SQLite's, or a replica's with its lease taken. */
async function engineOf(
  storage: Storage,
  cfg: GatewayConfig,
  key: GatewayKey,
  log: Logger,
  opened: (() => unknown)[],
) {
  if (storage.engine === 'sqlite') return { engine: sqliteEngine(storage, cfg, log), replica: null };
  const engine = await replicaEngine(storage, cfg, key, log, opened);
  return { engine, replica: { pool: storage.pool, lease: engine.lease, gate: engine.gate } };
}

/** Why `name` is not on this gateway: it belongs to the other engine. */
/** The engine's console, given the upstream pool's availability (its upstreams page). */
function withUpstreams<E extends { console?: (...a: never[]) => ConsoleDeps }>(
  edge: E,
  pool: UpstreamPool,
): E {
  const make = edge.console;
  return make ? { ...edge, console: (...a: never[]) => ({ ...make(...a), upstreams: pool }) } : edge;
}

function notOnThisEngine(name: string): never {
  throw new Error(`gateway.${name} is SQLite's; this gateway runs on PostgreSQL`);
}

/**
 * Starts a gateway and listens. On any start-up failure what was opened is closed again.
 * @throws CmcpError POSTGRES_FEATURE_UNAVAILABLE (a config section a replica does not serve);
 *   InstanceBusyError (INSTANCE_RUNNING: the instance's lock or a live lease is held elsewhere);
 *   DatabaseUnavailableError (a replica's server unreachable, or lost at any step of the start);
 *   SchemaTooNewError; AttestationStartError; upstream or tool-name-clash errors;
 *   PolicyBundleError, CatalogError or PolicyKeyError for an unusable policy or catalog (the
 *   gateway never starts with a policy it could not load); a busy port.
 * @param storageOptions SQLite mechanisms turned off for a measurement (tests); none by default.
 */
export async function startGateway(
  cfg: GatewayConfig,
  logger?: Logger,
  storageOptions?: SqliteStorageOptions,
): Promise<Gateway> {
  const log = logger ?? pino({ level: process.env.CMCP_LOG_LEVEL ?? 'info' });
  const onPostgres = isPostgresUrl(cfg.database);
  if (onPostgres) assertReplicaConfig(cfg);
  const loaded = loadPolicyAndCatalog(cfg);
  const opened: (() => unknown)[] = []; // closed in reverse on a failed start
  try {
    const storage = await openStorage(cfg, log, storageOptions);
    opened.push(() => storage.close());
    const key = newGatewayKey();
    const { engine, replica } = await engineOf(storage, cfg, key, log, opened);
    const { selection, provider, tracing, metrics, upstreams } = await startCommon(
      cfg,
      log,
      opened,
      engine.metricsDb,
    );
    if (metrics) engine.observe(metrics);
    const { chain } = engine;
    engine.record(gatewayStartEntry(cfg, key, provider, upstreams.listTools().length));
    engine.record({ entry_type: 'attestation_provider', detail: selection.detail });
    recordAvailability(upstreams, chain, log);
    recordRenewals(upstreams, chain, log);
    // Catalog and policy (docs/spec/policy.md): their hashes go into every session binding and
    // claim. The catalog's drift records go to the gateway chain; each replica checks the
    // upstreams' listings it sees itself.
    const catalog =
      loaded.catalog && cfg.catalog
        ? new CatalogGuard(loaded.catalog.catalog, loaded.catalog.hash, chain, log)
        : null;
    if (catalog && loaded.catalog && cfg.catalog)
      engine.record(
        catalogLoadEntry(
          loaded.catalog,
          cfg.catalog,
          cfg.upstreams.map((u) => u.name),
        ),
      );
    const policy =
      loaded.bundle && cfg.policy
        ? policyState(
            loaded.bundle,
            loaded.signingKey,
            cfg.policy,
            configuredEntities(cfg, catalog, upstreams),
            tokenAttributeNames(cfg),
          )
        : null;
    if (policy && loaded.bundle && cfg.policy)
      engine.record(policyLoadEntry(loaded.bundle, loaded.signingKey, cfg.policy));
    await engine.recorded();
    if (catalog) watchCatalog(catalog, upstreams);
    const facts: SessionFacts = {
      gatewayMeasurement: null,
      policyBundleHash: policy?.engine.bundle.hash ?? null,
      catalogHash: catalog?.hash ?? null,
      enforcementMode: policy?.mode ?? 'none',
    };
    await engine.resume(policy, facts);
    const sessions = new SessionService(engine.sessionStore, key, facts, provider, log, {
      limits: {
        defaultMaxCalls: cfg.sessions.default_max_calls,
        defaultMaxAgeS: cfg.sessions.default_max_age_s,
      },
      requiredTier: requiredBindingTier(cfg.attestation),
    });
    const { settled } = engine.recover(sessions);
    settled.catch(() => undefined); // awaited once listening; observed here should a later step fail first
    warnExposure(cfg, log);
    // The gateway measurement (docs/spec/measurement.md), in every session's binding.
    const measurer = await measureGateway(cfg, provider, chain, facts, log);
    maybeDie('measured');
    await engine.attest({ facts, provider });
    // Signed reloads and agent blocks; those recorded before (by any writer) apply before serving.
    const reloads = engine.reloads({ sessions, facts, policy, chain, onInstall: (b) => measurer.reload(b) });
    const operator = new OperatorControls({
      blocks: blockLedger(engine.operatorRecords, engine.blocks(sessions)),
      reloads,
      facts,
      policy,
      catalog,
      knownAgents: new Set([
        ...cfg.agents.map((a) => a.agent_id),
        ...(cfg.dev_mode ? ['dev'] : []),
        ...engine.knownAgents(),
      ]),
      log,
    });
    await operator.start(engine.blockReadMs);
    const serving = composeServing(cfg, {
      store: engine.callStore,
      sessions,
      upstreams,
      sensitivity: new SessionSensitivity(engine.sensitivityReads, upstreams, catalog),
      catalog,
      policy,
      chain,
      relayEntries: engine.relayEntries,
      trees: storage.trees,
      key,
      metrics,
      tracing,
      log,
    });
    const drain = new Drain();
    const tls = await openListenerTls(cfg);
    const app = composeApp(cfg, serving, {
      log,
      drain,
      readiness: new Readiness(storage.writeProbe(cfg.instance_id), upstreams, provider, drain, engine.gate, {
        requiredUpstreams: cfg.upstreams.filter((u) => u.required).map((u) => u.name),
      }),
      sessions,
      executions: engine.executions,
      sessionAgent: (id) => sessions.agentOf(id),
      operator,
      audit: engine.auditFeed,
      metrics,
      tls,
      ...withUpstreams(engine.edge(operator), upstreams),
    });
    engine.attach(app);
    const url = await app.listen({ host: cfg.listen.host, port: cfg.listen.port });
    opened.push(() => app.close());
    maybeDie('listening');
    // Only a listening gateway extends the measurement (queued before any session's quote).
    const extended = measurer.listening(cfg.instance_id);
    extended.catch(() => undefined); // awaited below; observed here should a later step fail first
    await settled;
    const metricsListener = await startMetrics(cfg, metrics, serving.refusals, tls);
    // Periodic re-list for drift checks (catches definitions changed without a notification).
    const relist =
      catalog && cfg.catalog && cfg.catalog.relist_interval_s > 0
        ? setInterval(() => void upstreams.refreshAll('interval'), cfg.catalog.relist_interval_s * 1000)
        : null;
    relist?.unref();
    await extended;
    await tls?.bind({ instanceId: cfg.instance_id, key, facts, provider, log });
    log.info(
      { url, provider: provider.name, tools: upstreams.listTools().length, engine: storage.engine },
      'cmcp gateway listening',
    );
    const { calls, refusals, relay, mcp, clientSessions } = serving;
    let closed = false;
    const close = async () => {
      if (closed) return;
      closed = true;
      if (relist) clearInterval(relist);
      operator.stop();
      await tls?.close();
      calls.pendingTerminals.close(); // what is still pending is sealed by the next start or another replica
      await metricsListener?.close();
      clientSessions.close();
      await app.close();
      refusals.authFailures.flush();
      refusals.hostRefusals.flush();
      await relay.close();
      await upstreams.close();
      await measurer.settled();
      await engine.release();
      provider.close();
      await tracing.shutdown();
      await storage.close();
    };
    const parts = {
      app,
      drain,
      calls,
      pendingTerminals: calls.pendingTerminals,
      engine,
      sessions,
      log,
      close,
    };
    const sqlite = 'recovery' in engine ? { db: engine.chain.db, chain: engine.chain } : null;
    return {
      app,
      storage,
      sessions,
      upstreams,
      executions: engine.executions,
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
      checkpoints: serving.checkpoints,
      tls,
      get db() {
        return sqlite?.db ?? notOnThisEngine('db');
      },
      get chain() {
        return sqlite?.chain ?? notOnThisEngine('chain');
      },
      ...replica,
      close,
      shutdown: (drainMs = cfg.shutdown.drain_ms) => gracefulShutdown(parts, drainMs),
    };
  } catch (e) {
    // Each part closed whatever the others do: a closer's own failure (a lease's release on a
    // database that is gone) must not replace the start's failure.
    for (const c of opened.reverse())
      await Promise.resolve()
        .then(c)
        .catch((err: Error) => log.warn({ err: err.message }, 'closing after a failed start'));
    // A replica's database gone during the start (refused, ended, timed out) is one failure for
    // the supervisor, whatever step met it: DATABASE_UNAVAILABLE, its own exit code (cli/start.ts).
    if (onPostgres && isConnectionLoss(e) && !(e instanceof DatabaseUnavailableError))
      throw new DatabaseUnavailableError(
        `lost ${redactPostgresUrl(cfg.database)} during start-up: ${(e as Error).message}`,
      );
    throw e;
  }
}

/**
 * {@link startGateway} on a PostgreSQL `cfg.database`: a replica, with its pool and lease.
 * @throws as {@link startGateway}; Error when `cfg.database` is not a postgres:// URL.
 */
export async function startReplicaGateway(cfg: GatewayConfig, logger?: Logger): Promise<ReplicaGateway> {
  if (!isPostgresUrl(cfg.database)) throw new Error('a replica runs on a postgres:// database');
  return (await startGateway(cfg, logger)) as ReplicaGateway;
}
