/**
 * `npm run bench -- --group-commit` (issue 12 items 5 and 6): cmcp full over its HTTP upstream
 * (TPM on swtpm, the example policy, the catalog, an execution_id on every call,
 * synchronous=FULL) with group commit on, and with `--worker` also in the store worker, side by
 * side in one run: a gateway each (its own swtpm, upstream and database), windows that alternate
 * between them (the order rotates each repetition), `direct` measured in the same rounds for the
 * ratio. A `cmcp start` gateway can no longer turn group commit off (the `CMCP_GROUP_COMMIT`
 * switch is gone), so runs since have no off row; older results keep theirs, and
 * bench/execution-id.ts still counts commits with it off and on, in process. Reports calls/s,
 * client latency, gateway CPU per call and event-loop delay p99 at each concurrency, and fsyncs
 * per call (strace) at the highest, with the load average before and after. Results go to
 * bench/results/group-commit-<stamp>.json; BENCHMARKS.md renders the newest.
 */
import { mkdirSync } from 'node:fs';
import { loadavg } from 'node:os';
import { join } from 'node:path';
import { fsyncsPerCall, straceAvailable } from './compare/fsyncs.js';
import { runWindow, type WindowResult } from './compare/measure.js';
import { fsyncLatencyMs, type Spread, spread } from './compare/run.js';
import { connectSubject, type Env, type Fleet, type Subject, startFleet } from './compare/subjects.js';

/** `group-commit-off`: only in results recorded while the environment switch existed. */
export type Variant = 'direct' | 'group-commit-off' | 'group-commit-on' | 'store-worker';

export interface GroupCommitRow {
  variant: Variant;
  concurrency: number;
  callsPerSecond: Spread;
  /** calls/s ÷ direct's calls/s in the same repetition. */
  throughputRatio: Spread;
  p50Ms: Spread;
  p99Ms: Spread;
  cpuPerCallUs: Spread;
  eldP99Ms: Spread;
}

export interface GroupCommitResult {
  reps: number;
  windowMs: number;
  windows: (WindowResult & { rep: number; concurrency: number; variant: Variant })[];
  rows: GroupCommitRow[];
  /** fsyncs per call at the highest concurrency (strace), null when not counted. */
  fsyncsPerCall: Record<Variant, number | null>;
  fsyncConcurrency: number;
  loadAverage: { before: number[]; after: number[] };
  diskFsyncMs: { before: Spread & { p90: number }; after: Spread & { p90: number } };
}

/** The gateways' environment and config per variant (`store-worker`: group commit in the store worker). */
const GATEWAYS: Record<
  Exclude<Variant, 'direct' | 'group-commit-off'>,
  Pick<Env, 'cmcpEnv' | 'cmcpConfig'>
> = {
  'group-commit-on': {},
  'store-worker': { cmcpConfig: { store: { worker: true } } },
};

