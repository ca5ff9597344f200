/**
 * Each action is decided against the policies whose action scope can hold for it
 * (src/policy/action-sets.ts). The answer — decision, matched policies, errored policies — is the
 * one the whole bundle gives: checked here against cedar-wasm deciding the same requests with the
 * whole bundle preparsed, for the example bundle and for a bundle with every form of action
 * scope, including policies that error and policies for other actions that would.
 */
import { join } from 'node:path';
import * as cedar from '@cedar-policy/cedar-wasm/nodejs';
import { describe, expect, it } from 'vitest';
import { ActionPolicySets } from '../src/policy/action-sets.js';
import { loadBundleDir } from '../src/policy/bundle.js';
import { PolicyEngine } from '../src/policy/engine.js';
import { REPO_ROOT } from './harness/gateway.js';

const EXAMPLE = loadBundleDir(join(REPO_ROOT, 'examples', 'policy'));

// A schema the requests below conform to (the engine checks every request against its bundle's
// schema): every action applies to these agents and tools, with these arguments.
const SCHEMA = `
entity Server;
entity Agent = { team?: String, roles?: Set<String> };
entity Tool in [Server] = { sensitivity_level: Long, annotations: { readOnlyHint?: Bool, openWorldHint?: Bool } };
type Context = {
  arguments: { path?: String, missing?: Long },
  session: { calls: Long, max_sensitivity: String, max_sensitivity_level: Long },
};
action call_tool, read_resource, get_prompt, complete, relay_roots, relay_sampling
  appliesTo { principal: [Agent], resource: [Tool], context: Context };
`;

const SCOPES: Record<string, string> = {
  any: 'permit (principal, action, resource) when { context.session.calls < 3 };',
  eq: 'permit (principal, action == Action::"call_tool", resource) when { principal has roles && principal.roles.contains("writer") };',
  eqOther: 'forbid (principal, action == Action::"get_prompt", resource);',
  inList:
    'forbid (principal, action in [Action::"read_resource", Action::"call_tool"], resource) when { context.arguments has path && context.arguments.path like "*secret*" };',
  inOthers: 'forbid (principal, action in [Action::"read_resource", Action::"complete"], resource);',
  inOne: 'permit (principal, action in Action::"complete", resource);',
  // Errors for every action it applies to (no such attribute): a deny, reported as errored.
  errsCall:
    'forbid (principal, action == Action::"call_tool", resource) when { context.arguments.missing == 1 };',
  errsOther: 'forbid (principal, action == Action::"relay_roots", resource) when { context.nope == 1 };',
  // A namespaced action never equals the requests' `Action::"…"`, but is kept (not read here).
  otherType: 'forbid (principal, action == Ns::Action::"call_tool", resource);',
};

const ARGUMENTS: Record<string, cedar.CedarValueJson>[] = [
  {},
  { path: '/w/outbox/a' },
  { path: '/w/secret/x' },
  { missing: 1 },
  { missing: 2 },
];

const ACTIONS = ['call_tool', 'read_resource', 'get_prompt', 'complete', 'relay_roots', 'relay_sampling'];

/** The full bundle's answer in the engine's terms, straight from cedar-wasm. */
function fullAnswer(setId: string, q: Omit<cedar.StatefulAuthorizationCall, 'preparsedPolicySetId'>) {
  const a = cedar.statefulIsAuthorized({ ...q, preparsedPolicySetId: setId });
  if (a.type !== 'success') return { failure: a.errors[0]?.message };
  const errored = [...new Set(a.response.diagnostics.errors.map((e) => e.policyId))].sort();
  return {
    decision: errored.length ? 'deny' : a.response.decision,
    matched: [...a.response.diagnostics.reason].sort(),
    errored,
  };
}

function requests(action: string): Omit<cedar.StatefulAuthorizationCall, 'preparsedPolicySetId'>[] {
  const out: Omit<cedar.StatefulAuthorizationCall, 'preparsedPolicySetId'>[] = [];
  for (const roles of [['writer'], ['reader'], ['sampler']])
    for (const args of ARGUMENTS)
      for (const calls of [0, 5, 500])
        for (const [server, readOnly] of [
          ['fs', true],
          ['fs', false],
          ['web', false],
        ] as const)
          out.push({
            principal: { type: 'Agent', id: 'a1' },
            action: { type: 'Action', id: action },
            resource: { type: 'Tool', id: `${server}.t` },
            context: {
              arguments: args,
              session: { calls, max_sensitivity: 'internal', max_sensitivity_level: calls > 100 ? 3 : 1 },
            },
            entities: [
              { uid: { type: 'Agent', id: 'a1' }, attrs: { team: 'eng', roles }, parents: [] },
              {
                uid: { type: 'Tool', id: `${server}.t` },
                attrs: {
                  sensitivity_level: 2,
                  annotations: { readOnlyHint: readOnly, openWorldHint: server === 'web' },
                },
                parents: [{ type: 'Server', id: server }],
              },
            ],
          });
  return out;
}

describe('per-action policy sets', () => {
  it('leave out exactly the policies whose action scope names other actions', () => {
    const sets = new ActionPolicySets('unused', SCOPES);
    expect(sets.policyIdsFor('call_tool').sort()).toEqual(['any', 'eq', 'errsCall', 'inList', 'otherType']);
    expect(sets.policyIdsFor('complete').sort()).toEqual(['any', 'inOne', 'inOthers', 'otherType']);
    expect(sets.policyIdsFor('relay_roots').sort()).toEqual(['any', 'errsOther', 'otherType']);
  });

  it.each([
    ['the example bundle', EXAMPLE.policies],
    ['every action scope form', SCOPES],
  ])('decide as the whole bundle does: %s', (_name, policies) => {
    const engine = new PolicyEngine({ ...EXAMPLE, schema: SCHEMA, policies }, 'enforcing');
    const fullId = `test-full-${Object.keys(policies).join('-')}`;
    expect(cedar.preparsePolicySet(fullId, { staticPolicies: policies }).type).toBe('success');
    let denies = 0;
    let errors = 0;
    let compared = 0;
    for (const action of ACTIONS)
      for (const q of requests(action)) {
        const got = engine.authorize(
          q.principal as cedar.TypeAndId,
          action,
          q.resource as cedar.TypeAndId,
          q.context,
          q.entities as cedar.EntityJson[],
        );
        const want = fullAnswer(fullId, q);
        expect({ decision: got.decision, matched: got.matched, errored: got.errored }).toEqual(want);
        expect(got.failure).toBeNull();
        expect(got.invalid).toBeNull();
        compared += 1;
        if (got.decision === 'deny') denies += 1;
        if (got.errored.length) errors += 1;
      }
    // Both outcomes occur, so the comparison covers allows, denies and (for SCOPES) errors.
    expect(denies).toBeGreaterThan(0);
    expect(denies).toBeLessThan(compared);
    if (policies === SCOPES) expect(errors).toBeGreaterThan(0);
  });

  it('the example bundle decides call_tool with fewer policies than it has', () => {
    const sets = new ActionPolicySets('unused', EXAMPLE.policies);
    const all = Object.keys(EXAMPLE.policies).length;
    expect(sets.policyIdsFor('call_tool').length).toBeLessThan(all);
    expect(sets.policyIdsFor('call_tool')).toContain('session-call-budget'); // scope `action`
  });
});
