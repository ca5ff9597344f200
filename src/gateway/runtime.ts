/**
 * Wires a running gateway from a validated config: database, gateway key, attestation
 * provider, upstreams, sessions, call pipeline and HTTP app. Start-up writes the gateway
 * chain's `gateway_start` entry before the listener opens.
 */
import { generateKeyPairSync } from 'node:crypto';
import { ed25519PublicJwk, jwkThumbprint } from '@cmcp/verify/format/binding';
import { b64u } from '@cmcp/verify/format/canonical';
import { GATEWAY_CHAIN_ID } from '@cmcp/verify/format/entry';
import type { FastifyInstance } from 'fastify';
import pino, { type Logger } from 'pino';
import { AuditChain } from '../audit/chain.js';
import { type CallControls, CallPipeline } from '../call/pipeline.js';
import { loadCatalogFile } from '../catalog/catalog.js';
import { CatalogGuard } from '../catalog/guard.js';
import { type GatewayConfig, isLoopback } from '../config/index.js';
import { ExecutionRegistry } from '../execution/registry.js';
import { measureGateway, remeasureGateway } from '../measure/index.js';
import { loadBundleDir } from '../policy/bundle.js';
import { agentEntity, checkEntities, PolicyEngine, toolEntities } from '../policy/engine.js';
import { parsePolicyPublicKey } from '../policy/signature.js';
import { PolicyState } from '../policy/state.js';
import { type GatewayKey, type SessionFacts, SessionService } from '../session/service.js';
import { type Db, openDatabase } from '../store/db.js';
import { activeFaults } from '../store/faults.js';
import { acquireInstance, type InstanceLock } from '../store/instance-lock.js';
import { type ProviderSelection, selectProvider } from '../tee/detect.js';
import type { AttestationProvider } from '../tee/provider.js';
import { assertTierReached, requiredBindingTier } from '../tee/tier.js';
import { UpstreamPool } from '../upstream/pool.js';
import { recordAvailability } from '../upstream/record.js';
import { buildApp } from './app.js';
import { Authenticator } from './auth.js';
import { AuthFailureRecorder } from './auth-failures.js';
import { McpEndpoint } from './mcp.js';
import { bundleDetail, OperatorControls } from './operator.js';

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
  /** `http://host:port` once listening. */
  url: string;
  close(): Promise<void>;
}

/** A fresh in-memory Ed25519 gateway key (design §4). Never written to disk. */
export function newGatewayKey(): GatewayKey {
  const { privateKey } = generateKeyPairSync('ed25519');
  const jwk = ed25519PublicJwk(privateKey);
  return { privateKey, jwk, thumbprint: jwkThumbprint(jwk) };
}

/** Thrown at start-up when the policy, its key, or the catalog cannot be used. */
export class StartupError extends Error {
  constructor(
    readonly code: 'POLICY_BUNDLE_INVALID' | 'CATALOG_INVALID' | 'POLICY_KEY_INVALID',
    message: string,
  ) {
    super(message);
    this.name = 'StartupError';
  }
}

/**
 * Loads the configured policy bundle and catalog (both optional) before anything starts.
 * @throws PolicyBundleError | CatalogError | PolicyKeyError | StartupError
 */
function loadPolicyAndCatalog(cfg: GatewayConfig) {
  const catalog = cfg.catalog ? loadCatalogFile(cfg.catalog.file) : null;
  if (!cfg.policy) return { catalog, bundle: null, signingKey: null };
  const bundle = loadBundleDir(cfg.policy.bundle);
  const signingKey = cfg.policy.signing_key ? parsePolicyPublicKey(cfg.policy.signing_key) : null;
  return { catalog, bundle, signingKey };
}

/**
 * Starts a gateway and listens.
 * @throws ConfigError-like errors on unreachable upstreams, tool-name clashes, or a busy port;
 *   PolicyBundleError, CatalogError, PolicyKeyError or StartupError for an unusable policy or
 *   catalog (the gateway never starts with a policy it could not load).
 */
