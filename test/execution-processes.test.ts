/**
 * execution_id across OS processes (docs/spec/execution.md#admission; C-EXEC-1, C-EXEC-2): two `cmcp start` processes sharing one
 * database file race on the same key (C-EXEC-1, C-EXEC-2); SIGKILL while the upstream holds
 * an admitted call, then restart and recovery; an injected terminal-commit fault. The
 * counting upstream lives in this test process and outlives the gateways.
 */
import { existsSync, mkdtempSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import Database from 'better-sqlite3';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { type CountingServer, startCountingServer } from './fixtures/counting-server.js';
import {
  type ChildGateway,
  cleanup,
  freePort,
  REPO_ROOT,
  rest,
  rpc,
  startChild,
  writeConfig,
} from './harness/gateway.js';

let up: CountingServer;
const dirs: string[] = [];
const children: ChildGateway[] = [];

beforeAll(async () => {
  if (!existsSync(join(REPO_ROOT, 'dist', 'src', 'cli', 'main.js')))
    throw new Error('dist/ is missing: run `npm run build` first');
  up = await startCountingServer();
});
afterAll(async () => {
  for (const c of children) await c.stop('SIGKILL');
  await up?.close();
  for (const d of dirs) cleanup(d);
});

async function gatewayOn(
  dir: string,
  instance: string,
  env: Record<string, string> = {},
  timeoutMs = 10_000,
) {
  const cfg = await writeConfig({
    dir,
    port: await freePort(),
    upstreams: [{ name: 'c', transport: 'http', url: up.url, timeout_ms: timeoutMs }],
  });
  // Same database for every instance in `dir`; distinct instance ids (recovery scope).
  const { readFileSync, writeFileSync } = await import('node:fs');
  const file = join(dir, `${instance}.yaml`);
  writeFileSync(file, `instance_id: ${instance}\n${readFileSync(cfg.file, 'utf8')}`);
  const child = await startChild({ ...cfg, file }, env);
  children.push(child);
  return { child, dbPath: cfg.dbPath };
}

function callAt(url: string, id: number, name: string, args: Record<string, unknown>, executionId: string) {
  return rpc(url, 'alice-token', {
    jsonrpc: '2.0',
    id,
    method: 'tools/call',
    params: { name, arguments: args, _cmcp: { execution_id: executionId } },
  });
}

const uniq = (p: string) => `${p}-${Math.random().toString(36).slice(2)}`;

describe('two gateway processes sharing one database', () => {
  let a: ChildGateway;
  let b: ChildGateway;
  let dbPath: string;
  beforeAll(async () => {
    const dir = mkdtempSync(join(tmpdir(), 'cmcp-2proc-'));
    dirs.push(dir);
    const ga = await gatewayOn(dir, 'gw-a');
    const gb = await gatewayOn(dir, 'gw-b');
    a = ga.child;
    b = gb.child;
    dbPath = ga.dbPath;
  });

  for (const n of [2, 20]) {
    it(`C-EXEC-1: ${n} concurrent identical calls split across two processes reach the upstream once`, async () => {
      const x = uniq(`p-c1-${n}`);
      const marker = uniq('m');
      const rs = await Promise.all(
        Array.from({ length: n }, (_, i) =>
          callAt(i % 2 ? b.url : a.url, i, 'c.hold', { ms: 1500, marker }, x),
        ),
      );
      expect(up.invocations.filter((v) => v.args.marker === marker)).toHaveLength(1);
      expect(rs.filter((r) => r.body.result)).toHaveLength(1);
      expect(rs.filter((r) => r.body.error?.data.error_code === 'EXECUTION_IN_FLIGHT')).toHaveLength(n - 1);
      const again = await callAt(a.url, 99, 'c.hold', { ms: 1500, marker }, x);
      expect(again.body.error.data.error_code).toBe('EXECUTION_REPLAY_REFUSED');
      const again2 = await callAt(b.url, 99, 'c.hold', { ms: 1500, marker }, x);
      expect(again2.body.error.data.error_code).toBe('EXECUTION_REPLAY_REFUSED');
    });
  }

  it('C-EXEC-2: another request under the same key collides in the other process while the first runs', async () => {
    const x = uniq('p-c2');
    const marker = uniq('m');
    const first = callAt(a.url, 1, 'c.hold', { ms: 800, marker }, x);
    await new Promise((r) => setTimeout(r, 200));
    const other = await callAt(b.url, 2, 'c.hold', { ms: 801, marker }, x);
    expect(other.body.error.data.error_code).toBe('EXECUTION_COLLISION');
    const reordered = await callAt(b.url, 3, 'c.hold', { marker, ms: 800 }, x);
    expect(reordered.body.error.data.error_code).toBe('EXECUTION_IN_FLIGHT');
    expect((await first).body.result).toBeDefined();
    expect(up.invocations.filter((v) => v.args.marker === marker)).toHaveLength(1);
  });

  it('a session belongs to the instance that opened it: the other instance neither uses nor closes it', async () => {
    const sid = (await rest(b.url, 'alice-token', 'POST', '/sessions', {})).body.session_id;
    const use = await rpc(a.url, 'alice-token', {
      jsonrpc: '2.0',
      id: 1,
      method: 'tools/call',
      params: { name: 'c.record', arguments: {}, _cmcp: { session_id: sid } },
    });
    expect(use.body.error.data.error_code).toBe('UNKNOWN_SESSION');
    expect((await rest(a.url, 'alice-token', 'POST', `/sessions/${sid}/close`)).status).toBe(404);
    const claim = await rest(b.url, 'alice-token', 'POST', `/sessions/${sid}/close`);
    expect(claim.body.evidence.reason).not.toBe('GATEWAY_KEY_ROTATED');
  });

  it('C-CHAIN-1: both processes append to the shared gateway chain without forking it', () => {
    const db = new Database(dbPath, { readonly: true });
    const rows = db
      .prepare<[], { sequence_number: number; prev_entry_hash: string; entry_hash: string }>(
        "SELECT sequence_number, prev_entry_hash, entry_hash FROM audit_entries WHERE chain_id = 'gateway' ORDER BY sequence_number",
      )
      .all();
    db.close();
    expect(rows.length).toBeGreaterThanOrEqual(2);
    rows.forEach((r, i) => {
      expect(r.sequence_number).toBe(i);
      expect(r.prev_entry_hash).toBe(i === 0 ? 'genesis' : rows[i - 1]?.entry_hash);
    });
  });
});

describe('process restart', () => {
  it('SIGKILL while the upstream holds a call without execution_id: its attempt ends in one outcome_unknown entry in its session chain, counted by the claim', async () => {
    const dir = mkdtempSync(join(tmpdir(), 'cmcp-kill-noid-'));
    dirs.push(dir);
    const { child, dbPath } = await gatewayOn(dir, 'gw-n');
    const marker = uniq('m');
    const pending = rpc(child.url, 'alice-token', {
      jsonrpc: '2.0',
      id: 1,
      method: 'tools/call',
      params: { name: 'c.hold', arguments: { ms: 20_000, marker } },
    }).catch(() => null);
    for (let i = 0; i < 100 && !up.invocations.some((v) => v.args.marker === marker); i++)
      await new Promise((r) => setTimeout(r, 50));
    expect(up.invocations.filter((v) => v.args.marker === marker)).toHaveLength(1);
    await child.stop('SIGKILL');
    await pending;
    let db = new Database(dbPath, { readonly: true });
    const open = db
      .prepare<[], { call_id: string; session_id: string; method: string; execution_id: string | null }>(
        'SELECT call_id, session_id, method, execution_id FROM call_attempts',
      )
      .all();
    db.close();
    expect(open).toHaveLength(1);
    expect(open[0]).toMatchObject({ method: 'tools/call', execution_id: null });

    const { child: again } = await gatewayOn(dir, 'gw-n');
    db = new Database(dbPath, { readonly: true });
    const entries = db
      .prepare<[string], { chain_id: string; canonical: string }>(
        "SELECT chain_id, canonical FROM audit_entries WHERE entry_type = 'tool_call' AND json_extract(canonical, '$.call_id') = ?",
      )
      .all(open[0]!.call_id);
    expect(db.prepare('SELECT COUNT(*) AS n FROM call_attempts').get()).toEqual({ n: 0 });
    db.close();
    expect(entries).toHaveLength(1);
    expect(entries[0]!.chain_id).toBe(open[0]!.session_id);
    expect(JSON.parse(entries[0]!.canonical)).toMatchObject({
      disposition: 'outcome_unknown',
      error_code: 'CALL_INTERRUPTED',
      execution_id: null,
      tool_name: 'c.hold',
      server_identity: 'c',
    });
    // The restart closes the earlier process's session (in batches, finishing once the listener
    // is open: until then the claim is 409 SESSION_OPEN); its claim counts the interrupted call.
    const claimPath = `/sessions/${open[0]!.session_id}/claim`;
    let claim = await rest(again.url, 'alice-token', 'GET', claimPath);
    for (let i = 0; claim.status === 409 && i < 100; i++) {
      expect(claim.body.error.error_code).toBe('SESSION_OPEN');
      await new Promise((r) => setTimeout(r, 50));
      claim = await rest(again.url, 'alice-token', 'GET', claimPath);
    }
    expect(claim.status).toBe(200);
    expect(claim.body.counters).toMatchObject({ tool_calls: 1, faulted: 1 });
    up.release();
    await again.stop();
  });

  it('SIGKILL while the upstream holds an admitted call: sealed outcome_unknown, retry refused, one invocation', async () => {
    const dir = mkdtempSync(join(tmpdir(), 'cmcp-kill-'));
    dirs.push(dir);
    const { child, dbPath } = await gatewayOn(dir, 'gw-k');
    const x = uniq('kill');
    const marker = uniq('m');
    const pending = callAt(child.url, 1, 'c.hold', { ms: 20_000, marker }, x).catch(() => null);
    for (let i = 0; i < 100 && !up.invocations.some((v) => v.args.marker === marker); i++)
      await new Promise((r) => setTimeout(r, 50));
    expect(up.invocations.filter((v) => v.args.marker === marker)).toHaveLength(1);
    await child.stop('SIGKILL');
    await pending;
    const before = new Database(dbPath, { readonly: true });
    expect(before.prepare('SELECT state FROM executions WHERE execution_id = ?').get(x)).toEqual({
      state: 'in_flight',
    });
    before.close();

    const { child: again } = await gatewayOn(dir, 'gw-k');
    const db = new Database(dbPath, { readonly: true });
    expect(db.prepare('SELECT state FROM executions WHERE execution_id = ?').get(x)).toEqual({
      state: 'outcome_unknown',
    });
    // The one terminal entry is a tool_call in the session chain the call ran in (its claim counts it).
    const sealed = db
      .prepare<[string], { canonical: string; entry_hash: string; chain_id: string; session_id: string }>(
        "SELECT canonical, entry_hash, chain_id, session_id FROM audit_entries WHERE execution_id = ? AND entry_type IN ('tool_call', 'execution_sealed')",
      )
      .all(x);
    db.close();
    expect(sealed).toHaveLength(1);
    expect(sealed[0]!.chain_id).toBe(sealed[0]!.session_id);
    expect(JSON.parse(sealed[0]!.canonical)).toMatchObject({
      entry_type: 'tool_call',
      disposition: 'outcome_unknown',
      error_code: 'CALL_INTERRUPTED',
    });
    const retry = await callAt(again.url, 2, 'c.hold', { ms: 20_000, marker }, x);
    expect(retry.body.error.data).toMatchObject({
      error_code: 'EXECUTION_REPLAY_REFUSED',
      execution_state: 'outcome_unknown',
      terminal_entry_hash: sealed[0]!.entry_hash,
    });
    const st = await rest(again.url, 'alice-token', 'GET', `/executions/${x}`);
    expect(st.body.state).toBe('outcome_unknown');
    expect(up.invocations.filter((v) => v.args.marker === marker)).toHaveLength(1);
    up.release();
    await again.stop();
  });

  it('terminal persistence failure: a fault, no audit entry claims an outcome, row in_flight, sealed after restart', async () => {
    const dir = mkdtempSync(join(tmpdir(), 'cmcp-fault-'));
    dirs.push(dir);
    const { child, dbPath } = await gatewayOn(dir, 'gw-f', { CMCP_FAULT_INJECT: 'terminal_commit' });
    const x = uniq('fault');
    const marker = uniq('m');
    const r = await callAt(child.url, 1, 'c.record', { a: marker }, x);
    expect(r.body.error.data).toMatchObject({
      error_code: 'AUDIT_WRITE_FAILED',
      execution_id: x,
      execution_state: 'in_flight',
    });
    expect(r.body.error.code).toBe(-32040);
    let db = new Database(dbPath, { readonly: true });
    expect(db.prepare('SELECT state FROM executions WHERE execution_id = ?').get(x)).toEqual({
      state: 'in_flight',
    });
    // No tool_call entry records an outcome for this execution (the transaction rolled back whole).
    expect(
      db
        .prepare(
          "SELECT COUNT(*) AS n FROM audit_entries WHERE execution_id = ? AND entry_type = 'tool_call'",
        )
        .get(x),
    ).toEqual({ n: 0 });
    db.close();
    await child.stop('SIGKILL');
    const { child: again } = await gatewayOn(dir, 'gw-f');
    db = new Database(dbPath, { readonly: true });
    expect(db.prepare('SELECT state FROM executions WHERE execution_id = ?').get(x)).toEqual({
      state: 'outcome_unknown',
    });
    expect(
      db
        .prepare(
          "SELECT COUNT(*) AS n FROM audit_entries WHERE execution_id = ? AND entry_type = 'tool_call' AND chain_id = session_id AND json_extract(canonical, '$.disposition') = 'outcome_unknown'",
        )
        .get(x),
    ).toEqual({ n: 1 });
    expect(
      db
        .prepare(
          "SELECT COUNT(*) AS n FROM audit_entries WHERE execution_id = ? AND entry_type = 'execution_sealed'",
        )
        .get(x),
    ).toEqual({ n: 0 });
    db.close();
    const retry = await callAt(again.url, 2, 'c.record', { a: marker }, x);
    expect(retry.body.error.data.error_code).toBe('EXECUTION_REPLAY_REFUSED');
    expect(up.invocations.filter((v) => v.args.a === marker)).toHaveLength(1);
    await again.stop();
  });
});
