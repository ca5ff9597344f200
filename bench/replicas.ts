/**
 * The replicas section of `npm run bench` (issue 15 item 7; bench/run.ts, or alone:
 * `npm run bench -- --replicas`): throughput and latency at concurrency 64 of one `cmcp start`
 * gateway on SQLite and of 1, 2 and 3 replicas on one PostgreSQL (a durable throw-away server,
 * testing/postgres.ts: fsync and synchronous_commit on), all with the same config, in front of
 * the comparison's HTTP upstream (`noop`). Every call carries a fresh execution_id (admission,
 * attempt and terminal: the store's whole call path). The 64 callers are spread round-robin
 * over the replicas of a configuration; the configurations run in windows whose order rotates
 * each repetition, all processes started once (an idle replica keeps renewing its lease).
 * Latency is taken at the client; the driver runs in this process, on the same cores.
 */
import { type ChildProcess, execFile } from 'node:child_process';
import { mkdirSync, readdirSync, readFileSync } from 'node:fs';
import { cpus, loadavg } from 'node:os';
import { join } from 'node:path';
import { promisify } from 'node:util';
import {
  createDatabase,
  type PostgresInstance,
  postgresMissingReason,
  startPostgres,
} from '../testing/postgres.js';
import { postgresReplicaConfig, ReplicaSet } from '../testing/replicas.js';
import { quantile } from './compare/measure.js';
import { spawnListening } from './listening.js';
import { REPO_ROOT } from './load/profile.js';

export interface ReplicasBenchOptions {
  /** Repetitions (each runs every configuration once). */
  reps: number;
  /** Measured window per configuration and repetition, milliseconds. */
  windowMs: number;
  /** Warm-up before each window, milliseconds. */
  warmMs: number;
  /** Concurrent callers (64 for the figure). */
  concurrency: number;
  /** A folder for configs, logs and the SQLite database. */
  dir: string;
  log?: (line: string) => void;
}

/** One measured window. */
export interface ReplicasWindow {
  rep: number;
  config: string;
  calls: number;
  errors: number;
  firstError: string | null;
  callsPerSecond: number;
  /** Client-side latency (µs). */
  p50: number;
  p99: number;
}

export interface ReplicasSummary {
  config: string;
  engine: 'sqlite' | 'postgres';
  replicas: number;
  /** Median (min…max) over repetitions. */
  callsPerSecond: { median: number; min: number; max: number };
  p50Ms: { median: number; min: number; max: number };
  p99Ms: { median: number; min: number; max: number };
  errors: number;
}

export interface ReplicasBenchResult {
  at: string;
  options: Omit<ReplicasBenchOptions, 'dir' | 'log'>;
  cores: number;
  loadAverage: { before: number[]; after: number[] };
  postgresMajor: number | null;
  /** Why the PostgreSQL rows are missing (PostgreSQL not installed, a replica that did not start), or null. */
  postgresSkipped: string | null;
  windows: ReplicasWindow[];
  summary: ReplicasSummary[];
}

const UPSTREAM = join(REPO_ROOT, 'dist', 'bench', 'compare', 'upstream.js');
const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

/** The comparison's HTTP upstream in its own process; resolves once it prints its port. */
async function startUpstream(): Promise<{ proc: ChildProcess; url: string }> {
  const { proc, port } = await spawnListening(process.execPath, [UPSTREAM, 'http']);
  return { proc, url: `http://127.0.0.1:${port}/mcp` };
}

/** The one config of every gateway (dev mode: software attestation, the `dev` agent), bar its database. */
function gatewayConfig(upstreamUrl: string): Record<string, unknown> {
  return {
    dev_mode: true,
    attestation: { provider: 'software' },
    upstreams: [{ name: 'h', transport: 'http', url: upstreamUrl }],
    sessions: { default_max_calls: 1_000_000 },
    // One agent drives the gateways at full speed: the per-agent limits would measure the limiter.
    limits: { agent_requests_per_s: 1_000_000, agent_request_burst: 1_000_000, agent_max_in_flight: 100_000 },
  };
}

let seq = 0;
const RUN = `${process.pid}-${Date.now()}`;

/** One tools/call of `h.noop` with a fresh execution_id; throws on anything but a result. */
async function callOnce(url: string): Promise<void> {
  const n = seq++;
  const r = await fetch(`${url}/mcp`, {
    method: 'POST',
    headers: { 'content-type': 'application/json', accept: 'application/json, text/event-stream' },
    body: JSON.stringify({
      jsonrpc: '2.0',
      id: n,
      method: 'tools/call',
      params: { name: 'h.noop', arguments: {}, _cmcp: { execution_id: `bench-${RUN}-${n}` } },
    }),
    signal: AbortSignal.timeout(30_000),
  });
  const body = (await r.json()) as {
    result?: { isError?: boolean };
    error?: { message?: string; data?: unknown };
  };
  if (!body.result || body.result.isError)
    throw new Error(`HTTP ${r.status}: ${JSON.stringify(body.error ?? body.result).slice(0, 300)}`);
}

