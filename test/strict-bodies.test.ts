/**
 * Issue 16 item 5: every JSON body route refuses unknown members, as the config and `_cmcp` do.
 * A typo'd `chalenge` is an error (INVALID_REQUEST naming the member), not a session without a
 * challenge. Real gateway over HTTP.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { Gateway } from '../src/gateway/lifecycle/start.js';
import { cleanup, rest, rpc, startInProcess, type TestConfig, writeConfig } from './harness/gateway.js';

let gw: Gateway;
let cfg: TestConfig;
beforeAll(async () => {
  cfg = await writeConfig({ operators: [{ operator_id: 'ops', token: 'ops-token' }] });
  gw = await startInProcess(cfg);
});
afterAll(async () => {
  await gw.close();
  cleanup(cfg.dir);
});

function expectUnknown(r: { status: number; body: { error: Record<string, unknown> } }, member: string) {
  expect(r.status).toBe(400);
  expect(r.body.error.error_code).toBe('INVALID_REQUEST');
  expect(r.body.error.message).toContain(`unknown member "${member}"`);
  expect(r.body.error.unknown_members).toEqual([member]);
}

describe('strict JSON bodies', () => {
  it('POST /sessions: `chalenge` is refused, and no session is opened', async () => {
    const before = (gw.db.prepare('SELECT COUNT(*) AS n FROM sessions').get() as { n: number }).n;
    const r = await rest(gw.url, 'alice-token', 'POST', '/sessions', { chalenge: 'AAAAAAAAAAAAAAAAAAAAAA' });
    expectUnknown(r, 'chalenge');
    expect(r.body.error.message).toContain('accepted: challenge');
    expect((gw.db.prepare('SELECT COUNT(*) AS n FROM sessions').get() as { n: number }).n).toBe(before);
    // the correct spelling opens a session bound to the challenge
    const ok = await rest(gw.url, 'alice-token', 'POST', '/sessions', {
      challenge: 'AAAAAAAAAAAAAAAAAAAAAA',
    });
    expect(ok.status).toBe(201);
    // an empty body and no body still open a session
    expect((await rest(gw.url, 'alice-token', 'POST', '/sessions', {})).status).toBe(201);
    expect((await rest(gw.url, 'alice-token', 'POST', '/sessions')).status).toBe(201);
    expect((await rest(gw.url, 'alice-token', 'POST', '/sessions', [1])).status).toBe(400);
  });

  it('POST /sessions/{id}/close accepts no members', async () => {
    const s = await rest(gw.url, 'alice-token', 'POST', '/sessions', {});
    const r = await rest(gw.url, 'alice-token', 'POST', `/sessions/${s.body.session_id}/close`, {
      reason: 'x',
    });
    expectUnknown(r, 'reason');
    expect((await gw.sessions.get('alice', s.body.session_id))?.status).toBe('open');
    const ok = await rest(gw.url, 'alice-token', 'POST', `/sessions/${s.body.session_id}/close`, {});
    expect(ok.status).toBe(200);
  });

  it('POST /operator/policy/reload refuses unknown members before anything else', async () => {
    const r = await rest(gw.url, 'ops-token', 'POST', '/operator/policy/reload', {
      files: {},
      signature: 'x',
      signatur: 'y',
    });
    expectUnknown(r, 'signatur');
  });

  it('POST /operator/agents/{id}/block and /unblock', async () => {
    const r = await rest(gw.url, 'ops-token', 'POST', '/operator/agents/alice/block', { reasn: 'typo' });
    expectUnknown(r, 'reasn');
    expect(gw.operator.isBlocked('alice')).toBe(false);
    const u = await rest(gw.url, 'ops-token', 'POST', '/operator/agents/alice/unblock', { now: true });
    expectUnknown(u, 'now');
    const ok = await rest(gw.url, 'ops-token', 'POST', '/operator/agents/bob/block', { reason: 'test' });
    expect(ok.status).toBe(200);
    expect((await rest(gw.url, 'ops-token', 'POST', '/operator/agents/bob/unblock', {})).status).toBe(200);
  });

  it('POST /mcp: the JSON-RPC request envelope has only jsonrpc, id, method, params', async () => {
    const r = await rpc(gw.url, 'alice-token', { jsonrpc: '2.0', id: 7, method: 'tools/list', prams: {} });
    expect(r.status).toBe(400);
    expect(r.body).toMatchObject({
      id: 7,
      error: { code: -32600, data: { error_code: 'INVALID_REQUEST', unknown_members: ['prams'] } },
    });
    expect(r.body.error.message).toContain('JSON-RPC request: unknown member "prams"');
    // a refused tools/call still ends in its terminal tool_call entry
    const before = gw.chain.entries('gateway').length;
    const c = await rpc(gw.url, 'alice-token', {
      jsonrpc: '2.0',
      id: 8,
      method: 'tools/call',
      params: { name: 'x.y' },
      _cmcp: { session_id: 'misplaced' },
    });
    expect(c.body.error.data.error_code).toBe('INVALID_REQUEST');
    const added = gw.chain.entries('gateway').slice(before);
    expect(added.some((e) => e.entry_type === 'tool_call' && e.error_code === 'INVALID_REQUEST')).toBe(true);
    expect((await rpc(gw.url, 'alice-token', { jsonrpc: '2.0', id: 9, method: 'ping' })).body.result).toEqual(
      {},
    );
  });
});
