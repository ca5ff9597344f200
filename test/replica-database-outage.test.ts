import { createHash } from 'node:crypto';
import { existsSync, mkdtempSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import pg from 'pg';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { type LoggingUpstream, startLoggingUpstream } from '../testing/crash/upstream.js';
import { createDatabase, type PostgresInstance, startPostgres } from '../testing/postgres.js';
import { postgresReplicaConfig, ReplicaSet } from '../testing/replicas.js';
import { startSwtpm } from '../testing/vitest-swtpm.js';
import { cleanup, REPO_ROOT } from './harness/gateway.js';
import { hasPostgres } from './harness/postgres.js';

const withPostgres = hasPostgres();
const TOKEN = 'db-outage-token';
const TTL_MS = 15_000;
const RENEW_MS = 5000;
const dir = mkdtempSync(join(tmpdir(), 'cmcp-db-outage-'));
let server: PostgresInstance | null = null;
const tpms: Awaited<ReturnType<typeof startSwtpm>>[] = [];
let upstream: LoggingUpstream | null = null;
let set: ReplicaSet | null = null;
let databaseUrl = '';
// biome-ignore lint/suspicious/noExplicitAny: the gateway's JSON answers, read field by field
type Json = any;
const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

function baseConfig(tcti: string, upstreamUrl: string): Record<string, unknown> {
  return {
    upstreams: [{ name: 'up', transport: 'http', url: upstreamUrl, timeout_ms: 30_000 }],
    attestation: { provider: 'tpm', tcti, ak_algorithm: 'ecc-p256', pcrs: [0, 7] },
    agents: [{ agent_id: 'agent', token_sha256: createHash('sha256').update(TOKEN).digest('hex') }],
    shutdown: { drain_ms: 500 },
  };
}

beforeAll(async () => {
  if (!withPostgres) return;
  if (!existsSync(join(REPO_ROOT, 'dist', 'src', 'cli', 'main.js')))
    throw new Error('dist/ is missing: run `npm run build` first');
  server = await startPostgres();
  databaseUrl = await createDatabase(server, 'db_outage');
  for (let i = 0; i < 2; i++) tpms.push(await startSwtpm());
  upstream = await startLoggingUpstream();
  const up = upstream;
  set = await ReplicaSet.start({
    repoRoot: REPO_ROOT,
    dir,
    count: 2,
    config: (i, port) =>
      postgresReplicaConfig(baseConfig((tpms[i] as { tcti: string }).tcti, up.url), {
        i,
        port,
        databaseUrl,
        leaseTtlMs: TTL_MS,
        renewEveryMs: RENEW_MS,
      }),
    startTimeoutMs: 60_000,
  });
}, 120_000);
afterAll(async () => {
  await set?.stopAll();
  await upstream?.close();
  for (const t of tpms) await t.stop();
  await server?.stop();
  cleanup(dir);
});

async function post(base: string, path: string, body?: unknown): Promise<{ status: number; json: Json }> {
  const r = await fetch(`${base}${path}`, {
    method: 'POST',
    headers: {
      authorization: `Bearer ${TOKEN}`,
      'content-type': 'application/json',
      accept: 'application/json, text/event-stream',
    },
    body: JSON.stringify(body ?? {}),
    signal: AbortSignal.timeout(20_000),
  });
  const text = await r.text();
  return { status: r.status, json: text ? JSON.parse(text) : null };
}

let ops = 0;
/** One session through replica `i`: opened, one call answered with a result, closed. Throws otherwise. */
async function serveOnce(i: number): Promise<void> {
  const base = (set as ReplicaSet).url(i);
  const opened = await post(base, '/sessions');
  if (opened.status >= 300) throw new Error(`open: ${opened.status} ${JSON.stringify(opened.json)}`);
  const sid = String(opened.json.session_id);
  const call = await post(base, '/mcp', {
    jsonrpc: '2.0',
    id: 1,
    method: 'tools/call',
    params: { name: 'up.work', arguments: { op: `op-${++ops}`, ms: 50 }, _cmcp: { session_id: sid } },
  });
  if (!call.json?.result || call.json.result.isError)
    throw new Error(`call: ${call.status} ${JSON.stringify(call.json)}`);
  const closed = await post(base, `/sessions/${sid}/close`);
  if (closed.status >= 300) throw new Error(`close: ${closed.status} ${JSON.stringify(closed.json)}`);
}

/** Both replicas alive and each serving within `ms` (the database back). */
async function expectBothServe(ms: number): Promise<void> {
  const replicas = set as ReplicaSet;
  expect(replicas.running()).toEqual([0, 1]);
  for (const i of [0, 1]) {
    let last = '';
    const end = Date.now() + ms;
    for (;;) {
      try {
        await serveOnce(i);
        break;
      } catch (e) {
        last = (e as Error).message;
      }
      expect(replicas.running(), `replica ${i} died:\n${replicas.logTail(i)}`).toEqual([0, 1]);
      if (Date.now() > end)
        throw new Error(`replica ${i} does not serve again: ${last}\n${replicas.logTail(i)}`);
      await sleep(250);
    }
  }
  expect(replicas.running()).toEqual([0, 1]);
}

/** Sessions with short calls through both replicas until `stop` (answers and failures ignored). */
function load(stop: { stopped: boolean }): Promise<void> {
  return Promise.all(
    [0, 1, 0, 1].map(async (i) => {
      while (!stop.stopped) await serveOnce(i).catch(() => sleep(50));
    }),
  ).then(() => undefined);
}

/** Each replica's lease token and the pids of the replicas' processes. */
async function tokens(): Promise<Record<string, number>> {
  const c = new pg.Client({ connectionString: databaseUrl });
  c.on('error', () => undefined);
  await c.connect();
  try {
    const r = await c.query<{ replica_id: string; lease_token: string }>(
      'SELECT replica_id, lease_token::text FROM replica_leases ORDER BY replica_id',
    );
    return Object.fromEntries(r.rows.map((x) => [x.replica_id, Number(x.lease_token)]));
  } finally {
    await c.end().catch(() => undefined);
  }
}

/** The lease check of each replica's /readyz, polled every 100 ms for `ms`: every value seen. */
async function leaseChecks(ms: number): Promise<Set<string>> {
  const seen = new Set<string>();
  for (const end = Date.now() + ms; Date.now() < end; await sleep(100))
    for (const i of [0, 1]) {
      const r = await fetch(`${(set as ReplicaSet).url(i)}/readyz`, {
        signal: AbortSignal.timeout(2000),
      }).then(
        (x) => x.json() as Promise<{ checks?: { lease?: string | null } }>,
        () => null,
      );
      seen.add(String(r?.checks?.lease ?? null));
    }
  return seen;
}

describe.skipIf(!withPostgres)("a database outage and the replicas' leases", () => {
  it('the postmaster down for 8.4 s (ttl 15 s, renewal 5 s): both keep their lease and serve', async () => {
    const replicas = set as ReplicaSet;
    const pids = [replicas.pid(0), replicas.pid(1)];
    const before = await tokens();
    const stop = { stopped: false };
    const running = load(stop);
    await sleep(500);
    const downAt = Date.now();
    await (server as PostgresInstance).down('immediate');
    const watching = leaseChecks(8400 + 6000);
    await sleep(Math.max(0, 8400 - (Date.now() - downAt)));
    await (server as PostgresInstance).up();
    stop.stopped = true;
    await running;
    const seen = await watching;
    await expectBothServe(10_000);
    expect(seen.has('LEASE_LOST')).toBe(false);
    expect(await tokens()).toEqual(before);
    expect([replicas.pid(0), replicas.pid(1)]).toEqual(pids);
  }, 120_000);

  it('the server SIGSTOPped past the ttl: both lose their lease, acquire one again by themselves, and serve', async () => {
    const replicas = set as ReplicaSet;
    const pids = [replicas.pid(0), replicas.pid(1)];
    const before = await tokens();
    (server as PostgresInstance).pause();
    await sleep(TTL_MS + 3000);
    (server as PostgresInstance).pause(true);
    await expectBothServe(TTL_MS * 3);
    const after = await tokens();
    for (const id of ['replica-0', 'replica-1']) expect(after[id]).toBeGreaterThan(before[id] as number);
    expect([replicas.pid(0), replicas.pid(1)]).toEqual(pids);
  }, 180_000);
});
