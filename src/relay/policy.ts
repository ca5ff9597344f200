/**
 * Cedar decisions for the relayed MCP methods that carry data (docs/spec/policy.md#relayed-methods).
 * Each is one Cedar request with principal `Agent::"<agent_id>"` (its configured attributes) and
 * context `{session: {calls, max_sensitivity, max_sensitivity_level}}` (the session's highest
 * forwarded tool sensitivity, as `tools/call` sees it: src/call/sensitivity.ts) plus what the
 * action adds:
 *
 * | method | action | resource |
 * |---|---|---|
 * | `resources/read` | `read_resource` | `Resource::"<uri>"` in its `Server`, `{server, uri}` |
 * | `resources/subscribe`, `resources/unsubscribe` | `subscribe_resource` | `Resource::"<uri>"` |
 * | `prompts/get` | `get_prompt` (context `arguments`) | `Prompt::"<gateway name>"`, `{server, name}` |
 * | `completion/complete` | `complete` | `Completion::"<ref>"`, `{server, ref_type, ref}` |
 * | `sampling/createMessage` (upstream → client) | `relay_sampling` | `ClientRequest::"<method>"`, `{server, method}` |
 * | `elicitation/create` | `relay_elicitation` | `ClientRequest::"<method>"` |
 * | `roots/list` | `relay_roots` | `ClientRequest::"<method>"` |
 *
 * Without a policy every such request is allowed (enforcement_mode "none"). A bundle whose
 * schema does not declare an action has no permit for it, so Cedar's default deny refuses it:
 * adding the relay does not open a data path an existing policy never considered.
 */
import type * as cedar from '@cedar-policy/cedar-wasm/nodejs';
import type { Sensitivity } from '../catalog/catalog.js';
import { agentEntity, CedarValueError, type PolicyEngine, toCedarValue } from '../policy/engine.js';
import { onlyReferenced } from '../policy/referenced-attributes.js';
import { type ActionId, type AttrsOf, type RelayResourceType, sessionFacts } from '../policy/vocabulary.js';
import type { SessionRow } from '../session/types.js';
import type { EntryInput } from '../store/port.js';

/**
 * The Cedar resource of one relayed request: its type and attributes as src/policy/vocabulary.ts
 * declares them (`server` given apart).
 */
export type RelayResource = RelayResourceSpec & { server: string };

/** A {@link RelayResource} before its upstream is known. */
export type RelayResourceSpec = {
  [T in RelayResourceType]: { type: T; id: string; attrs: Omit<AttrsOf<T>, 'server'> };
}[RelayResourceType];

/** One relayed request to decide. */
export interface RelayPolicyRequest {
  agentId: string;
  agentAttributes: Record<string, unknown>;
  action: ActionId;
  resource: RelayResource;
  /** Extra context members (`arguments` of a prompt). */
  context?: Record<string, unknown>;
  /** The session's facts; `maxSensitivity` absent (no session): `unclassified`. */
  session: { calls: number; maxSensitivity?: Sensitivity };
}

/** The verdict: the entry members it decides, and a refusal when the policy enforces a deny. */
export interface RelayVerdict {
  entry: Pick<EntryInput, 'policy_decision' | 'policy_rule_matched'>;
  detail: Record<string, unknown>;
  refused: {
    code: 'POLICY_DENY' | 'POLICY_EVALUATION_FAILED' | 'POLICY_ATTRIBUTE_INVALID';
    message: string;
    policyIds: string[];
  } | null;
}

/**
 * The `maxSensitivity` member of a relayed request's session facts: the session's highest
 * forwarded tool sensitivity from `deps.maxSensitivity` (given the session's row when there is
 * one: a replica's level comes with it), nothing without a session or a source.
 */
export function maxSensitivityOf(
  deps: { maxSensitivity?: (sessionId: string, row?: SessionRow) => Sensitivity },
  sessionId: string | null,
  row?: SessionRow,
): { maxSensitivity?: Sensitivity } {
  return sessionId !== null && deps.maxSensitivity
    ? { maxSensitivity: deps.maxSensitivity(sessionId, row) }
    : {};
}

