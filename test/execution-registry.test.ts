/**
 * execution_id end to end in one gateway process against a real counting MCP server:
 * ingress (table-driven), scope, admission classes (C-EXEC-1, C-EXEC-2 in one process),
 * replay after each terminal state, refusal data, GET /executions, and the claim that
 * never enumerates execution ids. Cross-process races, SIGKILL and persistence faults are in
 * execution-processes.test.ts.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { Gateway } from '../src/gateway/lifecycle/start.js';
import { type CountingServer, startCountingServer } from './fixtures/counting-server.js';
import { cleanup, rest, rpc, startInProcess, type TestConfig, writeConfig } from './harness/gateway.js';

let up: CountingServer;
let cfg: TestConfig;
let gw: Gateway;

beforeAll(async () => {
  up = await startCountingServer();
  cfg = await writeConfig({
    upstreams: [
      { name: 'c', transport: 'http', url: up.url, timeout_ms: 10_000 },
      // Same server, short gateway timeout: for outcome_unknown.
      { name: 'short', transport: 'http', url: up.url, timeout_ms: 400 },
    ],
  });
  gw = await startInProcess(cfg);
});
afterAll(async () => {
  await gw?.close();
  await up?.close();
  cleanup(cfg.dir);
});

let nextId = 0;
function call(token: string, name: string, args: Record<string, unknown>, cmcp?: Record<string, unknown>) {
  return rpc(gw.url, token, {
    jsonrpc: '2.0',
    id: ++nextId,
    method: 'tools/call',
    params: { name, arguments: args, ...(cmcp ? { _cmcp: cmcp } : {}) },
  });
}
const count = (pred: (a: Record<string, unknown>) => boolean) =>
  up.invocations.filter((i) => pred(i.args)).length;
const uniq = (p: string) => `${p}-${Math.random().toString(36).slice(2)}`;

describe('ingress (table-driven)', () => {
  const cases: [string, unknown][] = [
    ['number', 42],
    ['boolean', true],
    ['null', null],
    ['object', { a: 1 }],
    ['array', ['x']],
    ['empty string', ''],
    ['201 characters', 'x'.repeat(201)],
    ['space', 'has space'],
    ['tab', 'has\ttab'],
    ['newline', 'has\nnewline'],
    ['non-ASCII', 'café'],
    ['DEL 0x7F', 'x\x7f'],
    ['lone surrogate', '\uD800'],
  ];
  for (const [label, value] of cases) {
    it(`refuses ${label} as EXECUTION_ID_INVALID before any reservation, audited with execution_id null`, async () => {
      const marker = uniq('ingress');
      const r = await call('alice-token', 'c.record', { a: marker }, { execution_id: value });
      expect(r.body.error.data.error_code).toBe('EXECUTION_ID_INVALID');
      expect(r.body.error.code).toBe(-32050);
      expect(count((a) => a.a === marker)).toBe(0);
      const ev = r.body.error.data.evidence;
      const row = gw.db
        .prepare<[string], { canonical: string }>('SELECT canonical FROM audit_entries WHERE entry_hash = ?')
        .get(ev.entry_hash);
      expect(row?.canonical).toContain('"execution_id":null');
      expect(row?.canonical).toContain('"error_code":"EXECUTION_ID_INVALID"');
      expect(gw.db.prepare('SELECT COUNT(*) AS n FROM executions WHERE call_id = ?').get(ev.call_id)).toEqual(
        { n: 0 },
      );
    });
  }
  it('refuses 2^53+1 (JSON text) as EXECUTION_ID_INVALID', async () => {
    const r = await rpc(
      gw.url,
      'alice-token',
      '{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"c.record","arguments":{},"_cmcp":{"execution_id":9007199254740993}}}',
    );
    expect(r.body.error.data.error_code).toBe('EXECUTION_ID_INVALID');
  });
  const valid: [string, string][] = [
    ['1 character', '!'],
    ['200 characters', `${'~'.repeat(199)}z`],
    ['all printable ASCII', '!"#$%&\'()*+,-./0123456789:;<=>?@AZ[\\]^_`az{|}~'],
  ];
  for (const [label, value] of valid) {
    it(`accepts ${label} and correlates it`, async () => {
      const r = await call('alice-token', 'c.record', { a: uniq('valid') }, { execution_id: value });
      expect(r.body.result).toBeDefined();
      expect((await gw.executions.get('alice', value))?.state).toBe('completed');
    });
  }
  it('an absent key means no correlation', async () => {
    const r = await call('alice-token', 'c.record', { a: uniq('absent') });
    const ev = r.body.result._meta['dev.cmcp/evidence'];
    expect(gw.db.prepare('SELECT COUNT(*) AS n FROM executions WHERE call_id = ?').get(ev.call_id)).toEqual({
      n: 0,
    });
  });
});

describe('scope', () => {
  it('two agents using the same value never collide, and cannot read each other', async () => {
    const x = uniq('shared');
    const a = await call('alice-token', 'c.record', { a: 'alice' }, { execution_id: x });
    const b = await call('bob-token', 'c.record', { a: 'bob' }, { execution_id: x });
    expect(a.body.result).toBeDefined();
    expect(b.body.result).toBeDefined();
    const mine = await rest(gw.url, 'alice-token', 'GET', `/executions/${encodeURIComponent(x)}`);
    expect(mine.status).toBe(200);
    expect(mine.body.call_id).toBe(a.body.result._meta['dev.cmcp/evidence'].call_id);
    const y = uniq('alice-only');
    await call('alice-token', 'c.record', { a: 1 }, { execution_id: y });
    const theirs = await rest(gw.url, 'bob-token', 'GET', `/executions/${encodeURIComponent(y)}`);
    expect(theirs.status).toBe(404);
    expect(theirs.body.error.error_code).toBe('EXECUTION_NOT_FOUND');
  });
});

describe('C-EXEC-1 concurrent same key (one process)', () => {
  for (const n of [2, 20]) {
    it(`${n} concurrent identical calls: exactly one upstream execution, the rest in flight`, async () => {
      const x = uniq(`c1-${n}`);
      const marker = uniq('m');
      const rs = await Promise.all(
        Array.from({ length: n }, () =>
          call('alice-token', 'c.hold', { ms: 1000, marker }, { execution_id: x }),
        ),
      );
      expect(up.invocations.filter((i) => i.args.marker === marker)).toHaveLength(1);
      const ok = rs.filter((r) => r.body.result);
      const inFlight = rs.filter((r) => r.body.error?.data.error_code === 'EXECUTION_IN_FLIGHT');
      expect(ok).toHaveLength(1);
      expect(inFlight).toHaveLength(n - 1);
      for (const r of inFlight) {
        expect(r.body.error.code).toBe(-32052);
        expect(r.body.error.data).toMatchObject({ execution_id: x, execution_state: 'in_flight' });
        expect(r.body.error.data.call_id).toMatch(/^[0-9a-f-]{36}$/);
      }
      const again = await call('alice-token', 'c.hold', { ms: 1000, marker }, { execution_id: x });
      expect(again.body.error.data.error_code).toBe('EXECUTION_REPLAY_REFUSED');
    });
  }
  it('after the first call fails upstream, the id stays refused (terminal)', async () => {
    const x = uniq('c1-fail');
    const before = up.invocations.filter((i) => i.tool === 'hold').length;
    // The gateway times out (400 ms) before the held call returns: outcome_unknown.
    const rs = await Promise.all(
      Array.from({ length: 5 }, () => call('alice-token', 'short.hold', { ms: 1500 }, { execution_id: x })),
    );
    expect(rs.filter((r) => r.body.error?.data.error_code === 'UPSTREAM_FAILED')).toHaveLength(1);
    expect(rs.filter((r) => r.body.error?.data.error_code === 'EXECUTION_IN_FLIGHT')).toHaveLength(4);
    const retry = await call('alice-token', 'short.hold', { ms: 1500 }, { execution_id: x });
    expect(retry.body.error.data.error_code).toBe('EXECUTION_REPLAY_REFUSED');
    expect(up.invocations.filter((i) => i.tool === 'hold').length - before).toBe(1);
    up.release();
  });
});

describe('C-EXEC-2 same key, other request', () => {
  it('other arguments and other tool collide even while the first runs; reordered keys are the same request', async () => {
    const x = uniq('c2');
    const first = call('alice-token', 'c.hold', { ms: 300 }, { execution_id: x });
    await new Promise((r) => setTimeout(r, 50));
    const other = await call('alice-token', 'c.hold', { ms: 301 }, { execution_id: x });
    expect(other.body.error.data.error_code).toBe('EXECUTION_COLLISION');
    expect(other.body.error.code).toBe(-32051);
    const otherTool = await call('alice-token', 'c.record', { ms: 300 }, { execution_id: x });
    expect(otherTool.body.error.data.error_code).toBe('EXECUTION_COLLISION');
    await first;
    const y = uniq('c2-order');
    const a = await call('alice-token', 'c.record', { a: 1, b: { x: 1, y: 2 } }, { execution_id: y });
    expect(a.body.result).toBeDefined();
    const b = await call('alice-token', 'c.record', { b: { y: 2, x: 1 }, a: 1 }, { execution_id: y });
    expect(b.body.error.data.error_code).toBe('EXECUTION_REPLAY_REFUSED');
    const c = await call('alice-token', 'c.record', { a: 2, b: { y: 2, x: 1 } }, { execution_id: y });
    expect(c.body.error.data.error_code).toBe('EXECUTION_COLLISION');
  });
});

describe('replay after each terminal state', () => {
  it('completed: refused with the terminal entry hash, no second invocation', async () => {
    const x = uniq('done');
    const marker = uniq('m');
    const r1 = await call('alice-token', 'c.record', { a: marker }, { execution_id: x });
    const terminal = r1.body.result._meta['dev.cmcp/evidence'].entry_hash;
    const r2 = await call('alice-token', 'c.record', { a: marker }, { execution_id: x });
    expect(r2.body.error.data).toMatchObject({
      error_code: 'EXECUTION_REPLAY_REFUSED',
      execution_id: x,
      execution_state: 'completed',
      terminal_entry_hash: terminal,
    });
    expect(r2.body.error.code).toBe(-32053);
    expect(count((a) => a.a === marker)).toBe(1);
    const st = await rest(gw.url, 'alice-token', 'GET', `/executions/${x}`);
    expect(st.body).toMatchObject({ state: 'completed', terminal_entry_hash: terminal });
    expect(st.body.created_at).toBeTruthy();
    expect(st.body.updated_at).toBeTruthy();
    // The audit disposition and the registry state are the same word.
    const row = gw.db
      .prepare<[string], { canonical: string }>('SELECT canonical FROM audit_entries WHERE entry_hash = ?')
      .get(terminal);
    expect(JSON.parse(row!.canonical).disposition).toBe('completed');
    // The refusal itself is audited under the asserted execution_id.
    const refusal = gw.db
      .prepare<[string], { canonical: string }>('SELECT canonical FROM audit_entries WHERE entry_hash = ?')
      .get(r2.body.error.data.evidence.entry_hash);
    expect(JSON.parse(refusal!.canonical)).toMatchObject({
      execution_id: x,
      error_code: 'EXECUTION_REPLAY_REFUSED',
      disposition: 'refused',
    });
  });

  it('outcome_unknown (upstream holds the call past the timeout): refused, no second invocation', async () => {
    const x = uniq('unknown');
    const before = up.invocations.filter((i) => i.tool === 'hold').length;
    const r1 = await call('alice-token', 'short.hold', { ms: 2000 }, { execution_id: x });
    expect(r1.body.error.data).toMatchObject({
      error_code: 'UPSTREAM_FAILED',
      execution_state: 'outcome_unknown',
    });
    const r2 = await call('alice-token', 'short.hold', { ms: 2000 }, { execution_id: x });
    expect(r2.body.error.data).toMatchObject({
      error_code: 'EXECUTION_REPLAY_REFUSED',
      execution_state: 'outcome_unknown',
    });
    expect(up.invocations.filter((i) => i.tool === 'hold').length - before).toBe(1);
    up.release();
  });
});

describe('not_attempted', () => {
  it('upstream unreachable: not_attempted, and a retry is refused with no invocation', async () => {
    const down = await startCountingServer();
    const c2 = await writeConfig({ upstreams: [{ name: 'd', transport: 'http', url: down.url }] });
    const g2 = await startInProcess(c2);
    try {
      await down.close();
      const x = uniq('na');
      const r1 = await rpc(g2.url, 'alice-token', {
        jsonrpc: '2.0',
        id: 1,
        method: 'tools/call',
        params: { name: 'd.record', arguments: { a: 1 }, _cmcp: { execution_id: x } },
      });
      expect(r1.body.error.data).toMatchObject({
        error_code: 'UPSTREAM_UNAVAILABLE',
        execution_state: 'not_attempted',
      });
      const r2 = await rpc(g2.url, 'alice-token', {
        jsonrpc: '2.0',
        id: 2,
        method: 'tools/call',
        params: { name: 'd.record', arguments: { a: 1 }, _cmcp: { execution_id: x } },
      });
      expect(r2.body.error.data).toMatchObject({
        error_code: 'EXECUTION_REPLAY_REFUSED',
        execution_state: 'not_attempted',
      });
      expect(down.invocations).toHaveLength(0);
      expect((await g2.executions.get('alice', x))?.state).toBe('not_attempted');
    } finally {
      await g2.close();
      cleanup(c2.dir);
    }
  });
});

describe('claims and bundles', () => {
  it('the claim never enumerates execution ids; the bundle carries them', async () => {
    const s = await rest(gw.url, 'alice-token', 'POST', '/sessions', {});
    const sid = s.body.session_id;
    const x = uniq('claim-secret-exec');
    await call('alice-token', 'c.record', { a: 1 }, { execution_id: x, session_id: sid });
    await call('alice-token', 'c.record', { a: 1 }, { execution_id: x, session_id: sid });
    const claim = await rest(gw.url, 'alice-token', 'POST', `/sessions/${sid}/close`);
    expect(claim.status).toBe(200);
    expect(JSON.stringify(claim.body)).not.toContain(x);
    expect(claim.body.transcript).toHaveLength(2);
    const bundle = await rest(gw.url, 'alice-token', 'GET', `/sessions/${sid}/audit`);
    const withX = bundle.body.entries.filter(
      (e: { canonical: string }) => JSON.parse(e.canonical).execution_id === x,
    );
    expect(withX).toHaveLength(2);
  });
});
