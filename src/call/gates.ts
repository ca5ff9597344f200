/**
 * The gates of one `tools/call`, in the order the orchestrator runs them (docs/spec/call-path.md):
 * blocked agent → tool route → catalog → policy. The catalog gate precedes the policy because
 * the Cedar resource's attributes come from the tool's catalog pin: a tool without a
 * trustworthy definition is never evaluated. Each gate passes with what the next one needs, or
 * refuses; none writes anything.
 */

import type { CatalogGuard } from '../catalog/guard.js';
import { clip } from '../errors/index.js';
import type { PolicyEngine } from '../policy/engine.js';
import type { SessionRow } from '../session/service.js';
import type { EntryInput } from '../store/port.js';
import type { RoutedTool, UpstreamPool } from '../upstream/pool.js';
import { offlineRefusal } from './offline.js';
import type { SessionSensitivity } from './sensitivity.js';
import type { Caller, CallRequest, Refusal } from './types.js';

/**
 * Policy and catalog controls of the call path (docs/spec/policy.md). The defaults (no controls) keep the
 * pre-policy behaviour: every routed call is allowed.
 */
export interface CallControls {
  /** The engine deciding calls now (changes on a signed reload), or null: no policy. */
  policy(): PolicyEngine | null;
  /** The catalog check, or null: no catalog. */
  catalog: CatalogGuard | null;
  /** Configured Cedar principal attributes of an agent. */
  agentAttributes(agentId: string): Record<string, unknown>;
}

export const NO_CONTROLS: CallControls = {
  policy: () => null,
  catalog: null,
  agentAttributes: () => ({}),
};

/** The policy gate's verdict: the entry members it decides, and what the caller is told. */
export interface PolicyPass {
  entry: Pick<EntryInput, 'policy_decision' | 'policy_rule_matched'>;
  /** `policy_errors` / `policy_failure`, kept in the terminal entry's detail. */
  detail: Record<string, unknown>;
  /** Set in advisory mode on a deny: returned beside the evidence. */
  advisory: Record<string, unknown> | null;
}

type Gate<T> = { ok: true; value: T } | { ok: false; refusal: Refusal };

const notInCatalog = (name: string): Refusal => ({
  code: 'TOOL_NOT_IN_CATALOG',
  message: `tool ${clip(name, 80)} is not in the catalog`,
});

export class CallGates {
  constructor(
    private readonly upstreams: UpstreamPool,
    private readonly controls: CallControls,
    private readonly sensitivity: SessionSensitivity,
  ) {}

  /** The kill switch: a blocked agent's call is refused before its params are read. */
  blocked(caller: Caller): Refusal | null {
    return caller.blocked
      ? { code: 'AGENT_BLOCKED', message: 'this agent identity is blocked by an operator' }
      : null;
  }

  /** Routes the exposed tool name to an upstream; an unrouted pinned tool is drift. */
  route(name: string): Gate<RoutedTool> {
    const route = this.upstreams.route(name);
    if (route) return { ok: true, value: route };
    const catalog = this.controls.catalog;
    const pinned = catalog?.findExposed(name, (s, t) => this.upstreams.exposedName(s, t));
    // The tool's upstream has not answered since start-up: refused before anything else.
    const offline = this.upstreams.unavailableFor(name, pinned?.server);
    if (offline) return { ok: false, refusal: offlineRefusal(name, offline) };
    if (catalog && !pinned) return { ok: false, refusal: notInCatalog(name) };
    if (!pinned)
      return { ok: false, refusal: { code: 'UNKNOWN_TOOL', message: `unknown tool ${clip(name, 80)}` } };
    return {
      ok: false,
      refusal: {
        code: 'CATALOG_DRIFT',
        message: 'the upstream no longer offers this pinned tool; it is blocked',
        entry: { server_identity: pinned.server, detail: { pinned_hash: pinned.sha256, live_hash: null } },
        data: { pinned_hash: pinned.sha256, live_hash: null },
      },
    };
  }

