/**
 * Ingress of a tools/call (src/call/ingress.ts) is pure: the same params always give the same
 * request or refusal, with its scope (gateway chain before a session can be named, session
 * chain after) and what was read before it.
 */
import { jcsDigest } from '@cmcp/verify/formats';
import { describe, expect, it } from 'vitest';
import { readCallParams } from '../src/call/ingress.js';

function refusal(params: unknown) {
  const r = readCallParams(params);
  if (r.kind !== 'refused') throw new Error(`expected a refusal, got ${JSON.stringify(r)}`);
  return r;
}

describe('tools/call ingress', () => {
  it('reads a full request', () => {
    const r = readCallParams({
      name: 'c.record',
      arguments: { a: 1 },
      _cmcp: { session_id: 's-1', workflow_id: 'w', execution_id: 'x-1', action_timestamp: 't' },
    });
    expect(r).toEqual({
      kind: 'request',
      request: {
        sessionId: 's-1',
        workflowId: 'w',
        toolName: 'c.record',
        arguments: { a: 1 },
        requestPayloadHash: jcsDigest({ name: 'c.record', arguments: { a: 1 } }),
        executionId: 'x-1',
        actionTimestamp: 't',
      },
    });
  });

  it('absent arguments stay absent (hashed as {})', () => {
    const r = readCallParams({ name: 't' });
    expect(r.kind === 'request' && r.request.arguments).toBeUndefined();
    expect(r.kind === 'request' && r.request.requestPayloadHash).toBe(
      jcsDigest({ name: 't', arguments: {} }),
    );
  });

  it('an unreadable _cmcp envelope is refused in the gateway chain, before a session is named', () => {
    for (const [params, message] of [
      [[], 'params must be an object'],
      [{ name: 't', _cmcp: [] }, '_cmcp must be an object'],
      [{ name: 't', _cmcp: { other: 1 } }, 'unknown _cmcp member other'],
      [{ name: 't', _cmcp: { session_id: 'has space' } }, '_cmcp.session_id must be a string'],
      [
        { name: 't', _cmcp: { session_id: 's', workflow_id: '' } },
        '_cmcp.workflow_id must be a string of 1–200 characters',
      ],
    ] as const) {
      const r = refusal(params);
      expect([r.scope, r.refusal.code, r.refusal.message]).toEqual(['gateway', 'INVALID_PARAMS', message]);
    }
  });

  it('the rest is refused in the session chain, in order, with what was read before', () => {
    const badId = refusal({ name: 't', _cmcp: { session_id: 's', execution_id: '' } });
    expect([badId.scope, badId.refusal.code, badId.sessionId, badId.toolName]).toEqual([
      'session',
      'EXECUTION_ID_INVALID',
      's',
      null,
    ]);
    const badName = refusal({ name: '', _cmcp: { workflow_id: 'w' } });
    expect([badName.refusal.message, badName.workflowId]).toEqual([
      'name must be a string of 1–256 characters',
      'w',
    ]);
    // The whole params are checked for JCS before the name is read.
    const badJson = refusal({ name: 't', arguments: { n: 2 ** 60 } });
    expect([badJson.refusal.code, badJson.toolName, badJson.requestPayloadHash]).toEqual([
      'INVALID_PARAMS',
      null,
      null,
    ]);
    expect(badJson.refusal.message).toContain('/params/arguments/n');
    const badArgs = refusal({ name: 't', arguments: [1] });
    expect([badArgs.refusal.message, badArgs.toolName]).toEqual(['arguments must be an object', 't']);
    const badTs = refusal({ name: 't', _cmcp: { action_timestamp: 5 } });
    expect([badTs.refusal.message, badTs.requestPayloadHash]).toEqual([
      '_cmcp.action_timestamp must be a string of at most 64 characters',
      jcsDigest({ name: 't', arguments: {} }),
    ]);
  });
});
