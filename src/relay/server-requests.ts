/**
 * Server-to-client requests (`sampling/createMessage`, `elicitation/create`, `roots/list`) from
 * an upstream, relayed to the client whose request they belong to and the client's answer
 * relayed back up (docs/spec/mcp.md#server-to-client-requests). Sampling sends conversation
 * content to the client's model, so each relay is decided by Cedar (`relay_sampling`,
 * `relay_elicitation`, `relay_roots`) and ends in one terminal entry (`sampling_relay`, …).
 * A refusal reaches the upstream as a JSON-RPC error. A request that belongs to no client request
 * (no single request of the client session in flight on that connection) is refused, except
 * `roots/list`, which an upstream may ask at any time (filesystem servers ask after
 * `initialized` and on every `notifications/roots/list_changed`): it goes on the client
 * session's standalone stream and is recorded in the gateway chain.
 */

import { McpError } from '@modelcontextprotocol/sdk/types.js';
import { CmcpError, ERRORS, type ErrorCode } from '../errors/index.js';
import type { ActionId } from '../policy/vocabulary.js';
import type { RelaySessionReads } from '../session/ports.js';
import type { RelayRecorder } from './evidence.js';
import type { RelayDeps } from './parts.js';
import { decideRelay, maxSensitivityOf } from './policy.js';
import type { ServerRequestMethod, ServerRequestRelay } from './sessions.js';

const ACTIONS: Record<ServerRequestMethod, ActionId> = {
  'sampling/createMessage': 'relay_sampling',
  'elicitation/create': 'relay_elicitation',
  'roots/list': 'relay_roots',
};

/** The relay of server-to-client requests, for {@link RelaySessions}. */
export function serverRequestRelay(
  deps: Pick<RelayDeps, 'policy' | 'agentAttributes' | 'maxSensitivity'>,
  sessions: RelaySessionReads,
  recorder: RelayRecorder,
): ServerRequestRelay {
  return async (origin, method, params, signal) => {
    const startedAt = process.hrtime.bigint();
    const agentId = origin.inflight?.agentId ?? origin.agentId;
    const sessionId = origin.inflight?.sessionId ?? null;
    const base = { method, agentId, sessionId, upstream: origin.upstream, target: null, params, startedAt };
    const refuse = async (code: ErrorCode, message: string, policy = {}, detail = {}): Promise<never> => {
      await recorder.record({ ...base, disposition: 'refused', errorCode: code, policy, detail });
      throw new McpError(ERRORS[code].rpc, message, { error_code: code });
    };
    const f = origin.inflight;
    if (!f && method !== 'roots/list')
      await refuse(
        'CLIENT_CHANNEL_UNAVAILABLE',
        'no single client request of this session is in flight on this upstream',
      );
    const row = sessionId ? await sessions.get(agentId, sessionId) : undefined;
    const verdict = decideRelay(deps.policy(), {
      agentId,
      agentAttributes: deps.agentAttributes(agentId),
      action: ACTIONS[method],
      resource: { type: 'ClientRequest', id: method, server: origin.upstream, attrs: { method } },
      session: { calls: row?.call_count ?? 0, ...maxSensitivityOf(deps, sessionId, row) },
    });
    if (verdict.refused)
      await refuse(verdict.refused.code, verdict.refused.message, verdict.entry, {
        ...verdict.detail,
        policy_ids: verdict.refused.policyIds,
      });
    let result: Record<string, unknown>;
    try {
      result = f
        ? await f.channel.request({ method, params }, { signal: AbortSignal.any([signal, f.channel.signal]) })
        : await origin.standalone({ method, params }, signal);
    } catch (e) {
      const unavailable = e instanceof CmcpError && e.code === 'CLIENT_CHANNEL_UNAVAILABLE';
      const code = unavailable ? 'CLIENT_CHANNEL_UNAVAILABLE' : 'CLIENT_RPC_ERROR';
      await recorder.record({
        ...base,
        disposition: unavailable ? 'not_attempted' : 'completed',
        errorCode: code,
        policy: verdict.entry,
        detail: verdict.detail,
      });
      const rpc = (e as { rpcCode?: unknown }).rpcCode;
      throw new McpError(typeof rpc === 'number' ? rpc : ERRORS[code].rpc, (e as Error).message, {
        error_code: code,
      });
    }
    const entry = await recorder.record({
      ...base,
      result,
      disposition: 'completed',
      errorCode: null,
      policy: verdict.entry,
      detail: verdict.detail,
    });
    if (!entry) throw new McpError(ERRORS.AUDIT_WRITE_FAILED.rpc, 'the relay could not be recorded');
    return result;
  };
}
