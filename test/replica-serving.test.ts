/**
 * `cmcp start` on PostgreSQL (docs/replicas.md, issue 15 items 1–3): three replicas as real
 * `cmcp start` processes on one real throw-away PostgreSQL (testing/postgres.ts), in front of a
 * real MCP upstream in this process that counts its invocations.
 * - the SDK client through a replica (initialize, tools/list, tools/call), /readyz, /metrics;
 * - the configured Cedar policy on every replica (a forbidden tool refused, never invoked);
 * - a relayed request's entry in its session chain; `/operator/status`; a reload without a
 *   pinned key refused (POLICY_RELOAD_REFUSED), the console (POSTGRES_FEATURE_UNAVAILABLE);
 * - `cmcp executions list|show` on the postgres:// URL: every replica's rows;
 * - an agent blocked through one replica refused on all three within the read interval (its
 *   open sessions closed, `agent_blocked` once in the gateway chain), unblocked through another;
 * - C-EXEC-1 and C-EXEC-2 with the racing requests sent to different replicas: one upstream
 *   invocation, the others refused with today's codes;
 * - a session opened through replica 0, used through 1 and closed through 2: its claim and
 *   bundle verify with `cmcp verify`: a /2 claim listing all three writers, every entry's writer
 *   checked (verdict signed-only: the software provider);
 * - SIGKILL of a replica mid-call: another replica seals the call `outcome_unknown` in its
 *   session's chain once the lease expired, not before;
 * - SIGSTOP of a replica mid-call: its call is sealed by another, and once resumed its terminal
 *   write fails its fence (LEASE_LOST) and its gate closes.
 * Needs the build (dist/).
 */