/** Decides one relayed request (module doc). Never throws. */
export function decideRelay(engine: PolicyEngine | null, req: RelayPolicyRequest): RelayVerdict {
  if (!engine) return { entry: { policy_decision: 'allow' }, detail: {}, refused: null };
  let context: cedar.Context;
  let entities: cedar.EntityJson[];
  try {
    // Only the arguments a policy can read are converted (as for tools/call).
    const raw = { ...(req.context ?? {}) };
    if (typeof raw.arguments === 'object' && raw.arguments !== null && !Array.isArray(raw.arguments))
      raw.arguments = onlyReferenced(
        raw.arguments as Record<string, unknown>,
        engine.keptArguments(req.action),
      );
    const extra = toCedarValue(raw, '/context') as Record<string, cedar.CedarValueJson>;
    const max = req.session.maxSensitivity ?? 'unclassified';
    context = {
      ...extra,
      session: sessionFacts(req.session.calls, max),
    };
    entities = [
      agentEntity(req.agentId, req.agentAttributes),
      {
        uid: { type: req.resource.type, id: req.resource.id },
        attrs: { ...req.resource.attrs, server: req.resource.server } satisfies AttrsOf<RelayResourceType>,
        parents: [{ type: 'Server', id: req.resource.server }],
      },
      { uid: { type: 'Server', id: req.resource.server }, attrs: {}, parents: [] },
    ];
  } catch (e) {
    // A value Cedar cannot carry (an entity or extension escape) does not conform either.
    if (e instanceof CedarValueError) return invalid(engine.escapeMisfit(req.action, e), engine);
    return failed([], { policy_failure: (e as Error).message.slice(0, 200) }, engine);
  }
  const d = engine.authorize(
    { type: 'Agent', id: req.agentId },
    req.action,
    { type: req.resource.type, id: req.resource.id },
    context,
    entities,
  );
  const detail: Record<string, unknown> = {};
  if (d.errored.length) detail.policy_errors = d.errored;
  if (d.failure) detail.policy_failure = d.failure;
  if (d.invalid) return invalid(d.invalid, engine);
  const pass = (decision: string): RelayVerdict => ({
    entry: { policy_decision: decision, policy_rule_matched: d.matched },
    detail,
    refused: null,
  });
  if (d.decision === 'allow') return pass('allow');
  if (engine.mode === 'advisory') return pass('advisory_deny');
  if (engine.mode !== 'enforcing') return pass('silent_deny');
  if (d.failure !== null || d.errored.length > 0) return failed(d.matched, detail, engine);
  return {
    entry: { policy_decision: 'deny', policy_rule_matched: d.matched },
    detail,
    refused: { code: 'POLICY_DENY', message: 'denied by policy', policyIds: d.matched },
  };
}

/**
 * A request that does not conform to the schema (`where`: ./policy/misfit.ts, no value): a deny
 * following the mode, as for tools/call — refused when enforcing, else recorded as the mode's deny.
 */
function invalid(where: string, engine: PolicyEngine): RelayVerdict {
  const detail = { policy_attribute_invalid: where };
  if (engine.mode !== 'enforcing')
    return {
      entry: {
        policy_decision: engine.mode === 'advisory' ? 'advisory_deny' : 'silent_deny',
        policy_rule_matched: [],
      },
      detail,
      refused: null,
    };
  return {
    entry: { policy_decision: 'deny', policy_rule_matched: [] },
    detail,
    refused: {
      code: 'POLICY_ATTRIBUTE_INVALID',
      message: 'an attribute of the request does not conform to the policy schema; refused',
      policyIds: [],
    },
  };
}

function failed(matched: string[], detail: Record<string, unknown>, engine: PolicyEngine): RelayVerdict {
  if (engine.mode !== 'enforcing')
    return {
      entry: {
        policy_decision: engine.mode === 'advisory' ? 'advisory_deny' : 'silent_deny',
        policy_rule_matched: matched,
      },
      detail,
      refused: null,
    };
  return {
    entry: { policy_decision: 'deny', policy_rule_matched: matched },
    detail,
    refused: {
      code: 'POLICY_EVALUATION_FAILED',
      message: 'the request could not be evaluated by the policy; refused',
      policyIds: matched,
    },
  };
}
