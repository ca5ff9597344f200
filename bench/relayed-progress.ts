/**
 * The latency a relayed progress notification adds (issue 10 item 10), side by side in one
 * run, and whether the streamed path adds no more than the JSON path.
 *
 * Two conformance fixtures (testing/conformance/fixture-server.ts) stand upstream: one answers
 * on SSE as SDK servers do by default, one answers every POST as JSON. One gateway has both as
 * upstreams. Four paths make the same `test_progress_steps {steps}` call with the official SDK
 * client:
 *   streamed direct   client → SSE fixture, with a progress token: `steps` notifications, SSE
 *   streamed via      client → cmcp → SSE fixture, the same, relayed on the gateway's SSE stream
 *   JSON direct       client → JSON fixture, no progress token: one JSON answer
 *   JSON via          client → cmcp → JSON fixture, the client accepting JSON only (cmcp answers JSON)
 * Each round makes one streamed call and two JSON calls (a and b) per path, in a shuffled
 * order, so drift and the other work on the machine hit every path alike; a repetition is
 * `rounds` rounds. Client, gateway and upstreams are three processes, as deployed: the gateway
 * is `cmcp start` (dev mode, software attestation, log level info, its database on tmpfs when
 * /dev/shm exists: the disk's fsync latency, shared with other work, is not what this
 * measures), the fixtures run in ./progress-fixtures.ts, the client in this process. Each progress notification carries its send time
 * (process.hrtime.bigint(): CLOCK_MONOTONIC, one clock for every process on the machine), so the
 * client measures its travel time.
 *
 * After the repetitions, alternated batches of streamed and JSON calls through each gateway
 * measure its CPU time per call and the TCP data segments per call (the gateway's to the
 * client, the upstream's to the gateway): counts of what reaches the wire, which other work on
 * the machine blurs far less than it blurs latency.
 *
 * Per repetition: added p50 (and p95) = the via path's percentile minus the direct path's.
 * Decision (stated so that it can fail): the excess of a repetition is the streamed path's added
 * p50 minus JSON-a's added p50; the noise floor is the largest |JSON-b added p50 − JSON-a added
 * p50| over the repetitions (an A/A comparison: the same path twice, so any difference is
 * noise). MET when the median excess over the repetitions is no larger than the noise floor.
 *
 * Run: `npm run bench:progress [-- --reps N --rounds N --steps N --cpu-prof DIR]`; also part of
 * `npm run bench` (bench/run.ts calls `runRelayedProgressBench`). Writes
 * bench/results/relayed-progress-*.json. `--cpu-prof DIR` starts the gateway with `--cpu-prof`
 * (its profile is written to DIR at exit; summarise it with bench/cpuprofile-top.ts).
 */
import { existsSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { loadavg, tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { StreamableHTTPClientTransport } from '@modelcontextprotocol/sdk/client/streamableHttp.js';
import { Command, InvalidArgumentError } from 'commander';
import { stopProc } from './compare/subjects.js';
import { REPO_ROOT } from './load/profile.js';
import { cpuUs, dataSegments, startFixtures, startGatewayProcess } from './progress-procs.js';

/** Percentile (nearest rank) of unsorted samples. */
function pct(samples: number[], p: number): number {
  const s = [...samples].sort((a, b) => a - b);
  return s[Math.min(s.length - 1, Math.floor(p * s.length))] as number;
}
const median = (xs: number[]) => pct(xs, 0.5);
const msText = (us: number) => (us / 1000).toFixed(3);
/** "median (min…max)" of per-repetition values in µs, printed in ms. */
const spread = (xs: number[]) =>
  `${msText(median(xs))} (${msText(Math.min(...xs))}…${msText(Math.max(...xs))})`;
const usSpread = (xs: number[]) =>
  `${median(xs).toFixed(0)} (${Math.min(...xs).toFixed(0)}…${Math.max(...xs).toFixed(0)})`;

/** A fetch that asks for JSON only on POST: the SDK client always accepts both. */
const jsonOnlyFetch: typeof fetch = (input, init) => {
  if (init?.method !== 'POST') return fetch(input, init);
  const headers = new Headers(init.headers);
  headers.set('accept', 'application/json');
  return fetch(input, { ...init, headers });
};

async function connect(url: string, jsonOnly = false): Promise<Client> {
  const c = new Client({ name: 'bench-progress', version: '1.0.0' });
  await c.connect(new StreamableHTTPClientTransport(new URL(url), jsonOnly ? { fetch: jsonOnlyFetch } : {}));
  return c;
}

/** Samples of one repetition, µs: whole-call latency per path, progress travel per route. */
interface Rep {
  call: Record<string, number[]>;
  travel: Record<string, number[]>;
}

/** What one gateway adds in one repetition, µs. */
export interface GatewaySummary {
  streamed: { p50: number; p95: number };
  json: { p50: number; p95: number };
  /** streamed added p50 − JSON added p50. */
  excess: number;
  /** One progress notification: upstream send → client, through this gateway. */
  travel: { p50: number; addedP50: number; addedP95: number };
}

/** CPU µs per call, one value per batch. */
export interface CpuSamples {
  streamed: number[];
  json: number[];
}

/** One repetition's summary, µs. */
export interface RepSummary {
  /** p50 of every path (streamedDirect, jsonDirectA, jsonDirectB, streamedVia, jsonViaA, …). */
  p50: Record<string, number>;
  travelDirectP50: number;
  cmcp: GatewaySummary;
  /** JSON-b through cmcp: the A/A check. */
  jsonB: { p50: number; p95: number };
  /** JSON-b added p50 − JSON-a added p50 (A/A: the same path twice). */
  noise: number;
  baseline?: GatewaySummary;
}

export type Verdict = 'MET' | 'MISSED' | 'INCONCLUSIVE';

export interface RelayedProgressResult {
  reps: number;
  rounds: number;
  steps: number;
  /** The checkout of the baseline gateway, when one ran beside this one, and its name in the report. */
  baselineRoot?: string;
  baselineLabel?: string;
  loadavgBefore: number[];
  loadavgAfter: number[];
  perRep: RepSummary[];
  /**
   * Each gateway's CPU time per call (/proc/<pid>/schedstat), µs: one value per batch of
   * `batchCalls` calls, streamed and JSON batches alternated.
   */
  gatewayCpuPerCall: { batchCalls: number } & Partial<Record<'cmcp' | 'baseline', CpuSamples>>;
  /**
   * TCP data segments per call in the same batches (./progress-procs.ts dataSegments; absent
   * without `ss`): the gateway's to its client, and the upstream's to the gateway. How many
   * writes reach the wire, whatever the load: a streamed answer the upstream sent in one segment
   * and the gateway relays in one costs the client one wakeup, as a JSON answer does.
   */
  segmentsPerCall?: Partial<Record<'cmcp' | 'baseline', { toClient: CpuSamples; fromUpstream: CpuSamples }>>;
  /** Median over repetitions of cmcp's `excess`, µs. */
  medianExcess: number;
  /** Largest |noise| over repetitions, µs. */
  noiseFloor: number;
  verdict: Verdict;
}

/** The repetitions cannot resolve a difference this share of the JSON path's added p50. */
const RESOLUTION = 0.2;

/**
 * The decision rule (module comment): MISSED when the median excess is above the noise floor;
 * INCONCLUSIVE when it is not but the noise floor is above RESOLUTION × the JSON path's added
 * p50 (too much other work on the machine to tell); MET otherwise.
 */
export function verdictOf(medianExcess: number, noiseFloor: number, jsonAddedP50: number): Verdict {
  if (medianExcess > noiseFloor) return 'MISSED';
  return noiseFloor > RESOLUTION * jsonAddedP50 ? 'INCONCLUSIVE' : 'MET';
}

function gatewaySummary(r: Rep, tag: string): GatewaySummary {
  const c = r.call as Record<string, number[]>;
  const added = (via: string, direct: string, p: number) =>
    pct(c[via] as number[], p) - pct(c[direct] as number[], p);
  const streamed = {
    p50: added(`streamedVia${tag}`, 'streamedDirect', 0.5),
    p95: added(`streamedVia${tag}`, 'streamedDirect', 0.95),
  };
  const json = {
    p50: added(`jsonViaA${tag}`, 'jsonDirectA', 0.5),
    p95: added(`jsonViaA${tag}`, 'jsonDirectA', 0.95),
  };
  const t = r.travel[`via${tag}`] as number[];
  const d = r.travel.direct as number[];
  return {
    streamed,
    json,
    excess: streamed.p50 - json.p50,
    travel: { p50: pct(t, 0.5), addedP50: pct(t, 0.5) - pct(d, 0.5), addedP95: pct(t, 0.95) - pct(d, 0.95) },
  };
}

function summarise(r: Rep, baseline: boolean): RepSummary {
  const c = r.call;
  const cmcp = gatewaySummary(r, '');
  const jsonB = {
    p50: pct(c.jsonViaB as number[], 0.5) - pct(c.jsonDirectB as number[], 0.5),
    p95: pct(c.jsonViaB as number[], 0.95) - pct(c.jsonDirectB as number[], 0.95),
  };
  return {
    p50: Object.fromEntries(Object.entries(c).map(([k, v]) => [k, pct(v, 0.5)])),
    travelDirectP50: pct(r.travel.direct as number[], 0.5),
    cmcp,
    jsonB,
    noise: jsonB.p50 - cmcp.json.p50,
    ...(baseline ? { baseline: gatewaySummary(r, 'Base') } : {}),
  };
}

function shuffled<T>(xs: readonly T[]): T[] {
  const a = [...xs];
  for (let i = a.length - 1; i > 0; i--) {
    const j = Math.floor(Math.random() * (i + 1));
    [a[i], a[j]] = [a[j] as T, a[i] as T];
  }
  return a;
}

/**
 * Runs the scenario and prints its report (save it with `saveRelayedProgress`).
 * @param o.reps repetitions; o.rounds rounds per repetition (one call per path each);
 *   o.steps progress notifications per streamed call; o.baselineRoot a checkout whose dist/
 *   runs as a second gateway beside this one, its calls interleaved with the others (an A/B
 *   comparison of two builds in one run); o.cpuProfDir profiles this gateway.
 */
export async function runRelayedProgressBench(
  o: {
    reps?: number;
    rounds?: number;
    steps?: number;
    baselineRoot?: string;
    baselineLabel?: string;
    cpuProfDir?: string;
  } = {},
): Promise<RelayedProgressResult> {
  const reps = o.reps ?? 5;
  const rounds = o.rounds ?? 100;
  const steps = o.steps ?? 5;
  const loadavgBefore = loadavg();
  const dir = mkdtempSync(join(existsSync('/dev/shm') ? '/dev/shm' : tmpdir(), 'cmcp-bench-progress-'));
  const fixtures = await startFixtures();
  const gateways = [
    { tag: '', ...(await startGatewayProcess(dir, 'cmcp', fixtures, REPO_ROOT, o.cpuProfDir)) },
  ];
  if (o.baselineRoot)
    gateways.push({ tag: 'Base', ...(await startGatewayProcess(dir, 'baseline', fixtures, o.baselineRoot)) });
  const clients: Client[] = [];
  const client = async (url: string, jsonOnly = false) => {
    const c = await connect(url, jsonOnly);
    clients.push(c);
    return c;
  };
  const args = { steps };
  type Call = (r: Rep) => Promise<unknown>;
  const streamed =
    (c: Client, name: string, route: string): Call =>
    (r) =>
      c.callTool({ name, arguments: args }, undefined, { onprogress: travel(r, route) });
  const plain =
    (c: Client, name: string): Call =>
    () =>
      c.callTool({ name, arguments: args });
  const sseDirect = await client(fixtures.sse);
  const jsonDirect = await client(fixtures.json);
  const calls: Record<string, Call> = {
    streamedDirect: streamed(sseDirect, 'test_progress_steps', 'direct'),
    jsonDirectA: plain(jsonDirect, 'test_progress_steps'),
    jsonDirectB: plain(jsonDirect, 'test_progress_steps'),
  };
  for (const g of gateways) {
    calls[`streamedVia${g.tag}`] = streamed(
      await client(`${g.url}/mcp`),
      's.test_progress_steps',
      `via${g.tag}`,
    );
    const viaJson = await client(`${g.url}/mcp`, true);
    calls[`jsonViaA${g.tag}`] = plain(viaJson, 'j.test_progress_steps');
    if (g.tag === '') calls.jsonViaB = plain(viaJson, 'j.test_progress_steps');
  }
  const paths = Object.keys(calls);
  const fresh = (): Rep => ({ call: Object.fromEntries(paths.map((k) => [k, []])), travel: {} });
  const round = async (r: Rep) => {
    for (const p of shuffled(paths)) {
      const t0 = process.hrtime.bigint();
      await (calls[p] as Call)(r);
      (r.call[p] as number[]).push(Number(process.hrtime.bigint() - t0) / 1000);
    }
  };
  const perRep: RepSummary[] = [];
  const batchCalls = 200;
  const cpu: RelayedProgressResult['gatewayCpuPerCall'] = { batchCalls };
  const segs: NonNullable<RelayedProgressResult['segmentsPerCall']> = {};
  try {
    // Warm-up (JIT, connections, the default session's genesis), not counted.
    const warm = fresh();
    for (let i = 0; i < 30; i++) await round(warm);
    for (let k = 0; k < reps; k++) {
      const r = fresh();
      for (let i = 0; i < rounds; i++) await round(r);
      perRep.push(summarise(r, gateways.length > 1));
    }
    // CPU per call: batches alternated, streamed and JSON, per gateway.
    for (let b = 0; b < 10; b++)
      for (const g of gateways) {
        const which = b % 2 === 0 ? 'streamed' : 'json';
        const call = calls[which === 'streamed' ? `streamedVia${g.tag}` : `jsonViaA${g.tag}`] as Call;
        const ports = [
          Number(new URL(g.url).port),
          Number(new URL(fixtures[which === 'streamed' ? 'sse' : 'json']).port),
        ] as const;
        const segments = () => [dataSegments(ports[0], 'sport'), dataSegments(ports[1], 'dport')] as const;
        const segsBefore = segments();
        const before = cpuUs(g.proc.pid);
        if (before === null) break;
        const scratch = fresh();
        for (let i = 0; i < batchCalls; i++) await call(scratch);
        const key = g.tag === '' ? 'cmcp' : 'baseline';
        const into = cpu[key] ?? { streamed: [], json: [] };
        cpu[key] = into;
        into[which].push(((cpuUs(g.proc.pid) as number) - before) / batchCalls);
        const [toClient, fromUpstream] = segments();
        if (toClient && fromUpstream && segsBefore[0] && segsBefore[1]) {
          const seg = segs[key] ?? {
            toClient: { streamed: [], json: [] },
            fromUpstream: { streamed: [], json: [] },
          };
          segs[key] = seg;
          seg.toClient[which].push((toClient.out - segsBefore[0].out) / batchCalls);
          seg.fromUpstream[which].push((fromUpstream.in - segsBefore[1].in) / batchCalls);
        }
      }
  } finally {
    for (const c of clients) await c.close();
    for (const g of gateways) await stopProc(g.proc);
    fixtures.proc.stdin?.end();
    await stopProc(fixtures.proc);
    rmSync(dir, { recursive: true, force: true });
  }
  const medianExcess = median(perRep.map((s) => s.cmcp.excess));
  const noiseFloor = Math.max(...perRep.map((s) => Math.abs(s.noise)));
  const result: RelayedProgressResult = {
    reps,
    rounds,
    steps,
    ...(o.baselineRoot
      ? { baselineRoot: o.baselineRoot, baselineLabel: o.baselineLabel ?? o.baselineRoot }
      : {}),
    loadavgBefore,
    loadavgAfter: loadavg(),
    perRep,
    gatewayCpuPerCall: cpu,
    ...(Object.keys(segs).length ? { segmentsPerCall: segs } : {}),
    medianExcess,
    noiseFloor,
    verdict: verdictOf(medianExcess, noiseFloor, median(perRep.map((s) => s.cmcp.json.p50))),
  };
  console.log(formatRelayedProgress(result));
  return result;
}

/** The `onprogress` that records each notification's travel time (its `sent_ns` to now) under `route`. */
function travel(r: Rep, route: string) {
  const into = r.travel[route] ?? [];
  r.travel[route] = into;
  return (p: { message?: string }) => {
    const sent = /sent_ns=(\d+)/.exec(p.message ?? '')?.[1];
    if (sent) into.push(Number(process.hrtime.bigint() - BigInt(sent)) / 1000);
  };
}

/** The text report (also the body of BENCHMARKS.md's section, bench/compare/report.ts). */
export function formatRelayedProgress(r: RelayedProgressResult): string {
  const col = (f: (s: RepSummary) => number) => spread(r.perRep.map(f));
  const la = (l: number[]) => l.map((x) => x.toFixed(1)).join(' / ');
  const cpu = r.gatewayCpuPerCall;
  const rows = (name: string, g: (s: RepSummary) => GatewaySummary, tag: string) => [
    `| streamed call (SSE, ${r.steps} progress notifications), ${name} | ${col((s) => s.p50.streamedDirect as number)} | ${col((s) => s.p50[`streamedVia${tag}`] as number)} | ${col((s) => g(s).streamed.p50)} | ${col((s) => g(s).streamed.p95)} |`,
    `| JSON call, ${name} | ${col((s) => s.p50.jsonDirectA as number)} | ${col((s) => s.p50[`jsonViaA${tag}`] as number)} | ${col((s) => g(s).json.p50)} | ${col((s) => g(s).json.p95)} |`,
    ...(tag === ''
      ? [
          `| JSON call again, ${name} (A/A check) | ${col((s) => s.p50.jsonDirectB as number)} | ${col((s) => s.p50.jsonViaB as number)} | ${col((s) => s.jsonB.p50)} | ${col((s) => s.jsonB.p95)} |`,
        ]
      : []),
    `| one progress notification (upstream send → client), ${name} | ${col((s) => s.travelDirectP50)} | ${col((s) => g(s).travel.p50)} | ${col((s) => g(s).travel.addedP50)} | ${col((s) => g(s).travel.addedP95)} |`,
  ];
  const cpuLine = (name: string, key: 'cmcp' | 'baseline') => {
    const c = cpu[key];
    return c ? [`- ${name}: streamed ${usSpread(c.streamed)} µs, JSON ${usSpread(c.json)} µs per call`] : [];
  };
  const segLine = (name: string, key: 'cmcp' | 'baseline') => {
    const x = r.segmentsPerCall?.[key];
    const m = (xs: number[]) => median(xs).toFixed(2);
    return x
      ? [
          `- ${name}: to the client streamed ${m(x.toClient.streamed)}, JSON ${m(x.toClient.json)}; from the upstream streamed ${m(x.fromUpstream.streamed)}, JSON ${m(x.fromUpstream.json)}`,
        ]
      : [];
  };
  const base = r.baselineRoot !== undefined;
  return [
    `${r.reps} repetitions × ${r.rounds} rounds (each round: one call per path, in a shuffled order); ${r.steps} progress notifications per streamed call; load average ${la(r.loadavgBefore)} before, ${la(r.loadavgAfter)} after (1 / 5 / 15 min). ms, "median (min…max)" over repetitions:`,
    '',
    '| | direct p50 | via the gateway p50 | added p50 | added p95 |',
    '|---|---|---|---|---|',
    ...rows('cmcp', (s) => s.cmcp, ''),
    ...(base ? rows(`baseline ${r.baselineLabel}`, (s) => s.baseline as GatewaySummary, 'Base') : []),
    '',
    `Gateway CPU per call (/proc/<pid>/schedstat, median (min…max) of ${cpu.cmcp?.streamed.length ?? 0} alternated batches of ${cpu.batchCalls} calls per path):`,
    ...cpuLine('cmcp', 'cmcp'),
    ...(base ? cpuLine(`baseline ${r.baselineLabel}`, 'baseline') : []),
    ...(r.segmentsPerCall
      ? [
          '',
          'TCP data segments per call in the same batches (median; `ss -ti` data_segs_out/in, segments with payload):',
          ...segLine('cmcp', 'cmcp'),
          ...(base ? segLine(`baseline ${r.baselineLabel}`, 'baseline') : []),
        ]
      : []),
    '',
    `Excess (streamed added p50 − JSON added p50), cmcp: ${col((s) => s.cmcp.excess)} ms${base ? `; baseline: ${col((s) => (s.baseline as GatewaySummary).excess)} ms` : ''}. Noise (JSON again − JSON, added p50): ${col((s) => s.noise)} ms.`,
    `Rule: MISSED when the median excess (${msText(r.medianExcess)} ms) is above the noise floor, the largest |noise| over the repetitions (${msText(r.noiseFloor)} ms); INCONCLUSIVE when it is not but the noise floor is above ${RESOLUTION * 100} % of the JSON call's added p50; else MET.`,
    `**${r.verdict}**: ${r.verdict === 'MET' ? 'the streamed path adds no more than the JSON path' : r.verdict === 'MISSED' ? 'the streamed path adds more than the JSON path' : 'too much other work on the machine to tell'}.`,
  ].join('\n');
}

/** Writes the result to bench/results/relayed-progress-<stamp>.json; @returns the file. */
export function saveRelayedProgress(r: RelayedProgressResult): string {
  const stamp = new Date().toISOString().replace(/[:.]/g, '-');
  const file = join(REPO_ROOT, 'bench', 'results', `relayed-progress-${stamp}.json`);
  writeFileSync(file, `${JSON.stringify(r, null, 2)}\n`);
  return file;
}

if (process.argv[1] && fileURLToPath(import.meta.url) === process.argv[1]) {
  const int = (v: string) => {
    const n = Number(v);
    if (!Number.isSafeInteger(n) || n <= 0) throw new InvalidArgumentError('a positive integer');
    return n;
  };
  const opts = new Command('bench:progress')
    .option('--reps <n>', 'repetitions', int, 5)
    .option('--rounds <n>', 'rounds per repetition', int, 100)
    .option('--steps <n>', 'progress notifications per streamed call', int, 5)
    .option('--baseline <dir>', 'a checkout whose dist/ runs as a second gateway (A/B in one run)')
    .option('--baseline-label <name>', 'what the baseline is called in the report (default: its directory)')
    .option('--cpu-prof <dir>', "write this gateway's CPU profile to <dir>")
    .option('--no-save', 'do not write bench/results/relayed-progress-*.json')
    .parse()
    .opts<{
      reps: number;
      rounds: number;
      steps: number;
      baseline?: string;
      baselineLabel?: string;
      cpuProf?: string;
      save: boolean;
    }>();
  const r = await runRelayedProgressBench({
    reps: opts.reps,
    rounds: opts.rounds,
    steps: opts.steps,
    ...(opts.baseline ? { baselineRoot: opts.baseline } : {}),
    ...(opts.baselineLabel ? { baselineLabel: opts.baselineLabel } : {}),
    ...(opts.cpuProf ? { cpuProfDir: opts.cpuProf } : {}),
  });
  if (opts.save) console.log(`results: ${saveRelayedProgress(r)}`);
}
