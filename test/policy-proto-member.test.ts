/**
 * A member named "__proto__" (JSON.parse makes it an own member) reaches Cedar like any other
 * member: in tool arguments and in agent attributes. Before, building the Cedar record with a
 * plain object literal turned it into the record's prototype, so `has "__proto__"` was false and
 * a forbid on it let the call through while the upstream received the member.
 */
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { loadBundleDir } from '../src/policy/bundle.js';
import { PolicyEngine, type PolicyRequest, toCedarValue } from '../src/policy/engine.js';
import { REPO_ROOT } from './harness/gateway.js';

const EXAMPLE = loadBundleDir(join(REPO_ROOT, 'examples', 'policy'));

// The example schema with a "__proto__" member declared where the policies read one (requests
// are checked against the schema, and only declared arguments reach the policies).
const SCHEMA = EXAMPLE.schema
  .replace('entity Agent = {', 'entity Agent = {\n  "__proto__"?: String,')
  .replace(
    'arguments: {\n      path?: String,',
    'arguments: {\n      "__proto__"?: { x: Long },\n      path?: String,',
  );

function engine(policies: Record<string, string>): PolicyEngine {
  return new PolicyEngine({ ...EXAMPLE, schema: SCHEMA, policies }, 'enforcing');
}

function request(args: Record<string, unknown>, agentAttributes: Record<string, unknown>): PolicyRequest {
  return {
    agentId: 'agent-1',
    agentAttributes,
    tool: {
      exposedName: 'fs__read_file',
      server: 'fs',
      toolName: 'read_file',
      sensitivity: 'internal',
      annotations: {},
    },
    arguments: args,
    session: { calls: 0, maxSensitivity: 'public' },
    workflowId: null,
  };
}

describe('a "__proto__" member is seen by Cedar', () => {
  const hostile = JSON.parse('{"__proto__": {"x": 1}, "path": "/etc/passwd"}') as Record<string, unknown>;

  it('toCedarValue keeps it as an own member', () => {
    const v = toCedarValue(hostile) as Record<string, unknown>;
    expect(Object.keys(v).sort()).toEqual(['__proto__', 'path']);
    expect(JSON.stringify(v)).toBe('{"__proto__":{"x":1},"path":"/etc/passwd"}');
  });

  it('a forbid on an argument named "__proto__" denies the call', () => {
    const e = engine({
      all: 'permit (principal, action, resource);',
      proto: 'forbid (principal, action, resource) when { context.arguments has "__proto__" };',
    });
    expect(e.evaluate(request(hostile, {})).decision).toBe('deny');
    expect(e.evaluate(request({ path: '/etc/passwd' }, {})).decision).toBe('allow');
  });

  it('a forbid on an agent attribute named "__proto__" denies the call', () => {
    const e = engine({
      all: 'permit (principal, action, resource);',
      proto: 'forbid (principal, action, resource) when { principal has "__proto__" };',
    });
    const attrs = JSON.parse('{"__proto__": "admin", "team": "a"}') as Record<string, unknown>;
    expect(e.evaluate(request({}, attrs)).decision).toBe('deny');
    expect(e.evaluate(request({}, { team: 'a' })).decision).toBe('allow');
  });
});
