/**
 * One evidenced request from the client (`resources/read`, `resources/subscribe`,
 * `resources/unsubscribe`, `prompts/get`, `completion/complete`, `tasks/result`), as stages like a
 * `tools/call`: session → route → policy → forward → terminal entry → answer. Every request
 * that reaches it ends in exactly one terminal entry (src/relay/evidence.ts); data is answered
 * only after its entry is committed.
 */

import type { AuditEntry } from '@cmcp/verify/formats';
import { EVIDENCE_META_KEY, evidenceOf } from '../call/respond.js';
import { CmcpError, type ErrorCode } from '../errors/index.js';
import type { ActionId } from '../policy/vocabulary.js';
import type { SessionRow } from '../session/types.js';
import type { CallOutcome } from '../upstream/pool.js';
import { type Answer, registryError } from './answer.js';
import type { MethodRequest } from './channel.js';
import type { EvidencedMethod, RelayDisposition } from './evidence.js';
import type { Route } from './federation.js';
import type { RelayParts } from './parts.js';
import { decideRelay, maxSensitivityOf, type RelayResourceSpec, type RelayVerdict } from './policy.js';
import { progressRelay, progressToken } from './progress.js';
import type { ConnectionNeed } from './sessions.js';

/** What a method contributes: its target, route, forwarded params and Cedar request. */
export interface EvidencedSpec {
  target: string;
  route: Route | null;
  unrouted: { code: ErrorCode; message: string };
  forward: Record<string, unknown>;
  action: ActionId;
  resource: RelayResourceSpec;
  context?: Record<string, unknown>;
  /**
   * The request was decided with the request that created it (`tasks/result`: the
   * `tools/call` that created the task); recorded as `inherited`, no second Cedar request.
   */
  inheritedPolicy?: boolean;
}

/**
 * What each method needs of its upstream connection (src/relay/sessions.ts): a subscription is
 * state of the client's own upstream session; an unsubscribe or a task's result goes where the
 * subscription or the task is (the own connection if any); the others may ask the client.
 */
const NEEDS: Partial<Record<EvidencedMethod, ConnectionNeed>> = {
  'resources/subscribe': 'state',
  'resources/unsubscribe': 'list',
  'tasks/result': 'list',
};

function disposition(o: CallOutcome): RelayDisposition {
  if (o.boundary === 'answered') return 'completed';
  return o.boundary === 'not_sent' ? 'not_attempted' : 'outcome_unknown';
}

function errorCodeOf(o: CallOutcome): ErrorCode | null {
  if ('result' in o) return null;
  if ('rpcError' in o) return 'UPSTREAM_RPC_ERROR';
  if ('tooLarge' in o) return 'UPSTREAM_RESULT_TOO_LARGE';
  return o.boundary === 'not_sent' ? 'UPSTREAM_UNAVAILABLE' : 'UPSTREAM_FAILED';
}

function withEvidence(result: Record<string, unknown>, e: AuditEntry): Record<string, unknown> {
  const meta = typeof result._meta === 'object' && result._meta !== null ? result._meta : {};
  return { ...result, _meta: { ...meta, [EVIDENCE_META_KEY]: { ...evidenceOf(e), call_id: e.call_id } } };
}

