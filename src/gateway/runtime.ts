/**
 * Wires a running gateway from a validated config: database, gateway key, attestation
 * provider, upstreams, sessions, call pipeline and HTTP app. Start-up writes the gateway
 * chain's `gateway_start` entry before the listener opens.
 */
import { generateKeyPairSync } from 'node:crypto';
import type { FastifyInstance } from 'fastify';
import pino, { type Logger } from 'pino';
import { AuditChain } from '../audit/chain.js';
import { CallPipeline } from '../call/pipeline.js';
import type { GatewayConfig } from '../config/index.js';
import { ExecutionRegistry } from '../execution/registry.js';
import { ed25519PublicJwk, jwkThumbprint } from '../format/binding.js';
import { b64u } from '../format/canonical.js';
import { GATEWAY_CHAIN_ID } from '../format/entry.js';
import { type GatewayKey, SessionService } from '../session/service.js';
import { type Db, openDatabase } from '../store/db.js';
import { activeFaults } from '../store/faults.js';
import { type AttestationProvider, SoftwareProvider } from '../tee/provider.js';
import { TpmProvider } from '../tee/tpm-provider.js';
import { UpstreamPool } from '../upstream/pool.js';
import { buildApp } from './app.js';
import { Authenticator } from './auth.js';
import { McpEndpoint } from './mcp.js';

export interface Gateway {
  app: FastifyInstance;
  db: Db;
  chain: AuditChain;
  sessions: SessionService;
  upstreams: UpstreamPool;
  executions: ExecutionRegistry;
  provider: AttestationProvider;
  key: GatewayKey;
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

function makeProvider(cfg: GatewayConfig): AttestationProvider {
  if (cfg.attestation.provider === 'tpm') {
    return new TpmProvider({
      tcti: cfg.attestation.tcti,
      akAlgorithm: cfg.attestation.ak_algorithm,
      pcrs: cfg.attestation.pcrs,
    });
  }
  return new SoftwareProvider();
}

/**
 * Starts a gateway and listens.
 * @throws ConfigError-like errors on unreachable upstreams, tool-name clashes, or a busy port.
 */
export async function startGateway(cfg: GatewayConfig, logger?: Logger): Promise<Gateway> {
  const log = logger ?? pino({ level: process.env.CMCP_LOG_LEVEL ?? 'info' });
  const db = openDatabase(cfg.database);
  const chain = new AuditChain(db);
  const executions = new ExecutionRegistry(db, cfg.instance_id);
  const key = newGatewayKey();
  if (activeFaults().length)
    log.warn({ faults: activeFaults() }, 'FAULT INJECTION IS ON: terminal commits will fail (test seam)');
  const provider = makeProvider(cfg);
  const upstreams = new UpstreamPool(cfg.upstreams, log);
  try {
    await upstreams.start();
  } catch (e) {
    await upstreams.close();
    provider.close();
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
    detail:
      cfg.attestation.provider === 'tpm'
        ? {
            provider: 'tpm',
            ak_algorithm: cfg.attestation.ak_algorithm,
            pcrs: cfg.attestation.pcrs,
            reason: 'configured',
          }
        : {
            provider: 'software',
            reason: 'configured (dev mode): no hardware evidence; claims verify as signed-only',
          },
  });
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
    { gatewayMeasurement: null, policyBundleHash: null, catalogHash: null, enforcementMode: 'none' },
  );
  const pipeline = new CallPipeline(db, chain, sessions, upstreams, executions, log);
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
  const mcp = new McpEndpoint(pipeline, upstreams, (agentId, code, detail) =>
    recordGateway('request_refused', agentId, code, detail),
  );
  const app = buildApp({
    logger: log,
    auth: new Authenticator(cfg.agents, cfg.dev_mode),
    mcp,
    sessions,
    executions,
    maxRequestBytes: cfg.limits.max_request_bytes,
    recordAuthFailure: (route) => recordGateway('request_refused', null, 'UNAUTHENTICATED', { route }),
  });
  let url: string;
  try {
    url = await app.listen({ host: cfg.listen.host, port: cfg.listen.port });
  } catch (e) {
    await upstreams.close();
    provider.close();
    db.close();
    throw e;
  }
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
    url,
    async close() {
      if (closed) return;
      closed = true;
      await app.close();
      await upstreams.close();
      provider.close();
      db.close();
    },
  };
}
