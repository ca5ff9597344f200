/**
 * A replica that dies during its own start leaves every claim verifiable
 * (docs/replicas.md#start-up-order). One `cmcp start` replica on a real throw-away PostgreSQL
 * and its own swtpm: a session is opened and four long calls reach the upstream; the replica is
 * SIGKILLed; it is started with `CMCP_FAULT_INJECT=die_at:<step>` (store/faults.ts), which
 * SIGKILLs it when its start-up reaches that step; then it is started normally, the session is
 * closed, and its claim — and every chain and claim in the database — must verify with the real
 * verifier (testing/crash/check.ts), the four calls sealed `outcome_unknown` exactly once. Once
 * per start-up step. Needs the build (dist/).
 */
import { type ChildProcess, spawn } from 'node:child_process';
import { createHash } from 'node:crypto';
import { closeSync, existsSync, mkdtempSync, openSync, readFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { StartStep } from '../src/store/faults.js';
import { checkCrashSnapshot } from '../testing/crash/check.js';
import { readPostgresSnapshot } from '../testing/crash/postgres-snapshot.js';
import { type LoggingUpstream, startLoggingUpstream } from '../testing/crash/upstream.js';
import { createDatabase, type PostgresInstance, startPostgres } from '../testing/postgres.js';
import { waitExit } from '../testing/process.js';
import { postgresReplicaConfig, ReplicaSet } from '../testing/replicas.js';
import { startSwtpm } from '../testing/vitest-swtpm.js';
import { cleanup, REPO_ROOT } from './harness/gateway.js';
import { hasPostgres } from './harness/postgres.js';

const withPostgres = hasPostgres();
const TOKEN = 'start-crash-token';
// The close's transaction spans its signing: a ttl whose idle-transaction cut
// (store/postgres/transaction.ts replicaTimeouts) outlasts a swtpm quote under load.
const TTL_MS = 5000;
const RENEW_MS = 1000;
const STEPS: StartStep[] = [
  'lease_acquired',
  'start_recorded',
  'measured',
  'evidence_recorded',
  'own_work_recovered',
  'listening',
];
const dir = mkdtempSync(join(tmpdir(), 'cmcp-start-crash-'));
let server: PostgresInstance | null = null;
let tpm: Awaited<ReturnType<typeof startSwtpm>> | null = null;
let upstream: LoggingUpstream | null = null;
let set: ReplicaSet | null = null;
let databaseUrl = '';
const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

beforeAll(async () => {
  if (!withPostgres) return;
  if (!existsSync(join(REPO_ROOT, 'dist', 'src', 'cli', 'main.js')))
    throw new Error('dist/ is missing: run `npm run build` first');
  server = await startPostgres();
  databaseUrl = await createDatabase(server, 'start_crash');
  tpm = await startSwtpm();
  upstream = await startLoggingUpstream();
  const up = upstream;
  const tcti = tpm.tcti;
  set = await ReplicaSet.start({
    repoRoot: REPO_ROOT,
    dir,
    count: 1,
    config: (i, port) =>
      postgresReplicaConfig(
        {
          upstreams: [{ name: 'up', transport: 'http', url: up.url, timeout_ms: 60_000 }],
          attestation: { provider: 'tpm', tcti, ak_algorithm: 'ecc-p256', pcrs: [0, 7] },
          agents: [{ agent_id: 'agent', token_sha256: createHash('sha256').update(TOKEN).digest('hex') }],
          shutdown: { drain_ms: 500 },
        },
        { i, port, databaseUrl, leaseTtlMs: TTL_MS, renewEveryMs: RENEW_MS },
      ),
    startTimeoutMs: 60_000,
  });
}, 120_000);
afterAll(async () => {
  await set?.stopAll();
  await upstream?.close();
  await tpm?.stop();
  await server?.stop();
  cleanup(dir);
});

async function post(path: string, body?: unknown): Promise<Record<string, unknown>> {
  const r = await fetch(`${set?.url(0)}${path}`, {
    method: 'POST',
    headers: {
      authorization: `Bearer ${TOKEN}`,
      'content-type': 'application/json',
      accept: 'application/json, text/event-stream',
    },
    body: JSON.stringify(body ?? {}),
    signal: AbortSignal.timeout(30_000),
  });
  const text = await r.text();
  if (!r.ok) throw new Error(`${path}: HTTP ${r.status} ${text}`);
  return JSON.parse(text) as Record<string, unknown>;
}

/**
 * Starts replica 0 with `die_at:<step>` until the hook killed it (SIGKILL), each start refused
 * while the killed run's lease is live (INSTANCE_RUNNING) tried again. @returns the start's log.
 */
async function startAndDieAt(step: StartStep): Promise<string> {
  const file = join(dir, 'replica-0.yaml');
  const logFile = join(dir, `die-${step}.log`);
  for (let attempt = 0; attempt < 40; attempt++) {
    const fd = openSync(logFile, 'w');
    let proc: ChildProcess;
    try {
      proc = spawn(
        process.execPath,
        [join(REPO_ROOT, 'dist', 'src', 'cli', 'main.js'), 'start', '--config', file],
        {
          env: { ...process.env, CMCP_LOG_LEVEL: 'warn', CMCP_FAULT_INJECT: `die_at:${step}` },
          stdio: ['ignore', fd, fd],
        },
      );
    } finally {
      closeSync(fd);
    }
    const signal = new Promise<NodeJS.Signals | null>((r) => proc.once('exit', (_c, s) => r(s)));
    if (!(await waitExit(proc, 60_000))) {
      proc.kill('SIGKILL');
      throw new Error(`die_at:${step}: the start did not end`);
    }
    const log = readFileSync(logFile, 'utf8');
    if ((await signal) === 'SIGKILL') return log;
    if (!/INSTANCE_RUNNING/.test(log)) throw new Error(`die_at:${step}: exited without dying:\n${log}`);
    await sleep(250);
  }
  throw new Error(`die_at:${step}: never started past INSTANCE_RUNNING`);
}

describe.skipIf(!withPostgres)('a replica killed at each step of its start-up', () => {
  it('leaves every claim verifiable and every call sealed once', async () => {
    const replicas = set as ReplicaSet;
    const ran = (upstream as LoggingUpstream).ran;
    const sessions: string[] = [];
    for (const step of STEPS) {
      const opened = await post('/sessions');
      const sid = String(opened.session_id);
      sessions.push(sid);
      const before = ran.length;
      // Four long calls: each reached the upstream (its attempt recorded) when the replica dies.
      const lost = Array.from({ length: 4 }, (_, k) =>
        post('/mcp', {
          jsonrpc: '2.0',
          id: k,
          method: 'tools/call',
          params: {
            name: 'up.work',
            arguments: { op: `${step}-${k}`, ms: 30_000 },
            _cmcp: { session_id: sid },
          },
        }).catch(() => null),
      );
      for (const end = Date.now() + 20_000; ran.length < before + 4; await sleep(50))
        if (Date.now() > end) throw new Error(`${step}: the calls did not reach the upstream`);
      await replicas.kill(0);
      await Promise.all(lost);
      await startAndDieAt(step);
      await replicas.restart(0);
      await post(`/sessions/${sid}/close`).catch((e: Error) => {
        throw new Error(`${step}: ${e.message}\n${replicas.logTail(0)}`);
      });
    }
    // Stopped gracefully, its lease sealed: the snapshot is the database at rest.
    expect(await replicas.stop(0)).toBe(0);
    const check = checkCrashSnapshot(await readPostgresSnapshot(databaseUrl), 'up.work', ran, []);
    expect(check.violations).toEqual([]);
    expect(check.counts.claims).toBe(STEPS.length);
    expect(check.counts.claimVerdicts.invalid ?? 0).toBe(0);
    expect(check.counts.interruptedRecorded).toBe(STEPS.length * 4);
  }, 600_000);
});