/** Runs the comparison (module doc); progress lines go to stderr. */
export async function runGroupCommitBench(
  env: Env,
  o: {
    reps: number;
    windowMs: number;
    warmMs: number;
    concurrencies: number[];
    fsyncCalls: number;
    /** Also measure the store worker (store/sqlite/write-worker.ts). */
    worker?: boolean;
  },
): Promise<GroupCommitResult> {
  const gateways = (Object.keys(GATEWAYS) as (keyof typeof GATEWAYS)[]).filter(
    (v) => o.worker || v !== 'store-worker',
  );
  const VARIANTS: Variant[] = ['direct', ...gateways];
  const loadBefore = loadavg();
  const diskBefore = fsyncLatencyMs(env.dir);
  const fleets: Fleet[] = [];
  const subjects = new Map<Variant, Subject>();
  const counter = { i: 0 };
  try {
    for (const v of gateways) {
      const dir = join(env.dir, v);
      mkdirSync(dir, { recursive: true });
      const e: Env = { ...env, dir, ...GATEWAYS[v] };
      const fleet = await startFleet(e, ['cmcp-full']);
      fleets.push(fleet);
      subjects.set(v, await connectSubject(e, fleet, 'cmcp-full', 'http'));
      if (v === 'group-commit-on') subjects.set('direct', await connectSubject(e, fleet, 'direct', 'http'));
    }
    const windows: GroupCommitResult['windows'] = [];
    for (let rep = 0; rep < o.reps; rep++)
      for (const concurrency of o.concurrencies)
        for (let k = 0; k < VARIANTS.length; k++) {
          const variant = VARIANTS[(k + rep) % VARIANTS.length] as Variant;
          const r = await runWindow(
            subjects.get(variant) as Subject,
            { tool: 'noop', concurrency, warmMs: o.warmMs, ms: o.windowMs, probeDir: env.probeDir },
            counter,
          );
          windows.push({ rep, concurrency, variant, ...r });
          process.stderr.write(
            `rep ${rep} c=${concurrency} ${variant}: ${r.callsPerSecond.toFixed(0)}/s, p50 ${(r.p50 / 1000).toFixed(2)} ms, ` +
              `cpu ${r.cpuPerCallUs.toFixed(0)} µs/call, eld p99 ${r.eldP99Ms.toFixed(1)} ms` +
              `${r.errors ? `, ${r.errors} errors (${r.firstError})` : ''}\n`,
          );
        }
    const top = Math.max(...o.concurrencies);
    const fsyncs: Record<Variant, number | null> = {
      direct: null,
      'group-commit-off': null,
      'group-commit-on': null,
      'store-worker': null,
    };
    if (o.fsyncCalls > 0 && straceAvailable())
      for (const v of gateways) {
        fsyncs[v] = await fsyncsPerCall(subjects.get(v) as Subject, 'noop', o.fsyncCalls, counter, top);
        process.stderr.write(`fsyncs ${v}: ${fsyncs[v]} per call at c=${top}\n`);
      }
    return {
      reps: o.reps,
      windowMs: o.windowMs,
      windows,
      rows: summarize(windows, o.concurrencies, VARIANTS),
      fsyncsPerCall: fsyncs,
      fsyncConcurrency: top,
      loadAverage: { before: loadBefore, after: loadavg() },
      diskFsyncMs: { before: diskBefore, after: fsyncLatencyMs(env.dir) },
    };
  } finally {
    for (const s of subjects.values()) await s.close().catch(() => undefined);
    for (const f of fleets) await f.stop();
  }
}

function summarize(
  windows: GroupCommitResult['windows'],
  concurrencies: number[],
  variants: Variant[],
): GroupCommitRow[] {
  const rows: GroupCommitRow[] = [];
  for (const concurrency of concurrencies)
    for (const variant of variants) {
      const mine = windows.filter((w) => w.concurrency === concurrency && w.variant === variant);
      const direct = (rep: number) =>
        windows.find((w) => w.concurrency === concurrency && w.variant === 'direct' && w.rep === rep);
      rows.push({
        variant,
        concurrency,
        callsPerSecond: spread(mine.map((w) => w.callsPerSecond)),
        throughputRatio: spread(
          mine.map((w) => w.callsPerSecond / (direct(w.rep)?.callsPerSecond ?? Number.NaN)),
        ),
        p50Ms: spread(mine.map((w) => w.p50 / 1000)),
        p99Ms: spread(mine.map((w) => w.p99 / 1000)),
        cpuPerCallUs: spread(mine.map((w) => w.cpuPerCallUs)),
        eldP99Ms: spread(mine.map((w) => w.eldP99Ms)),
      });
    }
  return rows;
}

const f = (x: number, d = 2) => (Number.isFinite(x) ? x.toFixed(d) : '–');
const sp = (s: Spread, d = 2) => `${f(s.median, d)} (${f(s.min, d)}…${f(s.max, d)})`;

/** The result as a Markdown table (BENCHMARKS.md and the console). */
export function groupCommitTable(r: GroupCommitResult): string {
  const head =
    '| subject | concurrency | calls/s | share of direct | p50 ms | p99 ms | CPU µs/call | event-loop p99 ms | fsyncs/call |\n' +
    '|---|---:|---:|---:|---:|---:|---:|---:|---:|';
  const body = r.rows.map((x) => {
    const fs = x.concurrency === r.fsyncConcurrency ? r.fsyncsPerCall[x.variant] : null;
    return `| ${x.variant === 'direct' ? 'direct' : `cmcp full, ${x.variant}`} | ${x.concurrency} | ${sp(x.callsPerSecond, 0)} | ${x.variant === 'direct' ? '–' : sp(x.throughputRatio)} | ${sp(x.p50Ms)} | ${sp(x.p99Ms)} | ${sp(x.cpuPerCallUs, 0)} | ${sp(x.eldP99Ms, 1)} | ${fs === null ? '–' : f(fs)} |`;
  });
  return [head, ...body].join('\n');
}