/** `concurrency` callers, caller k on `urls[k % urls.length]`, for `ms`. */
async function drive(
  urls: string[],
  concurrency: number,
  ms: number,
  lat: number[] | null,
): Promise<{ errors: number; firstError: string | null }> {
  const until = Date.now() + ms;
  let errors = 0;
  let firstError: string | null = null;
  await Promise.all(
    Array.from({ length: concurrency }, async (_, k) => {
      const url = urls[k % urls.length] as string;
      while (Date.now() < until) {
        const t0 = process.hrtime.bigint();
        try {
          await callOnce(url);
          lat?.push(Number(process.hrtime.bigint() - t0) / 1000);
        } catch (e) {
          errors++;
          firstError ??= (e as Error).message;
          if (errors > 200) throw new Error(`too many errors: ${firstError}`);
        }
      }
    }),
  );
  return { errors, firstError };
}

async function window(
  rep: number,
  config: string,
  urls: string[],
  o: ReplicasBenchOptions,
): Promise<ReplicasWindow> {
  await drive(urls, o.concurrency, o.warmMs, null);
  const lat: number[] = [];
  const t0 = Date.now();
  const { errors, firstError } = await drive(urls, o.concurrency, o.windowMs, lat);
  const elapsed = Date.now() - t0;
  lat.sort((a, b) => a - b);
  return {
    rep,
    config,
    calls: lat.length,
    errors,
    firstError,
    callsPerSecond: (lat.length * 1000) / elapsed,
    p50: quantile(lat, 0.5),
    p99: quantile(lat, 0.99),
  };
}

/** Median (the mean of the middle two for an even count, not the lower one), min and max. */
const spread = (xs: number[]) => {
  const s = [...xs].sort((a, b) => a - b);
  const mid = s.length >> 1;
  const median = s.length % 2 ? (s[mid] as number) : ((s[mid - 1] as number) + (s[mid] as number)) / 2;
  return { median: s.length ? median : Number.NaN, min: s[0] ?? Number.NaN, max: s.at(-1) ?? Number.NaN };
};

/** Starts the PostgreSQL replicas, or says why not. */
async function startPostgresReplicas(
  o: ReplicasBenchOptions,
  upstreamUrl: string,
): Promise<{ server: PostgresInstance; set: ReplicaSet } | { skipped: string }> {
  const missing = postgresMissingReason();
  if (missing) return { skipped: missing };
  const server = await startPostgres({ durable: true });
  try {
    const url = await createDatabase(server, 'cmcp_bench');
    await promisify(execFile)(process.execPath, [
      join(REPO_ROOT, 'dist', 'src', 'cli', 'main.js'),
      'db',
      'migrate',
      '--database',
      url,
    ]);
    const dir = join(o.dir, 'postgres');
    mkdirSync(dir, { recursive: true });
    const set = await ReplicaSet.start({
      repoRoot: REPO_ROOT,
      dir,
      count: 3,
      config: (i, port) =>
        postgresReplicaConfig(gatewayConfig(upstreamUrl), {
          i,
          port,
          databaseUrl: url,
          leaseTtlMs: 15_000,
          renewEveryMs: 5_000,
        }),
    });
    return { server, set };
  } catch (e) {
    await server.stop();
    // One line for the table: the replica's own last word (its `cmcp: cannot start …` line).
    const lines = (e as Error).message.split('\n').filter((l) => l.trim() && !l.startsWith('{'));
    return { skipped: `a PostgreSQL replica did not start: ${(lines.at(-1) ?? '').slice(0, 300)}` };
  }
}

