/**
 * The gateway's own entries in the gateway chain: `gateway_start`, and `request_refused` for
 * requests refused at the HTTP edge or the MCP layer, all at a bounded rate per (code, agent)
 * (the aggregated refusal record, edge/refusals.ts). Recording a refusal never fails the
 * request: a failed append is logged.
 */

import { b64u, GATEWAY_CHAIN_ID } from '@cmcp/verify/formats';
import type { Logger } from 'pino';
import type { GatewayConfig } from '../../config/index.js';
import { CmcpError, clip, type ErrorCode } from '../../errors/index.js';
import type { ReloadRefusedError } from '../../policy/state.js';
import type { GatewayKey } from '../../session/service.js';
import { activeFaults } from '../../store/faults.js';
import type { EntryInput, GatewayChainSink } from '../../store/port.js';
import type { AttestationProvider } from '../../tee/provider.js';
import { tlsExposure } from '../../tls/exposure.js';
import {
  AuthFailureRecorder,
  type GatewayRefusals,
  RefusalAggregator,
  type RefusalSink,
} from '../edge/refusals.js';

/** The `gateway_start` entry's body (both engines: a replica appends it through its store). */
export function gatewayStartEntry(
  cfg: GatewayConfig,
  key: GatewayKey,
  provider: AttestationProvider,
  tools: number,
): EntryInput {
  return {
    entry_type: 'gateway_start',
    detail: {
      version: '0.1.0',
      key_thumbprint: b64u(key.thumbprint),
      provider: provider.name,
      dev_mode: cfg.dev_mode,
      upstreams: cfg.upstreams.map((u) => ({ name: u.name, transport: u.transport })),
      tools,
      instance_id: cfg.instance_id,
    },
  };
}

/**
 * Records a refused policy reload (`policy_reload_refused`, in the gateway chain) and throws it
 * to the operator: one builder for the SQLite gateway (operator/controls.ts) and a replica
 * (operator/reloads.ts). A record that cannot be written is logged; the refusal still stands.
 * @throws CmcpError POLICY_RELOAD_REFUSED, always (message and diagnostics clipped).
 */
export async function refuseReload(
  chain: GatewayChainSink,
  log: Logger,
  operatorId: string,
  e: ReloadRefusedError,
): Promise<never> {
  try {
    await chain.appendAwaited(GATEWAY_CHAIN_ID, {
      entry_type: 'policy_reload_refused',
      disposition: 'refused',
      error_code: 'POLICY_RELOAD_REFUSED',
      detail: {
        operator_id: operatorId,
        reason: e.reason,
        bundle_hash: e.bundleHash,
        message: e.message.slice(0, 300),
        diagnostics: e.diagnostics.slice(0, 20),
      },
    });
  } catch (err) {
    log.error({ err: (err as Error).message }, 'could not record a refused reload');
  }
  throw new CmcpError('POLICY_RELOAD_REFUSED', e.message.slice(0, 300), {
    reason: e.reason,
    bundle_hash: e.bundleHash,
    diagnostics: e.diagnostics.slice(0, 20),
  });
}

/**
 * A caller-chosen value as JCS can carry it (RFC 8785 §3.2.2.2 refuses lone surrogates): each
 * lone surrogate becomes U+FFFD, so a refusal of such a request (a method name, or one clipped
 * inside a surrogate pair) is still recorded.
 */
const LONE_SURROGATE = /[\uD800-\uDBFF](?![\uDC00-\uDFFF])|(?<![\uD800-\uDBFF])[\uDC00-\uDFFF]/g;
const fix = (s: string) => s.replace(LONE_SURROGATE, '\uFFFD');

function wellFormed<T>(v: T): T {
  if (typeof v === 'string') return fix(v) as T;
  if (Array.isArray(v)) return v.map(wellFormed) as T;
  if (v && typeof v === 'object') {
    const out: Record<string, unknown> = {};
    for (const [k, x] of Object.entries(v)) out[fix(k)] = wellFormed(x);
    return out as T;
  }
  return v;
}

/**
 * The gateway's `request_refused` recorders over one chain.
 * @param onRefusal told every refusal's code, aggregated into an entry or not (metrics).
 * @returns a sink that never throws (a failed append is logged), and the rate-bounded recorder
 *   of unauthenticated requests (flush it at shutdown).
 */
export function gatewayRefusals(
  chain: GatewayChainSink,
  log: Logger,
  onRefusal?: (code: ErrorCode) => void,
): GatewayRefusals {
  // Not awaited by the refused request; written at once unless another process holds the lock.
  const write: RefusalSink = (agentId, code, detail) => {
    chain
      .appendAwaited(GATEWAY_CHAIN_ID, {
        entry_type: 'request_refused',
        agent_id: agentId === null ? null : wellFormed(agentId),
        disposition: 'refused',
        error_code: code,
        detail: wellFormed(detail) as Record<string, unknown>,
      })
      .catch((e) => log.error({ err: (e as Error).message }, 'could not record a refused request'));
  };
  // Refusals are on the record without letting anyone grow the database at will.
  const aggregate = new RefusalAggregator(write, undefined, onRefusal);
  const refused: RefusalSink = (agentId, code, detail) =>
    aggregate.record(agentId, code, refusedRoute(detail), detail);
  return {
    refused,
    authFailures: new AuthFailureRecorder(aggregate),
    hostRefusals: new AuthFailureRecorder(aggregate, 'HOST_NOT_ALLOWED'),
  };
}

/** What a refusal's detail says was refused (its route, else its JSON-RPC method). */
function refusedRoute(detail: Record<string, unknown>): string {
  if (typeof detail.route === 'string') return detail.route;
  if (typeof detail.method === 'string') return detail.method;
  return 'POST /mcp';
}

/**
 * Records `client_session_open` in the gateway chain: which agent opened a client session
 * (`Mcp-Session-Id`) and the protocol revision its `initialize` negotiated, with the client's
 * declared name and version (clipped). Never fails the request: a failed append is logged.
 */
export function recordClientSession(
  chain: GatewayChainSink,
  s: { id: string; agentId: string; protocolVersion: string },
  clientInfo: unknown,
  log: Logger,
): void {
  const info = (clientInfo ?? {}) as { name?: unknown; version?: unknown };
  chain
    .appendAwaited(GATEWAY_CHAIN_ID, {
      entry_type: 'client_session_open',
      agent_id: s.agentId,
      detail: {
        client_session_id: s.id,
        protocol_version: s.protocolVersion,
        client_name: typeof info.name === 'string' ? clip(info.name, 100) : null,
        client_version: typeof info.version === 'string' ? clip(info.version, 50) : null,
      },
    })
    .catch((e) => log.error({ err: (e as Error).message }, 'could not record a client session'));
}

/**
 * Start-up warnings about how exposed this gateway is: fault injection on, dev mode, a listener
 * beyond loopback without TLS (docs/operations.md).
 */
/** Start-up warnings about how exposed this gateway is. */
export function warnExposure(cfg: GatewayConfig, log: Logger): void {
  if (activeFaults().length)
    log.warn(
      { faults: activeFaults() },
      'FAULT INJECTION IS ON: writes or the start-up will fail on purpose (test seam)',
    );
  if (cfg.dev_mode)
    log.warn(
      'DEV MODE: loopback only; unauthenticated requests act as agent "dev"; do not use in production',
    );
  const tls = tlsExposure(cfg);
  if (tls.status === 'warn') log.warn({ host: cfg.listen.host }, tls.detail);
}
