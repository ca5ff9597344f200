/**
 * The Cedar requests of tools/call carry only the entity attributes some policy can read
 * (src/policy/referenced-attributes.ts): every decision, reason and error stays the one a
 * request with every attribute gets, which this file checks against cedar-wasm itself over a
 * grid of requests and bundles that read different attributes in every syntactic form.
 */
import { join } from 'node:path';
import type * as cedar from '@cedar-policy/cedar-wasm/nodejs';
import { describe, expect, it } from 'vitest';
import { type Sensitivity, sensitivityLevel } from '../src/catalog/catalog.js';
import { loadBundleDir, type PolicyBundle } from '../src/policy/bundle.js';
import {
  agentEntity,
  PolicyEngine,
  type PolicyRequest,
  toCedarValue,
  toolEntity,
} from '../src/policy/engine.js';
import { onlyReferenced, referencedAttributes } from '../src/policy/referenced-attributes.js';
import { REPO_ROOT } from './harness/gateway.js';

const EXAMPLE = loadBundleDir(join(REPO_ROOT, 'examples', 'policy'));

// The example schema, declaring the agent attributes and the argument the grid uses (requests
// are checked against the schema).
const SCHEMA = EXAMPLE.schema
  .replace(
    'entity Agent = {',
    'entity Agent = {\n  clearance?: String,\n  unread?: { deep: Set<Long> },\n  level?: Long,',
  )
  .replace('arguments: {\n      path?: String,', 'arguments: {\n      n?: String,\n      path?: String,');

function withPolicies(policies: Record<string, string>): PolicyBundle {
  return { ...EXAMPLE, schema: SCHEMA, policies };
}

/** The request of the spec with every attribute (docs/spec/policy.md#cedar-requests). */
function fullRequest(engine: PolicyEngine, r: PolicyRequest) {
  const context: cedar.Context = {
    arguments: toCedarValue(r.arguments) as Record<string, cedar.CedarValueJson>,
    session: {
      calls: r.session.calls,
      max_sensitivity: r.session.maxSensitivity,
      max_sensitivity_level: sensitivityLevel(r.session.maxSensitivity),
    },
  };
  if (r.workflowId !== null) context.workflow_id = r.workflowId;
  return engine.authorize(
    { type: 'Agent', id: r.agentId },
    'call_tool',
    { type: 'Tool', id: r.tool.exposedName },
    context,
    [agentEntity(r.agentId, r.agentAttributes), toolEntity(r.tool)],
  );
}

const BUNDLES: Record<string, Record<string, string>> = {
  example: EXAMPLE.policies,
  'every form of access': {
    dot: 'permit (principal, action, resource) when { resource.name == "write_file" };',
    index: 'permit (principal, action, resource) when { resource["server"] == "fs" };',
    has: 'forbid (principal, action, resource) when { principal has clearance };',
    'has-path': 'forbid (principal, action, resource) when { resource has annotations.destructiveHint };',
    nested:
      'forbid (principal, action, resource) when { if principal has team then principal.team == "x" else false };',
    sensitivity: 'forbid (principal, action, resource) when { resource.sensitivity == "secret" };',
  },
  'reads nothing': { all: 'permit (principal, action, resource);' },
  'errors on a missing attribute': {
    err: 'forbid (principal, action, resource) when { principal.level > 2 };',
    ok: 'permit (principal, action, resource);',
  },
};

function grid(): PolicyRequest[] {
  const out: PolicyRequest[] = [];
  const agents: Record<string, unknown>[] = [
    { team: 'eng', roles: ['writer'] },
    { team: 'x', clearance: 'high', unread: { deep: [1, 2] } },
    { level: 3, roles: [] },
    {},
  ];
  const tools = [
    {
      exposedName: 'fs.write_file',
      server: 'fs',
      toolName: 'write_file',
      annotations: { destructiveHint: true },
    },
    { exposedName: 'fs.read', server: 'fs', toolName: 'read', annotations: { readOnlyHint: true } },
    { exposedName: 'web.get', server: 'web', toolName: 'get', annotations: { openWorldHint: true } },
  ];
  const sens: Sensitivity[] = ['unclassified', 'confidential', 'secret'];
  const args: Record<string, unknown>[] = [{}, { path: '/srv/w/outbox/a' }, { path: '/etc/passwd', n: 1.5 }];
  let i = 0;
  for (const agentAttributes of agents)
    for (const t of tools)
      for (const s of sens)
        out.push({
          agentId: `agent-${i % 3}`,
          agentAttributes,
          tool: { ...t, sensitivity: s },
          arguments: args[i % args.length] as Record<string, unknown>,
          workflowId: i % 2 ? 'wf' : null,
          session: { calls: (i++ * 37) % 600, maxSensitivity: sens[i % 3] as Sensitivity },
        });
  return out;
}

describe('referenced attributes', () => {
  it('names every attribute a `.`, `[]` or `has` reads, wherever it stands', () => {
    expect([...(referencedAttributes(BUNDLES['every form of access'] ?? {}) ?? [])].sort()).toEqual([
      'annotations',
      'clearance',
      'destructiveHint',
      'name',
      'sensitivity',
      'server',
      'team',
    ]);
    expect([...(referencedAttributes(EXAMPLE.policies) ?? [])].sort()).toEqual([
      'annotations',
      'arguments',
      'calls',
      'max_sensitivity_level',
      'openWorldHint',
      'path',
      'readOnlyHint',
      'roles',
      'scopes',
      'sensitivity_level',
      'session',
      'team',
      'uri',
    ]);
    expect(referencedAttributes({ all: 'permit (principal, action, resource);' })?.size).toBe(0);
  });

  it('a policy it cannot read leaves every attribute in', () => {
    expect(referencedAttributes({ bad: 'permit (principal, action, resource' })).toBeNull();
    expect(onlyReferenced({ a: 1, b: 2 }, null)).toEqual({ a: 1, b: 2 });
    expect(onlyReferenced({ a: 1, b: 2 }, new Set(['b']))).toEqual({ b: 2 });
  });

  for (const [name, policies] of Object.entries(BUNDLES))
    it(`decides as the request with every attribute: ${name}`, () => {
      const engine = new PolicyEngine(withPolicies(policies), 'enforcing');
      const decisions = new Set<string>();
      for (const r of grid()) {
        const d = engine.evaluate(r);
        expect(d).toEqual(fullRequest(engine, r));
        decisions.add(`${d.decision}:${d.matched.join(',')}:${d.errored.join(',')}`);
      }
      // The grid reaches more than one outcome wherever the policies allow it to.
      if (name !== 'reads nothing') expect(decisions.size).toBeGreaterThan(1);
    });

  it('a value Cedar cannot carry fails the call even in an attribute no policy reads', () => {
    const engine = new PolicyEngine(
      withPolicies({ all: 'permit (principal, action, resource);' }),
      'enforcing',
    );
    const r = (grid()[0] as PolicyRequest) ?? null;
    const d = engine.evaluate({
      ...r,
      agentAttributes: { unread: { __entity: { type: 'Agent', id: 'x' } } },
    });
    expect(d.decision).toBe('deny');
    expect(d.invalid).toMatch(/reserved by Cedar/);
  });
});