export async function startGateway(cfg: GatewayConfig, logger?: Logger): Promise<Gateway> {
  const log = logger ?? pino({ level: process.env.CMCP_LOG_LEVEL ?? 'info' });
  const loaded = loadPolicyAndCatalog(cfg);
  const db = openDatabase(cfg.database);
  // Before anything destructive (recovery, stale-session close, measurement extend): a second
  // start of a running instance stops here.
  let instance: InstanceLock;
  try {
    instance = acquireInstance(db, cfg.instance_id);
  } catch (e) {
    db.close();
    throw e;
  }
  if (instance.tookOverFrom)
    log.warn(
      { previous: instance.tookOverFrom },
      'taking over the instance from a process that stopped without closing',
    );
  const chain = new AuditChain(db);
  const executions = new ExecutionRegistry(db, cfg.instance_id);
  const key = newGatewayKey();
  if (activeFaults().length)
    log.warn({ faults: activeFaults() }, 'FAULT INJECTION IS ON: terminal commits will fail (test seam)');
  // Attestation provider (issue 4 item 6): configured or auto-detected; minimum_tier refuses here.
  let selection: ProviderSelection;
  try {
    selection = await selectProvider(cfg.attestation);
  } catch (e) {
    instance.release();
    db.close();
    throw e;
  }
  const provider = selection.provider;
  log.info(selection.detail, 'attestation provider selected');
  const upstreams = new UpstreamPool(cfg.upstreams, log, cfg.limits.max_result_bytes);
  try {
    await upstreams.start();
  } catch (e) {
    await upstreams.close();
    provider.close();
    instance.release();
    db.close();
    throw e;
  }
  chain.append(GATEWAY_CHAIN_ID, {
    entry_type: 'gateway_start',
    detail: {
      version: '0.1.0',
      key_thumbprint: b64u(key.thumbprint),
      provider: provider.name,
      dev_mode: cfg.dev_mode,
      upstreams: cfg.upstreams.map((u) => ({ name: u.name, transport: u.transport })),
      tools: upstreams.listTools().length,
      instance_id: cfg.instance_id,
    },
  });
  chain.append(GATEWAY_CHAIN_ID, {
    entry_type: 'attestation_provider',
    detail: selection.detail,
  });
  recordAvailability(upstreams, chain, log);
  const fail = async (e: unknown): Promise<never> => {
    await upstreams.close();
    provider.close();
    instance.release();
    db.close();
    throw e;
  };

  // Catalog and policy (issue 6): loaded before the listener opens, each recorded in the
  // gateway chain with its hash; the hashes go into every session binding and claim.
  const agentAttrs = new Map(cfg.agents.map((a) => [a.agent_id, a.attributes as Record<string, unknown>]));
  let catalog: CatalogGuard | null = null;
  if (loaded.catalog && cfg.catalog) {
    catalog = new CatalogGuard(loaded.catalog.catalog, loaded.catalog.hash, chain, log);
    const configured = new Set(cfg.upstreams.map((u) => u.name));
    chain.append(GATEWAY_CHAIN_ID, {
      entry_type: 'catalog_load',
      detail: {
        catalog_hash: loaded.catalog.hash,
        file: cfg.catalog.file,
        tools: loaded.catalog.catalog.tools.map((t) => ({
          server: t.server,
          name: t.name,
          sha256: t.sha256,
          sensitivity: t.sensitivity,
        })),
        unknown_servers: [...new Set(loaded.catalog.catalog.tools.map((t) => t.server))].filter(
          (sv) => !configured.has(sv),
        ),
        relist_interval_s: cfg.catalog.relist_interval_s,
      },
    });
    // First contact: the tools listed at start-up are compared with their pins now.
    upstreams.observe((server, tools, trigger) => catalog?.observe(server, tools, trigger));
  }
  const requiredEntities = () => [
    ...cfg.agents.map((a) => agentEntity(a.agent_id, a.attributes as Record<string, unknown>)),
    ...(catalog?.catalog.tools ?? []).flatMap((t) =>
      toolEntities({
        exposedName: upstreams.exposedName(t.server, t.name) ?? `${t.server}.${t.name}`,
        server: t.server,
        toolName: t.name,
        sensitivity: t.sensitivity,
        annotations: t.definition.annotations,
      }),
    ),
  ];
  let policy: PolicyState | null = null;
  if (loaded.bundle && cfg.policy) {
    const misfits = checkEntities(loaded.bundle, requiredEntities());
    if (misfits.length)
      await fail(
        new StartupError(
          'POLICY_BUNDLE_INVALID',
          `configured agents or catalog tools do not fit the policy schema:\n  ${misfits.join('\n  ')}`,
        ),
      );
    policy = new PolicyState(
      new PolicyEngine(loaded.bundle, cfg.policy.enforcement_mode),
      loaded.signingKey,
      requiredEntities,
    );
    chain.append(GATEWAY_CHAIN_ID, {
      entry_type: 'policy_load',
      detail: {
        ...bundleDetail(loaded.bundle),
        source: 'config',
        folder: cfg.policy.bundle,
        enforcement_mode: cfg.policy.enforcement_mode,
        signing_key: loaded.signingKey !== null,
      },
    });
  }
  const facts: SessionFacts = {
    gatewayMeasurement: null,
    policyBundleHash: policy?.engine.bundle.hash ?? null,
    catalogHash: catalog?.hash ?? null,
    enforcementMode: policy?.mode ?? 'none',
  };

  // Recovery before the listener opens: nothing admitted by an earlier process stays in flight.
  const sealed = executions.sealInFlight(chain);
  if (sealed) log.warn({ sealed }, 'sealed in-flight executions from a previous run as outcome_unknown');
  const sessions = new SessionService(
    db,
    chain,
    key,
    provider,
    { defaultMaxCalls: cfg.sessions.default_max_calls, defaultMaxAgeS: cfg.sessions.default_max_age_s },
    log,
    facts,
    cfg.instance_id,
    requiredBindingTier(cfg.attestation),
  );
  const stale = sessions.closeStale();
  if (stale)
    log.warn(
      { sessions: stale },
      'closed sessions left open by a previous run (claims issued, binding absent)',
    );
  if (cfg.dev_mode)
    log.warn(
      'DEV MODE: loopback only; unauthenticated requests act as agent "dev"; do not use in production',
    );
  else if (!isLoopback(cfg.listen.host))
    log.warn(
      { host: cfg.listen.host },
      'listening beyond loopback without TLS: terminate TLS in front of the gateway',
    );
  const knownAgents = new Set(cfg.agents.map((a) => a.agent_id));
  if (cfg.dev_mode) knownAgents.add('dev');
  const operator = new OperatorControls(chain, sessions, facts, policy, catalog, knownAgents, log);
  const resumed = operator.resumeReloaded();
  if (resumed && policy) {
    facts.policyBundleHash = resumed.hash;
    chain.append(GATEWAY_CHAIN_ID, {
      entry_type: 'policy_load',
      detail: { ...bundleDetail(resumed), source: 'reload_resumed', enforcement_mode: policy.mode },
    });
    log.info(
      { bundle_hash: resumed.hash, version: resumed.manifest.version },
      'resumed the last reloaded policy',
    );
  }
  // Gateway measurement (issue 4 item 3) of what runs now: code, lockfile, policy, catalog and
  // config; extended into the measurement PCR by the TPM provider and recorded in the chain.
  const measurement = measureGateway({
    policyBundleHash: facts.policyBundleHash,
    catalogHash: facts.catalogHash,
    config: cfg,
  });
  facts.gatewayMeasurement = measurement.json.digest;
  const started = (await provider.start?.(measurement)) ?? { ok: true, reason: null };
  chain.append(GATEWAY_CHAIN_ID, {
    entry_type: 'gateway_measurement',
    detail: { ...measurement.json, trigger: 'start-up', provider: provider.name, provider_start: started },
  });
  if (started.ok === false) {
    log.warn(
      { provider: provider.name, reason: started.reason },
      'attestation provider not ready at start-up; binding is retried at every session',
    );
    chain.append(GATEWAY_CHAIN_ID, {
      entry_type: 'attestation_binding_failed',
      detail: { phase: 'start-up', provider: provider.name, reason: started.reason },
    });
  }
  // minimum_tier must be reached, not only configured (issue 16 item 2; src/tee/tier.ts).
  try {
    assertTierReached(cfg.attestation, provider, started);
  } catch (e) {
    return fail(e);
  }
  if (measurement.json.inputs.code_files === 0) log.warn('gateway measurement covers no files under dist/');
  // An accepted policy reload re-measures the gateway (issue 6 item 6): the same code, lockfile,
  // catalog and config inputs, the new bundle hash. Sessions bound from now on name the new
  // digest (facts); the provider carries it in their evidence (the TPM provider extends it into
  // the measurement PCR, in order with quotes); the gateway chain records it once the provider
  // has answered. close() waits for that.
  let current = measurement;
  let remeasuring: Promise<void> = Promise.resolve();
  operator.onReload((bundle) => {
    const previous = current;
    const next = remeasureGateway(previous, { policyBundleHash: bundle.hash });
    current = next;
    facts.gatewayMeasurement = next.json.digest;
    const answered: Promise<Record<string, unknown>> =
      provider.remeasure?.(next) ?? Promise.resolve({ ok: true, reason: null });
    remeasuring = remeasuring.then(async () => {
      const result = await answered;
      try {
        chain.append(GATEWAY_CHAIN_ID, {
          entry_type: 'gateway_measurement',
          detail: {
            ...next.json,
            trigger: 'policy_reload',
            previous_digest: previous.json.digest,
            policy_version: bundle.manifest.version,
            provider: provider.name,
            provider_remeasure: result,
          },
        });
        if (result.ok === false) {
          log.warn(
            { provider: provider.name, reason: result.reason },
            'could not extend the re-measured gateway now; retried at the next session binding',
          );
          chain.append(GATEWAY_CHAIN_ID, {
            entry_type: 'attestation_binding_failed',
            detail: { phase: 'policy-reload', provider: provider.name, reason: result.reason },
          });
        }
      } catch (e) {
        log.error({ err: (e as Error).message }, 'could not record the gateway measurement after a reload');
      }
    });
    log.info(
      { gateway_measurement: next.json.digest, bundle_hash: bundle.hash },
      'gateway re-measured after the policy reload',
    );
  });
  const controls: CallControls = {
    policy: () => policy?.engine ?? null,
    catalog,
    agentAttributes: (id) => agentAttrs.get(id) ?? {},
    isBlocked: (id) => operator.isBlocked(id),
  };
  const pipeline = new CallPipeline(db, chain, sessions, upstreams, executions, log, controls);
  const recordGateway = (
    entry_type: string,
    agentId: string | null,
    code: string,
    detail: Record<string, unknown>,
  ) => {
    try {
      chain.append(GATEWAY_CHAIN_ID, {
        entry_type,
        agent_id: agentId,
        disposition: 'refused',
        error_code: code,
        detail,
      });
    } catch (e) {
      log.error({ err: (e as Error).message }, 'could not record a refused request');
    }
  };
  const mcp = new McpEndpoint(
    pipeline,
    upstreams,
    (agentId, code, detail) => recordGateway('request_refused', agentId, code, detail),
    {
      isBlocked: (id) => operator.isBlocked(id),
      ...(catalog
        ? {
            // The approved definitions of usable pins, under gateway names (issue 6 item 4).
            listTools: () =>
              (catalog?.usable() ?? []).flatMap((t) => {
                const exposed = upstreams.exposedName(t.server, t.name);
                return exposed ? [{ ...t.definition, name: exposed }] : [];
              }),
          }
        : {}),
    },
  );
  // Unauthenticated requests are on the record without letting anyone grow the database at
  // will: the first in each window is written at once, the rest as one counted entry.
  const authFailures = new AuthFailureRecorder((count, routes, windowStart) =>
    recordGateway('request_refused', null, 'UNAUTHENTICATED', { count, routes, window_start: windowStart }),
  );
  const app = buildApp({
    logger: log,
    auth: new Authenticator(cfg.agents, cfg.dev_mode, cfg.operators),
    operator,
    recordRefusal: (agentId, code, detail) => recordGateway('request_refused', agentId, code, detail),
    mcp,
    sessions,
    executions,
    maxRequestBytes: cfg.limits.max_request_bytes,
    recordAuthFailure: (route) => authFailures.record(route),
  });
  let url: string;
  try {
    url = await app.listen({ host: cfg.listen.host, port: cfg.listen.port });
  } catch (e) {
    return fail(e);
  }
  // Periodic re-list for drift checks (catches definitions changed without a notification).
  const relist =
    catalog && cfg.catalog && cfg.catalog.relist_interval_s > 0
      ? setInterval(() => void upstreams.refreshAll('interval'), cfg.catalog.relist_interval_s * 1000)
      : null;
  relist?.unref();
  log.info({ url, provider: provider.name, tools: upstreams.listTools().length }, 'cmcp gateway listening');
  let closed = false;
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
    url,
    async close() {
      if (closed) return;
      closed = true;
      if (relist) clearInterval(relist);
      await app.close();
      authFailures.flush();
      await upstreams.close();
      await remeasuring;
      provider.close();
      instance.release();
      db.close();
    },
  };
}