/** Runs one evidenced request (module doc). Never throws for caller or upstream faults. */
export async function relayEvidenced(
  relay: RelayParts,
  req: MethodRequest,
  s: EvidencedSpec,
): Promise<Answer> {
  const { caller, params, startedAt } = req;
  const method = req.method as EvidencedMethod;
  const cmcp = params?._cmcp as { session_id?: unknown } | undefined;
  let sessionId: string | null = null;
  const base = () => ({
    method,
    agentId: caller.agentId,
    sessionId,
    upstream: s.route?.upstream ?? null,
    target: s.target,
    params: s.forward,
    startedAt,
  });
  const refuse = async (
    code: ErrorCode,
    message: string,
    policy = {},
    data: Record<string, unknown> = {},
  ): Promise<Answer> => {
    const e = await relay.recorder.record({
      ...base(),
      disposition: 'refused',
      errorCode: code,
      policy,
      detail: data,
    });
    if (!e) return registryError('AUDIT_WRITE_FAILED', 'the refusal could not be recorded');
    return registryError(code, message, { ...data, evidence: evidenceOf(e) });
  };
  if (caller.blocked) return refuse('AGENT_BLOCKED', 'this agent identity is blocked by an operator');
  let calls = 0;
  let session: SessionRow | undefined;
  try {
    const sid = typeof cmcp?.session_id === 'string' ? cmcp.session_id : undefined;
    const row = await relay.deps.sessions.resolve(caller.agentId, sid);
    sessionId = row.session_id;
    calls = row.call_count;
    session = row;
  } catch (e) {
    if (
      e instanceof CmcpError &&
      ['UNKNOWN_SESSION', 'SESSION_CLOSED', 'SESSION_BINDING_REQUIRED'].includes(e.code)
    )
      return refuse(e.code, e.message);
    throw e;
  }
  if (!s.route) return refuse(s.unrouted.code, s.unrouted.message);
  const route = s.route;
  const verdict: RelayVerdict = s.inheritedPolicy
    ? { entry: { policy_decision: 'inherited', policy_rule_matched: null }, detail: {}, refused: null }
    : decideRelay(relay.deps.policy(), {
        agentId: caller.agentId,
        agentAttributes: relay.deps.agentAttributes(caller.agentId),
        action: s.action,
        resource: { ...s.resource, server: route.upstream },
        ...(s.context ? { context: s.context } : {}),
        session: { calls, ...maxSensitivityOf(relay.deps, sessionId, session) },
      });
  if (verdict.refused)
    return refuse(verdict.refused.code, verdict.refused.message, verdict.entry, {
      ...verdict.detail,
      policy_ids: verdict.refused.policyIds,
    });
  const conn = relay.sessions.connection(
    caller.agentId,
    req.channel,
    route.upstream,
    NEEDS[method] ?? 'call',
  );
  if (conn && 'refused' in conn)
    return refuse(conn.refused.code, conn.refused.message, verdict.entry, {
      upstream: conn.refused.upstream,
    });
  const outcome: CallOutcome = conn
    ? await relay.sessions.during(conn, { channel: req.channel, agentId: caller.agentId, sessionId }, () =>
        conn.request(req.method, s.forward, {
          signal: req.channel.signal,
          onprogress: progressRelay(
            progressToken(params),
            req.channel,
            relay.sessions.progress(caller.agentId, route.upstream),
          ),
        }),
      )
    : { boundary: 'not_sent', failure: 'no connection to the upstream' };
  const errorCode = errorCodeOf(outcome);
  const detail: Record<string, unknown> = { ...verdict.detail };
  if ('rpcError' in outcome) detail.upstream_error_code = outcome.rpcError.code;
  if ('failure' in outcome) detail.failure = outcome.failure;
  const e = await relay.recorder.record({
    ...base(),
    ...('result' in outcome ? { result: outcome.result } : {}),
    disposition: disposition(outcome),
    errorCode,
    policy: verdict.entry,
    detail,
  });
  if (!e) return registryError('AUDIT_WRITE_FAILED', 'the outcome could not be recorded');
  if ('result' in outcome) return { result: withEvidence(outcome.result, e) };
  if ('rpcError' in outcome)
    return {
      error: {
        code: outcome.rpcError.code,
        message: outcome.rpcError.message,
        data: {
          error_code: 'UPSTREAM_RPC_ERROR',
          upstream_data: outcome.rpcError.data ?? null,
          evidence: evidenceOf(e),
        },
      },
    };
  return registryError(errorCode ?? 'UPSTREAM_FAILED', 'the upstream did not answer', {
    ...detail,
    evidence: evidenceOf(e),
  });
}