  /**
   * Only pinned tools whose live definition still matches the pin pass.
   * @returns the annotations the policy sees (the pin's, or the live ones without a catalog).
   */
  catalog(name: string, route: RoutedTool): Gate<unknown> {
    const catalog = this.controls.catalog;
    if (!catalog) return { ok: true, value: route.definition.annotations };
    const chk = catalog.check(route.upstream, route.toolName);
    if (chk.kind === 'not_in_catalog') return { ok: false, refusal: notInCatalog(name) };
    if (chk.kind === 'drift')
      return {
        ok: false,
        refusal: {
          code: 'CATALOG_DRIFT',
          message: "the upstream's definition of this tool differs from its catalog pin; it is blocked",
          entry: { detail: { pinned_hash: chk.pinned, live_hash: chk.live } },
          data: { pinned_hash: chk.pinned, live_hash: chk.live },
        },
      };
    return { ok: true, value: chk.tool.definition.annotations };
  }

  /**
   * Cedar, decided before anything is reserved or sent. Without a policy every routed call is
   * allowed (enforcement_mode "none" in the claim). A refusal carries the policy's entry
   * members (`deny`, the matched ids) in its `entry`.
   */
  policy(
    caller: Caller,
    req: CallRequest,
    route: RoutedTool,
    annotations: unknown,
    session: SessionRow,
  ): Gate<PolicyPass> {
    const engine = this.controls.policy();
    if (!engine)
      return { ok: true, value: { entry: { policy_decision: 'allow' }, detail: {}, advisory: null } };
    const d = engine.evaluate({
      agentId: caller.agentId,
      // A token's attributes (scopes, claims) over the configured ones.
      agentAttributes: { ...this.controls.agentAttributes(caller.agentId), ...caller.attributes },
      tool: {
        exposedName: req.toolName,
        server: route.upstream,
        toolName: route.toolName,
        sensitivity: this.sensitivity.of(route),
        annotations,
      },
      arguments: req.arguments ?? {},
      workflowId: req.workflowId,
      session: {
        calls: session.call_count,
        maxSensitivity: this.sensitivity.max(session.session_id, session),
      },
    });
    const detail: Record<string, unknown> = {};
    if (d.errored.length) detail.policy_errors = d.errored;
    if (d.failure) detail.policy_failure = d.failure;
    if (d.invalid) detail.policy_attribute_invalid = d.invalid;
    // An attribute a policy reads that does not fit the schema is a deny (it would have switched
    // a policy off): refused when enforcing; advisory and silent record it as their deny.
    if (d.invalid && engine.mode === 'enforcing')
      return {
        ok: false,
        refusal: {
          code: 'POLICY_ATTRIBUTE_INVALID',
          message: 'an attribute of the call does not conform to the policy schema; refused',
          entry: { policy_decision: 'deny', policy_rule_matched: [], detail },
          data: { policy_ids: [], ...detail },
        },
      };
    const pass = (decision: string, advisory: Record<string, unknown> | null = null): Gate<PolicyPass> => ({
      ok: true,
      value: { entry: { policy_decision: decision, policy_rule_matched: d.matched }, detail, advisory },
    });
    if (d.decision === 'allow') return pass('allow');
    if (engine.mode === 'advisory')
      return pass('advisory_deny', {
        policy_decision: 'advisory_deny',
        policy_ids: d.matched,
        ...(d.errored.length ? { policy_errors: d.errored } : {}),
        ...(d.invalid ? { policy_attribute_invalid: d.invalid } : {}),
      });
    if (engine.mode !== 'enforcing') return pass('silent_deny');
    const failed = d.failure !== null || d.errored.length > 0;
    return {
      ok: false,
      refusal: {
        code: failed ? 'POLICY_EVALUATION_FAILED' : 'POLICY_DENY',
        message: failed ? 'the call could not be evaluated by the policy; refused' : 'denied by policy',
        entry: {
          policy_decision: 'deny',
          policy_rule_matched: d.matched,
          detail: Object.keys(detail).length ? detail : null,
        },
        data: { policy_ids: d.matched, ...detail },
      },
    };
  }
}