/** Runs the section (module doc). */
export async function runReplicasBench(o: ReplicasBenchOptions): Promise<ReplicasBenchResult> {
  const before = loadavg();
  const upstream = await startUpstream();
  const stops: (() => Promise<unknown>)[] = [
    async () => {
      upstream.proc.kill('SIGTERM');
    },
  ];
  try {
    const sqliteDir = join(o.dir, 'sqlite');
    mkdirSync(sqliteDir, { recursive: true });
    const sqlite = await ReplicaSet.start({
      repoRoot: REPO_ROOT,
      dir: sqliteDir,
      count: 1,
      config: (_i, port) => ({
        ...gatewayConfig(upstream.url),
        listen: { host: '127.0.0.1', port },
        database: join(sqliteDir, 'cmcp.db'),
      }),
    });
    stops.push(() => sqlite.stopAll());
    const pg = await startPostgresReplicas(o, upstream.url);
    let postgresMajor: number | null = null;
    const configs: { config: string; engine: 'sqlite' | 'postgres'; urls: string[] }[] = [
      { config: 'sqlite ×1', engine: 'sqlite', urls: [sqlite.url(0)] },
    ];
    if ('set' in pg) {
      stops.push(
        () => pg.server.stop(),
        () => pg.set.stopAll(),
      );
      postgresMajor = pg.server.major;
      for (const n of [1, 2, 3])
        configs.push({
          config: `postgres ×${n}`,
          engine: 'postgres',
          urls: Array.from({ length: n }, (_, i) => pg.set.url(i)),
        });
    } else o.log?.(`replicas bench: PostgreSQL rows skipped: ${pg.skipped}`);
    const windows: ReplicasWindow[] = [];
    for (let rep = 0; rep < o.reps; rep++)
      for (let j = 0; j < configs.length; j++) {
        const c = configs[(j + rep) % configs.length] as (typeof configs)[number];
        const w = await window(rep, c.config, c.urls, o);
        windows.push(w);
        o.log?.(
          `rep ${rep + 1}/${o.reps} ${c.config}: ${w.callsPerSecond.toFixed(0)} calls/s, p50 ${(w.p50 / 1000).toFixed(1)} ms, p99 ${(w.p99 / 1000).toFixed(1)} ms, ${w.errors} errors`,
        );
        await sleep(200);
      }
    const summary = configs.map((c): ReplicasSummary => {
      const ws = windows.filter((w) => w.config === c.config);
      return {
        config: c.config,
        engine: c.engine,
        replicas: c.urls.length,
        callsPerSecond: spread(ws.map((w) => w.callsPerSecond)),
        p50Ms: spread(ws.map((w) => w.p50 / 1000)),
        p99Ms: spread(ws.map((w) => w.p99 / 1000)),
        errors: ws.reduce((a, w) => a + w.errors, 0),
      };
    });
    return {
      at: new Date().toISOString(),
      options: { reps: o.reps, windowMs: o.windowMs, warmMs: o.warmMs, concurrency: o.concurrency },
      cores: cpus().length,
      loadAverage: { before, after: loadavg() },
      postgresMajor,
      postgresSkipped: 'skipped' in pg ? pg.skipped : null,
      windows,
      summary,
    };
  } finally {
    for (const s of stops.reverse()) await s().catch(() => undefined);
  }
}

const f = (n: number, d = 1) => (Number.isFinite(n) ? n.toFixed(d) : '–');
const s = (x: { median: number; min: number; max: number }, d = 1) =>
  `${f(x.median, d)} (${f(x.min, d)}…${f(x.max, d)})`;

/** The section's table (markdown): one row per configuration. */
export function replicasTable(r: ReplicasBenchResult): string {
  const rows = r.summary.map(
    (x) => `| ${x.config} | ${s(x.callsPerSecond, 0)} | ${s(x.p50Ms)} | ${s(x.p99Ms)} | ${x.errors} |`,
  );
  return [
    `| at concurrency ${r.options.concurrency} | calls/s | p50 latency, ms | p99 latency, ms | errors |`,
    '|---|---|---|---|---|',
    ...rows,
    ...(r.postgresSkipped ? [`\nPostgreSQL rows missing: ${r.postgresSkipped}`] : []),
  ].join('\n');
}

/** The newest replicas run (bench/results/replicas-*.json) as BENCHMARKS.md's section. */
export function replicasSection(rel: (p: string) => string): string {
  const dir = join(REPO_ROOT, 'bench', 'results');
  const newest = readdirSync(dir)
    .filter((n) => /^replicas-.*\.json$/.test(n))
    .sort()
    .at(-1);
  if (!newest) return '(no replicas run saved: `npm run bench -- --replicas`)';
  const r = JSON.parse(readFileSync(join(dir, newest), 'utf8')) as ReplicasBenchResult;
  const la = (xs: number[]) => xs.map((x) => f(x, 1)).join(' / ');
  return [
    `[${newest}](${rel(join(dir, newest))}), \`npm run bench -- --replicas\` (bench/replicas.ts; also run by \`npm run bench\`): \`cmcp start\` on one SQLite file, and 1, 2 and 3 replicas on one PostgreSQL ${r.postgresMajor ?? ''} (a throw-away server with fsync and synchronous_commit on; each replica its own lease), all in dev mode (software attestation) with the same config, in front of the comparison's HTTP upstream (\`noop\`), every call with a fresh execution_id. ${r.options.concurrency} callers spread round-robin over a configuration's replicas; ${r.options.reps} repetitions of ${r.options.windowMs} ms windows after ${r.options.warmMs} ms of warm-up, the order rotating; median (min…max) over repetitions; latency at the client. Everything — the client, the gateways and PostgreSQL — shares ${r.cores} cores; load average ${la(r.loadAverage.before)} before and ${la(r.loadAverage.after)} after.`,
    replicasTable(r),
    'Here every replica, PostgreSQL and the client share the same cores, so a second or third replica adds no CPU: the PostgreSQL rows show what the shared store costs a call (a round trip per statement, each commit flushed), not how replicas on machines of their own scale.',
  ].join('\n\n');
}