import { execFile } from 'node:child_process';
import { copyFileSync, mkdtempSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { StreamableHTTPClientTransport } from '@modelcontextprotocol/sdk/client/streamableHttp.js';
import type pg from 'pg';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { hashBundleDir } from '../src/policy/bundle.js';
import type { PostgresInstance } from '../testing/postgres.js';
import type { CountingServer } from './fixtures/counting-server.js';
import {
  type ChildGateway,
  freePort,
  REPO_ROOT,
  rest,
  rpc,
  startChild,
  writeConfig,
} from './harness/gateway.js';
import { hasPostgres } from './harness/postgres.js';
import { REPLICA_CLI, startReplicaBackend, stopReplicaBackend } from './harness/replicas.js';

const withPostgres = hasPostgres();
const TTL_MS = 2000;
const RENEW_MS = 400;
const CLI = REPLICA_CLI; // `cmcp executions` runs it too
let server: PostgresInstance | null = null;
let url = '';
let admin: pg.Pool;
let up: CountingServer;
/** A policy bundle every replica enforces: everything permitted but `c.big`. */
let policyDir = '';
const dirs: string[] = [];
const replicas: ChildGateway[] = [];

async function replica(id: string): Promise<ChildGateway> {
  const dir = mkdtempSync(join(tmpdir(), `cmcp-replica-${id}-`));
  dirs.push(dir);
  const cfg = await writeConfig({
    dir,
    port: await freePort(),
    upstreams: [{ name: 'c', transport: 'http', url: up.url, timeout_ms: 20_000 }],
    operators: [{ operator_id: 'ops', token: 'ops-token' }],
    agents: [
      { agent_id: 'alice', token: 'alice-token' },
      { agent_id: 'bob', token: 'bob-token' },
      { agent_id: 'carol', token: 'carol-token' },
    ],
    extra: {
      policy: { bundle: policyDir, enforcement_mode: 'enforcing' },
      database: url,
      instance_id: id,
      replicas: { lease_ttl_ms: TTL_MS, renew_every_ms: RENEW_MS },
    },
  });
  const child = await startChild(cfg);
  return child;
}

beforeAll(async () => {
  if (!withPostgres) return;
  ({ server, url, admin, up } = await startReplicaBackend('serving_1'));
  policyDir = mkdtempSync(join(tmpdir(), 'cmcp-replica-policy-'));
  dirs.push(policyDir);
  for (const f of ['schema.cedarschema', 'manifest.json'])
    copyFileSync(join(REPO_ROOT, 'examples', 'policy', f), join(policyDir, f));
  writeFileSync(
    join(policyDir, '00-replicas.cedar'),
    '@id("allow-all")\npermit (principal, action, resource);\n' +
      '@id("no-big")\nforbid (principal, action == Action::"call_tool", resource == Tool::"c.big");\n',
  );
  for (const id of ['r0', 'r1', 'r2']) replicas.push(await replica(id));
}, 90_000);
afterAll(async () => {
  await stopReplicaBackend({ server: server ?? undefined, admin, up }, replicas, dirs);
});

/** An error body (docs/errors.md). */
type Refusal = { error: { error_code: string } };

const uniq = (p: string) => `${p}-${Math.random().toString(36).slice(2)}`;

function call(at: ChildGateway, id: number, name: string, args: Record<string, unknown>, cmcp: object = {}) {
  return rpc(at.url, 'alice-token', {
    jsonrpc: '2.0',
    id,
    method: 'tools/call',
    params: { name, arguments: args, _cmcp: cmcp },
  });
}

/**
 * Runs the built CLI with `args` in a child and awaits it. Not spawnSync: a loop blocked here
 * for seconds misses the replicas closing idle keep-alive sockets, and the next request goes
 * out on a closed one ("other side closed"; C-EXEC-2 failed so in loaded CI runs).
 */
function runCli(
  args: string[],
  env: NodeJS.ProcessEnv,
): Promise<{ status: number | null; stdout: string; stderr: string }> {
  return new Promise((resolve) => {
    execFile(
      process.execPath,
      [CLI, ...args],
      { encoding: 'utf8', env, timeout: 30_000 },
      (err, stdout, stderr) =>
        resolve({ status: err ? (typeof err.code === 'number' ? err.code : null) : 0, stdout, stderr }),
    );
  });
}

async function until(what: string, ok: () => Promise<boolean>, ms = 15_000): Promise<void> {
  const deadline = Date.now() + ms;
  while (!(await ok())) {
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}`);
    await new Promise((r) => setTimeout(r, 100));
  }
}

/** The session chain's tool_call entries with the call's execution detail. */
async function toolCalls(sessionId: string) {
  const r = await admin.query<{ canonical: string }>(
    "SELECT canonical FROM audit_entries WHERE chain_id = $1 AND entry_type = 'tool_call' ORDER BY sequence_number",
    [sessionId],
  );
  return r.rows.map(
    (x) => JSON.parse(x.canonical) as Record<string, unknown> & { detail: Record<string, unknown> },
  );
}

describe.skipIf(!withPostgres)('cmcp start on PostgreSQL: three replicas', () => {
  it('serves the SDK client: initialize, tools/list, tools/call in the default session', async () => {
    const client = new Client({ name: 'replica-test', version: '1.0.0' });
    const transport = new StreamableHTTPClientTransport(new URL(`${replicas[1]?.url}/mcp`), {
      requestInit: { headers: { authorization: 'Bearer alice-token' } },
    });
    await client.connect(transport);
    const tools = await client.listTools();
    expect(tools.tools.map((t) => t.name)).toContain('c.record');
    const marker = uniq('sdk');
    const before = up.invocations.length;
    const r = await client.callTool({ name: 'c.record', arguments: { a: marker } });
    expect(r.isError).toBeFalsy();
    expect(up.invocations.length).toBe(before + 1);
    const evidence = (r._meta as Record<string, { entry_hash: string }>)['dev.cmcp/evidence'];
    const row = await admin.query<{ chain_id: string; is_default: number }>(
      'SELECT e.chain_id, s.is_default FROM audit_entries e JOIN sessions s ON s.session_id = e.chain_id WHERE e.entry_hash = $1',
      [evidence?.entry_hash],
    );
    expect(Number(row.rows[0]?.is_default)).toBe(1);
    await client.close();
    // Every replica's start-up records went to the shared gateway chain through its own lease.
    const starts = await admin.query<{ entry_type: string; n: string }>(
      `SELECT entry_type, count(*) AS n FROM audit_entries WHERE chain_id = 'gateway'
       AND entry_type IN ('gateway_start', 'attestation_provider', 'gateway_measurement') GROUP BY entry_type`,
    );
    expect(Object.fromEntries(starts.rows.map((x) => [x.entry_type, Number(x.n)]))).toEqual({
      gateway_start: 3,
      attestation_provider: 3,
      gateway_measurement: 3,
    });
    // /readyz and /metrics answer from PostgreSQL.
    const ready = await fetch(`${replicas[0]?.url}/readyz`);
    expect(ready.status).toBe(200);
    expect(((await ready.json()) as { checks: Record<string, unknown> }).checks).toMatchObject({
      database: null,
      lease: null,
    });
    const metrics = await fetch(`${replicas[1]?.url}/metrics`, {
      headers: { authorization: 'Bearer ops-token' },
    });
    expect(metrics.status).toBe(200);
    const text = await metrics.text();
    expect(text).toMatch(/^cmcp_open_sessions [1-9]/m);
    expect(text).toMatch(
      /^cmcp_calls_total\{method="tools\/call",upstream="c",disposition="completed"\} 1$/m,
    );
  });

  it('serves /operator/status; a reload without a pinned key is refused; the console is refused with POSTGRES_FEATURE_UNAVAILABLE', async () => {
    const at = replicas[0] as ChildGateway;
    const ops = { authorization: 'Bearer ops-token' };
    const status = await fetch(`${at.url}/operator/status`, { headers: ops });
    expect(status.status).toBe(200);
    const body = (await status.json()) as Record<string, unknown>;
    expect(body).toMatchObject({
      policy: { bundle_hash: hashBundleDir(policyDir), enforcement_mode: 'enforcing' },
      catalog: null,
      replica: { replica_id: 'r0', blocks_read_every_ms: 1000 },
    });
    const reload = await fetch(`${at.url}/operator/policy/reload`, {
      method: 'POST',
      headers: { ...ops, 'content-type': 'application/json' },
      body: JSON.stringify({ files: {} }),
    });
    expect(reload.status).toBe(409);
    expect(((await reload.json()) as Refusal).error).toMatchObject({
      error_code: 'POLICY_RELOAD_REFUSED',
      reason: 'no_policy_key',
    });
    const ui = await fetch(`${at.url}/operator/ui/login`);
    expect(((await ui.json()) as Refusal).error.error_code).toBe('POSTGRES_FEATURE_UNAVAILABLE');
  });

  it('an agent blocked through replica 0 is refused on every replica within the read interval; unblocked through replica 2', async () => {
    const [r0, r1, r2] = replicas as [ChildGateway, ChildGateway, ChildGateway];
    const ops = { authorization: 'Bearer ops-token', 'content-type': 'application/json' };
    const sid = (await rest(r1.url, 'carol-token', 'POST', '/sessions', {})).body.session_id as string;
    const carolCall = (at: ChildGateway, id: number) =>
      rpc(at.url, 'carol-token', {
        jsonrpc: '2.0',
        id,
        method: 'tools/call',
        params: { name: 'c.record', arguments: { a: uniq('carol') } },
      });
    expect((await carolCall(r2, 1)).body.result.isError).toBeFalsy();
    const blocked = await fetch(`${r0.url}/operator/agents/carol/block`, {
      method: 'POST',
      headers: ops,
      body: JSON.stringify({ reason: 'test' }),
    });
    expect(blocked.status).toBe(200);
    const b = (await blocked.json()) as { blocked: boolean; sessions_closed: { session_id: string }[] };
    expect(b.blocked).toBe(true);
    // Its open sessions (the named one opened through replica 1, the default one through 2) closed.
    expect(b.sessions_closed.map((x) => x.session_id)).toContain(sid);
    expect(b.sessions_closed).toHaveLength(2);
    const open = await admin.query("SELECT 1 FROM sessions WHERE agent_id = 'carol' AND status = 'open'");
    expect(open.rowCount).toBe(0);
    const reasons = await admin.query<{ canonical: string }>(
      "SELECT canonical FROM audit_entries WHERE chain_id = $1 AND entry_type = 'session_close'",
      [sid],
    );
    expect(JSON.parse(reasons.rows[0]?.canonical ?? '{}').detail).toMatchObject({ reason: 'agent_blocked' });
    // Refused at once where it was blocked, and on the others within 1 s and one read (probed
    // with a read that invokes nothing: GET /executions/:id, 404 while served).
    const before = up.invocations.length;
    expect((await carolCall(r0, 2)).body.error.data.error_code).toBe('AGENT_BLOCKED');
    const t0 = Date.now();
    for (const at of [r1, r2])
      await until(
        `carol refused on ${at.url}`,
        async () => (await rest(at.url, 'carol-token', 'GET', '/executions/none')).status === 403,
        3000,
      );
    expect(Date.now() - t0).toBeLessThan(3000);
    for (const at of [r0, r1, r2])
      expect((await carolCall(at, 3)).body.error.data.error_code).toBe('AGENT_BLOCKED');
    expect(up.invocations.length).toBe(before);
    const again = await fetch(`${r1.url}/operator/agents/carol/block`, {
      method: 'POST',
      headers: ops,
      body: '{}',
    });
    expect(((await again.json()) as { already_blocked?: boolean }).already_blocked).toBe(true);
    const st = (await (
      await fetch(`${r2.url}/operator/status`, { headers: { authorization: 'Bearer ops-token' } })
    ).json()) as { blocked_agents: string[] };
    expect(st.blocked_agents).toEqual(['carol']);
    // Unblocked through replica 2: served again on every replica within the same bound.
    const unblocked = await fetch(`${r2.url}/operator/agents/carol/unblock`, {
      method: 'POST',
      headers: ops,
      body: '{}',
    });
    expect(((await unblocked.json()) as { blocked: boolean }).blocked).toBe(false);
    for (const at of [r0, r1, r2])
      await until(`carol served on ${at.url}`, async () => !(await carolCall(at, 4)).body.error, 3000);
    const entries = await admin.query<{ entry_type: string }>(
      "SELECT entry_type FROM audit_entries WHERE chain_id = 'gateway' AND agent_id = 'carol' AND entry_type LIKE 'agent_%' ORDER BY sequence_number",
    );
    expect(entries.rows.map((x) => x.entry_type)).toEqual(['agent_blocked', 'agent_unblocked']);
  });

  it('a relayed request is recorded in its session chain on PostgreSQL (prompts/get of an unknown prompt)', async () => {
    const [r0, r1] = replicas as [ChildGateway, ChildGateway];
    const sid = (await rest(r0.url, 'alice-token', 'POST', '/sessions', {})).body.session_id as string;
    const before = up.invocations.length;
    const relayed = await rpc(r1.url, 'alice-token', {
      jsonrpc: '2.0',
      id: 1,
      method: 'prompts/get',
      params: { name: 'c.nope', _cmcp: { session_id: sid } },
    });
    const code = relayed.body.error.data.error_code as string;
    expect(code).toBeTruthy();
    expect(up.invocations.length).toBe(before);
    const r = await admin.query<{ canonical: string }>(
      "SELECT canonical FROM audit_entries WHERE chain_id = $1 AND entry_type = 'prompt_get'",
      [sid],
    );
    expect(r.rows.map((x) => JSON.parse(x.canonical))).toMatchObject([
      { disposition: 'refused', error_code: code, session_id: sid, detail: { method: 'prompts/get' } },
    ]);
  });

  it('enforces the configured policy on every replica: a forbidden tool is refused, never invoked', async () => {
    const before = up.invocations.length;
    for (const [i, r] of replicas.entries()) {
      const refused = await call(r, i, 'c.big', { bytes: 10 });
      expect(refused.body.error.data.error_code).toBe('POLICY_DENY');
    }
    expect(up.invocations.length).toBe(before);
    const loads = await admin.query<{ canonical: string }>(
      "SELECT canonical FROM audit_entries WHERE chain_id = 'gateway' AND entry_type = 'policy_load'",
    );
    expect(loads.rows.map((x) => JSON.parse(x.canonical).detail.bundle_hash)).toEqual(
      Array(3).fill(hashBundleDir(policyDir)),
    );
  });

  it('C-EXEC-1: 12 identical calls spread over three replicas reach the upstream once', async () => {
    const x = uniq('c1');
    const marker = uniq('m');
    const rs = await Promise.all(
      Array.from({ length: 12 }, (_, i) =>
        call(replicas[i % 3] as ChildGateway, i, 'c.hold', { ms: 1000, marker }, { execution_id: x }),
      ),
    );
    expect(up.invocations.filter((v) => v.args.marker === marker)).toHaveLength(1);
    expect(rs.filter((r) => r.body.result)).toHaveLength(1);
    expect(rs.filter((r) => r.body.error?.data.error_code === 'EXECUTION_IN_FLIGHT')).toHaveLength(11);
    for (const r of replicas) {
      const again = await call(r, 99, 'c.hold', { ms: 1000, marker }, { execution_id: x });
      expect(again.body.error.data.error_code).toBe('EXECUTION_REPLAY_REFUSED');
    }
    expect(up.invocations.filter((v) => v.args.marker === marker)).toHaveLength(1);
  });

  it("cmcp executions list and show read every replica's registry from the postgres:// URL", async () => {
    const [, r1, r2] = replicas as [ChildGateway, ChildGateway, ChildGateway];
    const ids = [uniq('cli'), uniq('cli')];
    for (const [i, at] of [r1, r2].entries()) {
      const r = await call(at, 70 + i, 'c.record', { a: ids[i] }, { execution_id: ids[i] });
      expect(r.body.result.isError).toBeFalsy();
    }
    const run = (...args: string[]) =>
      runCli(['executions', ...args], { ...process.env, CMCP_LOG_LEVEL: 'silent' });
    const list = await run('list', '--db', url, '--agent', 'alice', '--json');
    expect(list.status).toBe(0);
    const rows = JSON.parse(list.stdout) as { execution_id: string; owner: string; state: string }[];
    const stored = await admin.query(
      "SELECT * FROM executions WHERE agent_id = 'alice' ORDER BY created_at DESC",
    );
    expect(rows).toEqual(stored.rows);
    for (const [i, owner] of ['r1', 'r2'].entries())
      expect(rows.find((x) => x.execution_id === ids[i])).toMatchObject({ owner, state: 'completed' });
    const table = await run('list', '--db', url, '--state', 'completed');
    expect(table.status).toBe(0);
    expect(table.stdout).toContain(ids[0]);
    const show = await run('show', '--db', url, '--agent', 'alice', ids[1] as string, '--json');
    expect(show.status).toBe(0);
    expect(JSON.parse(show.stdout)).toEqual(stored.rows.find((x) => x.execution_id === ids[1]));
    const missing = await run('show', '--db', url, '--agent', 'bob', ids[1] as string);
    expect(missing.status).toBe(1);
    expect(missing.stderr).toContain('EXECUTION_NOT_FOUND');
    const unreachable = await run('list', '--db', 'postgres://cmcp:secret@127.0.0.1:1/cmcp');
    expect(unreachable.status).toBe(2);
    expect(unreachable.stderr).toContain('DATABASE_UNAVAILABLE');
    expect(unreachable.stderr).not.toContain('secret');
    expect(unreachable.stderr).not.toMatch(/\n\s+at /);
  });

  it('C-EXEC-2: another action under the same key collides on another replica while the first runs', async () => {
    const x = uniq('c2');
    const marker = uniq('m');
    const first = call(replicas[0] as ChildGateway, 1, 'c.hold', { ms: 800, marker }, { execution_id: x });
    await until('the first call at the upstream', async () =>
      up.invocations.some((v) => v.args.marker === marker),
    );
    const other = await call(
      replicas[1] as ChildGateway,
      2,
      'c.hold',
      { ms: 801, marker },
      { execution_id: x },
    );
    expect(other.body.error.data.error_code).toBe('EXECUTION_COLLISION');
    const reordered = await call(
      replicas[2] as ChildGateway,
      3,
      'c.hold',
      { marker, ms: 800 },
      { execution_id: x },
    );
    expect(reordered.body.error.data.error_code).toBe('EXECUTION_IN_FLIGHT');
    expect((await first).body.result).toBeDefined();
    expect(up.invocations.filter((v) => v.args.marker === marker)).toHaveLength(1);
    const seen = await rest(replicas[2]?.url as string, 'alice-token', 'GET', `/executions/${x}`);
    expect(seen.body.state).toBe('completed');
  });

  it('a session opened on replica 0 is used through 1 and closed through 2; its claim and bundle verify', async () => {
    const [r0, r1, r2] = replicas as [ChildGateway, ChildGateway, ChildGateway];
    const opened = await rest(r0.url, 'alice-token', 'POST', '/sessions', { challenge: 'AAECAwQFBgc' });
    expect(opened.status).toBe(201);
    const sid = opened.body.session_id as string;
    for (const [i, at] of [r1, r2, r0].entries()) {
      const r = await call(at, i, 'c.record', { a: uniq('s') }, { session_id: sid });
      expect(r.body.result).toBeDefined();
    }
    // A relayed request's entry in the same chain: signed by its writer like the calls' entries.
    const relayed = await rpc(r1.url, 'alice-token', {
      jsonrpc: '2.0',
      id: 7,
      method: 'prompts/get',
      params: { name: 'c.nope', _cmcp: { session_id: sid } },
    });
    expect(relayed.body.error.data.error_code).toBeTruthy();
    const open = await rest(r0.url, 'alice-token', 'GET', `/sessions/${sid}/claim`);
    expect(open.body.error.error_code).toBe('SESSION_OPEN');
    const closed = await rest(r2.url, 'alice-token', 'POST', `/sessions/${sid}/close`);
    expect(closed.status).toBe(200);
    // A call after the close goes nowhere near the session.
    const late = await call(r1, 9, 'c.record', {}, { session_id: sid });
    expect(late.body.error.data.error_code).toBe('SESSION_CLOSED');
    const claim = await rest(r1.url, 'alice-token', 'GET', `/sessions/${sid}/claim`);
    expect(claim.body).toEqual(closed.body);
    const bundle = await rest(r0.url, 'alice-token', 'GET', `/sessions/${sid}/audit`);
    expect(bundle.body.entries.length).toBeGreaterThanOrEqual(6);
    expect((await rest(r0.url, 'bob-token', 'GET', `/sessions/${sid}/audit`)).status).toBe(404);
    const dir = dirs[0] as string;
    writeFileSync(join(dir, 'claim.json'), JSON.stringify(claim.body));
    writeFileSync(join(dir, 'bundle.json'), JSON.stringify(bundle.body));
    const v = await runCli(
      [
        'verify',
        join(dir, 'claim.json'),
        '--audit',
        join(dir, 'bundle.json'),
        '--challenge',
        'AAECAwQFBgc',
        '--require',
        'signed-only',
        '--json',
      ],
      process.env,
    );
    expect(v.status).toBe(0);
    const report = JSON.parse(v.stdout);
    expect(report.verdict).toBe('signed-only');
    // Three replicas wrote into the chain: a /2 claim listing each one's start-up evidence, and
    // every entry of the bundle checked against them.
    expect(claim.body.profile).toBe('cmcp.trace-claim/2');
    expect(new Set(claim.body.replicas.map((m: { replica_id: string }) => m.replica_id)).size).toBe(3);
    expect(
      bundle.body.entries.every((e: { writer_signature?: string }) => typeof e.writer_signature === 'string'),
    ).toBe(true);
    const writers = report.checks.find((c: { id: string }) => c.id === 'audit.writers');
    expect(writers?.status).toBe('pass');
    expect(claim.body.policy_bundle_hash).toBe(hashBundleDir(policyDir));
    expect(report.checks.filter((c: { status: string }) => c.status === 'fail')).toEqual([]);
  });

  it('SIGKILL mid-call: another replica seals the call outcome_unknown after the lease expired, not before', async () => {
    const victim = replicas[2] as ChildGateway;
    const sid = (await rest(victim.url, 'alice-token', 'POST', '/sessions', {})).body.session_id as string;
    const marker = uniq('kill');
    const pending = call(victim, 1, 'c.hold', { ms: 30_000, marker }, { session_id: sid }).catch(() => null);
    await until('the call at the upstream', async () => up.invocations.some((v) => v.args.marker === marker));
    const killedAt = Date.now();
    victim.proc.kill('SIGKILL');
    await pending;
    // Well inside the lease's ttl: nothing sealed yet, the attempt still open.
    await new Promise((r) => setTimeout(r, TTL_MS / 4));
    expect(await toolCalls(sid)).toEqual([]);
    const open = await admin.query("SELECT 1 FROM call_attempts WHERE owner = 'r2' AND session_id = $1", [
      sid,
    ]);
    expect(open.rowCount).toBe(1);
    await until('the sealing', async () => (await toolCalls(sid)).length > 0, 20_000);
    expect(Date.now() - killedAt).toBeGreaterThanOrEqual(TTL_MS - RENEW_MS);
    const [sealed] = await toolCalls(sid);
    expect(sealed?.disposition).toBe('outcome_unknown');
    expect(sealed?.error_code).toBe('CALL_INTERRUPTED');
    expect(sealed?.detail.reason).toBe('replica_lease_expired');
    expect(sealed?.detail.sealed_replica).toBe('r2');
    expect(['r0', 'r1']).toContain(sealed?.detail.sealed_by);
    expect(up.invocations.filter((v) => v.args.marker === marker)).toHaveLength(1);
    up.release();
  });

  it('SIGSTOP mid-call: the call is sealed by another replica; resumed, its terminal is LEASE_LOST and its gate closes', async () => {
    const victim = replicas[1] as ChildGateway;
    const sid = (await rest(victim.url, 'alice-token', 'POST', '/sessions', {})).body.session_id as string;
    const marker = uniq('stop');
    const pending = call(victim, 1, 'c.hold', { ms: 30_000, marker }, { session_id: sid });
    await until('the call at the upstream', async () => up.invocations.some((v) => v.args.marker === marker));
    victim.proc.kill('SIGSTOP');
    await until('the sealing', async () => (await toolCalls(sid)).length > 0, 20_000);
    const [sealed] = await toolCalls(sid);
    expect(sealed?.disposition).toBe('outcome_unknown');
    expect(sealed?.detail.sealed_replica).toBe('r1');
    up.release();
    victim.proc.kill('SIGCONT');
    const answer = await pending;
    // Its terminal failed the fence: not delivered as a result, nothing more in the chain.
    expect(answer.body.error.data.error_code).toBe('AUDIT_WRITE_FAILED');
    expect(await toolCalls(sid)).toHaveLength(1);
    await until('the gate closing', async () => {
      const r = await rest(victim.url, 'alice-token', 'POST', '/sessions', {});
      return r.status === 503 && r.body.error.error_code === 'LEASE_LOST';
    });
    const ready = await fetch(`${victim.url}/readyz`);
    expect(ready.status).toBe(503);
    expect(((await ready.json()) as { checks: Record<string, unknown> }).checks.lease).toBe('LEASE_LOST');
    expect(victim.stderr()).toContain('LEASE_LOST');
  });

  it('a killed replica restarts under its instance_id; SIGTERM drains, releases the lease, exits 0; its session stays usable', async () => {
    const r0 = replicas[0] as ChildGateway;
    const again = await replica('r2');
    replicas.push(again);
    const token = await admin.query<{ lease_token: string; state: string }>(
      "SELECT lease_token, state FROM replica_leases WHERE replica_id = 'r2'",
    );
    expect(token.rows[0]?.state).toBe('live');
    const sid = (await rest(r0.url, 'alice-token', 'POST', '/sessions', {})).body.session_id as string;
    expect(await r0.stop('SIGTERM')).toBe(0);
    const lease = await admin.query<{ state: string }>(
      "SELECT state FROM replica_leases WHERE replica_id = 'r0'",
    );
    expect(lease.rows[0]?.state).toBe('sealed');
    const r = await call(again, 1, 'c.record', {}, { session_id: sid });
    expect(r.body.result).toBeDefined();
  });
});
