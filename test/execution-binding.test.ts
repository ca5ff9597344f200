/** Execution Action Binding v1: the published vectors and the tools/call adapter (docs/spec/execution.md#action-binding). */
import { readFileSync } from 'node:fs';
import { describe, expect, it } from 'vitest';
import {
  assertRenderedBinding,
  bindingsEqual,
  computeBinding,
  toolCallBinding,
} from '../src/execution/binding.js';
import { hasVectors, vectorPath } from './harness/vectors.js';

interface Vector {
  id: string;
  preimage: Record<string, unknown>;
  jcs_utf8?: string;
  algorithm: string;
  binding?: string;
  expected: string;
}

describe.skipIf(!hasVectors())('Execution Action Binding v1 vectors', () => {
  const file = JSON.parse(
    readFileSync(vectorPath('execution-binding-v1', 'execution-action-binding-v1-vectors.json'), 'utf8'),
  ) as {
    vectors: Vector[];
  };
  const expected = JSON.parse(readFileSync(vectorPath('execution-binding-v1', 'expected.json'), 'utf8')) as {
    vectors: Record<string, { expected: string; binding_recomputed?: string }>;
  };

  it('has the six digest vectors', () => {
    expect(file.vectors.filter((v) => v.id.startsWith('EAB-0')).length).toBe(6);
  });

  for (const v of file.vectors.filter((x) => x.id.startsWith('EAB-0'))) {
    it(`${v.id}: ${v.expected}`, () => {
      const exp = expected.vectors[v.id];
      expect(exp).toBeDefined();
      if (v.expected === 'accept') {
        const b = computeBinding(v.preimage, v.algorithm);
        expect(b).toBe(v.binding);
        expect(b).toBe(exp?.binding_recomputed);
        assertRenderedBinding(b);
      } else {
        expect(() => computeBinding(v.preimage, v.algorithm)).toThrow();
      }
    });
  }
});

describe('v1 preimage rules', () => {
  const good = {
    domain: 'cmcp.execution-action-binding',
    version: 1,
    agent_id: 'a',
    action_type: 't',
    action_scope: 's',
    action_timestamp: '',
  };
  it('refuses a seventh member, a missing member, version "1", and malformed renderings', () => {
    expect(() => computeBinding({ ...good, extra: 1 })).toThrow(/exactly/);
    const { action_scope: _s, ...missing } = good;
    expect(() => computeBinding(missing)).toThrow(/exactly/);
    expect(() => computeBinding({ ...good, version: '1' })).toThrow(/version/);
    expect(() => computeBinding(good, 'sha512')).toThrow(/unsupported/);
    expect(() => assertRenderedBinding(computeBinding(good).toUpperCase())).toThrow();
    expect(() => assertRenderedBinding(computeBinding(good).slice(7))).toThrow();
  });
  it('the same preimage under sha256 and sha384 is two different bindings', () => {
    expect(bindingsEqual(computeBinding(good, 'sha256'), computeBinding(good, 'sha384'))).toBe(false);
  });
});

describe('tools/call adapter', () => {
  const base = {
    agentId: 'alice',
    serverIdentity: 'fs',
    toolName: 'fs.write_file',
    arguments: { path: '/a', content: 'x', n: { b: 1, a: 2 } },
    actionTimestamp: null,
  };
  const b0 = toolCallBinding(base);
  it('arguments differing only in key order bind identically', () => {
    expect(toolCallBinding({ ...base, arguments: { n: { a: 2, b: 1 }, content: 'x', path: '/a' } })).toBe(b0);
  });
  it('a different tool, upstream, argument value, agent or action timestamp binds differently', () => {
    for (const other of [
      { ...base, toolName: 'fs.read_file' },
      { ...base, serverIdentity: 'fs2' },
      { ...base, arguments: { ...base.arguments, content: 'y' } },
      { ...base, agentId: 'bob' },
      { ...base, actionTimestamp: '2026-11-30T00:00:00Z' },
    ]) {
      expect(bindingsEqual(toolCallBinding(other), b0)).toBe(false);
    }
  });
  it('is rendered sha256:<64 hex>', () => {
    expect(b0).toMatch(/^sha256:[0-9a-f]{64}$/);
  });
});
