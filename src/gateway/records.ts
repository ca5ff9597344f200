/**
 * The gateway's own entries in the gateway chain: `gateway_start`, and `request_refused` for
 * requests refused at the HTTP edge or the MCP layer (unauthenticated ones at a bounded rate,
 * auth-failures.ts). Recording a refusal never fails the request: a failed append is logged.
 */
import { clip } from '@cmcp/verify/errors/index';
import { b64u } from '@cmcp/verify/format/canonical';
import { GATEWAY_CHAIN_ID } from '@cmcp/verify/format/entry';
import type { Logger } from 'pino';
import type { AuditChain } from '../audit/chain.js';
import type { GatewayConfig } from '../config/index.js';
import type { GatewayKey } from '../session/service.js';
import type { AttestationProvider } from '../tee/provider.js';
import { AuthFailureRecorder } from './auth-failures.js';
import type { RefusalSink } from './routes/agent.js';

/** Records `gateway_start`: the key, provider, upstreams and tools this process serves with. */
export function recordGatewayStart(
  chain: AuditChain,
  cfg: GatewayConfig,
  key: GatewayKey,
  provider: AttestationProvider,
  tools: number,
): void {
  chain.append(GATEWAY_CHAIN_ID, {
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
  });
}

/** The `request_refused` sinks of one gateway. */
export interface GatewayRefusals {
  refused: RefusalSink;
  /** Unauthenticated requests: the first in each window at once, the rest as one counted entry. */
  authFailures: AuthFailureRecorder;
  /** Requests refused by DNS-rebinding protection (host-check.ts), aggregated the same way. */
  hostRefusals: AuthFailureRecorder;
}

/**
 * The gateway's `request_refused` recorders over one chain.
 * @returns a sink that never throws (a failed append is logged), and the rate-bounded recorder
 *   of unauthenticated requests (flush it at shutdown).
 */
export function gatewayRefusals(chain: AuditChain, log: Logger): GatewayRefusals {
  const refused: RefusalSink = (agentId, code, detail) => {
    try {
      chain.append(GATEWAY_CHAIN_ID, {
        entry_type: 'request_refused',
        agent_id: agentId,
        disposition: 'refused',
        error_code: code,
        detail,
      });
    } catch (e) {
      log.error({ err: (e as Error).message }, 'could not record a refused request');
    }
  };
  // Unauthenticated requests are on the record without letting anyone grow the database at will.
  const authFailures = new AuthFailureRecorder((count, routes, windowStart) =>
    refused(null, 'UNAUTHENTICATED', { count, routes, window_start: windowStart }),
  );
  const hostRefusals = new AuthFailureRecorder((count, routes, windowStart) =>
    refused(null, 'HOST_NOT_ALLOWED', { count, routes, window_start: windowStart }),
  );
  return { refused, authFailures, hostRefusals };
}

/**
 * Records `client_session_open` in the gateway chain: which agent opened a client session
 * (`Mcp-Session-Id`) and the protocol revision its `initialize` negotiated, with the client's
 * declared name and version (clipped). Never fails the request: a failed append is logged.
 */
export function recordClientSession(
  chain: AuditChain,
  s: { id: string; agentId: string; protocolVersion: string },
  clientInfo: unknown,
  log: Logger,
): void {
  const info = (clientInfo ?? {}) as { name?: unknown; version?: unknown };
  try {
    chain.append(GATEWAY_CHAIN_ID, {
      entry_type: 'client_session_open',
      agent_id: s.agentId,
      detail: {
        client_session_id: s.id,
        protocol_version: s.protocolVersion,
        client_name: typeof info.name === 'string' ? clip(info.name, 100) : null,
        client_version: typeof info.version === 'string' ? clip(info.version, 50) : null,
      },
    });
  } catch (e) {
    log.error({ err: (e as Error).message }, 'could not record a client session');
  }
}
