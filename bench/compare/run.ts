/**
 * The comparison of `npm run bench` (issue 12 item 2): every subject of ./subjects.ts over the
 * HTTP and the stdio upstream, at each concurrency, with the trivial tool and the ~100 KB one,
 * in rounds that alternate the subjects (the order rotates each repetition, so drift on a shared
 * machine hits every subject alike). Each subject is compared with `direct` measured in the same
 * cell of the same repetition; the spread is over repetitions.
 */
import { closeSync, fdatasyncSync, openSync, rmSync, writeSync } from 'node:fs';
import { cpus, loadavg, totalmem } from 'node:os';
import { join } from 'node:path';
import { fsyncsPerCall, straceAvailable } from './fsyncs.js';
import { runWindow, type WindowResult } from './measure.js';
import {
  connectSubject,
  type Env,
  type Fleet,
  SUBJECTS,
  type Subject,
  type SubjectName,
  startFleet,
  type Transport,
} from './subjects.js';

export interface CompareOptions {
  reps: number;
  windowMs: number;
  warmMs: number;
  concurrencies: number[];
  tools: ('noop' | 'blob')[];
  transports: Transport[];
  /** Calls per fsync count (0: skip the strace pass). */
  fsyncCalls: number;
}

export interface WindowRow extends WindowResult {
  rep: number;
  transport: Transport;
  concurrency: number;
  tool: 'noop' | 'blob';
  subject: SubjectName;
}

/** Median, min and max of a list (NaN-free). */
export interface Spread {
  median: number;
  min: number;
  max: number;
}

export interface SummaryRow {
  transport: Transport;
  concurrency: number;
  tool: 'noop' | 'blob';
  subject: SubjectName;
  /** Latency added to the direct call of the same repetition (ms). */
  addedP50Ms: Spread;
  addedP95Ms: Spread;
  addedP99Ms: Spread;
  /** calls/s of the subject ÷ calls/s of direct, same repetition. */
  throughputRatio: Spread;
  callsPerSecond: Spread;
  cpuPerCallUs: Spread;
  eldP99Ms: Spread;
  rssMb: Spread;
}

export interface CompareResult {
  options: CompareOptions;
  windows: WindowRow[];
  summary: SummaryRow[];
  /** `<subject>/<transport>` → fsyncs per call of its process (strace), null if not counted. */
  fsyncsPerCall: Record<string, number | null>;
  fsyncMethod: string;
  /** 4 KB write + fdatasync latency of the bench's disk, before and after the windows (ms). */
  diskFsyncMs: { before: Spread & { p90: number }; after: Spread & { p90: number } };
  /** os.loadavg() before and after (1, 5, 15 min). */
  loadAverage: { before: number[]; after: number[] };
}

export function spread(xs: number[]): Spread {
  const s = xs.filter((x) => Number.isFinite(x)).sort((a, b) => a - b);
  if (s.length === 0) return { median: Number.NaN, min: Number.NaN, max: Number.NaN };
  const mid = s.length >> 1;
  const median = s.length % 2 ? (s[mid] as number) : ((s[mid - 1] as number) + (s[mid] as number)) / 2;
  return { median, min: s[0] as number, max: s[s.length - 1] as number };
}

function summarize(windows: WindowRow[]): SummaryRow[] {
  const out: SummaryRow[] = [];
  const key = (w: { transport: string; concurrency: number; tool: string }) =>
    `${w.transport}|${w.concurrency}|${w.tool}`;
  const cells = new Map<string, WindowRow[]>();
  for (const w of windows) cells.set(key(w), [...(cells.get(key(w)) ?? []), w]);
  for (const rows of cells.values()) {
    const first = rows[0] as WindowRow;
    for (const subject of SUBJECTS[first.transport]) {
      const mine = rows.filter((r) => r.subject === subject);
      const pairs = mine
        .map((m) => ({ m, d: rows.find((r) => r.subject === 'direct' && r.rep === m.rep) }))
        .filter((p): p is { m: WindowRow; d: WindowRow } => p.d !== undefined);
      out.push({
        transport: first.transport,
        concurrency: first.concurrency,
        tool: first.tool,
        subject,
        addedP50Ms: spread(pairs.map(({ m, d }) => (m.p50 - d.p50) / 1000)),
        addedP95Ms: spread(pairs.map(({ m, d }) => (m.p95 - d.p95) / 1000)),
        addedP99Ms: spread(pairs.map(({ m, d }) => (m.p99 - d.p99) / 1000)),
        throughputRatio: spread(pairs.map(({ m, d }) => m.callsPerSecond / d.callsPerSecond)),
        callsPerSecond: spread(mine.map((m) => m.callsPerSecond)),
        cpuPerCallUs: spread(mine.map((m) => m.cpuPerCallUs)),
        eldP99Ms: spread(mine.map((m) => m.eldP99Ms)),
        rssMb: spread(mine.map((m) => m.rssBytes / 2 ** 20)),
      });
    }
  }
  return out;
}

const fmt = (x: number, d = 2) => (Number.isFinite(x) ? x.toFixed(d) : '–');

/** Runs the comparison (module doc); progress lines go to stderr. */
export async function runCompare(env: Env, o: CompareOptions): Promise<CompareResult> {
  const diskBefore = fsyncLatencyMs(env.dir);
  const loadBefore = loadavg();
  const fleet: Fleet = await startFleet(env);
  const subjects = new Map<string, Subject>();
  const counter = { i: 0 };
  try {
    for (const t of o.transports)
      for (const n of SUBJECTS[t]) subjects.set(`${n}/${t}`, await connectSubject(env, fleet, n, t));
    const windows: WindowRow[] = [];
    const total =
      o.reps *
      o.transports.reduce((a, t) => a + SUBJECTS[t].length, 0) *
      o.concurrencies.length *
      o.tools.length;
    for (let rep = 0; rep < o.reps; rep++)
      for (const transport of o.transports)
        for (const concurrency of o.concurrencies)
          for (const tool of o.tools) {
            const names = SUBJECTS[transport];
            const order = names.map((_, k) => names[(k + rep) % names.length] as SubjectName);
            for (const subject of order) {
              const s = subjects.get(`${subject}/${transport}`) as Subject;
              const r = await runWindow(
                s,
                { tool, concurrency, warmMs: o.warmMs, ms: o.windowMs, probeDir: env.probeDir },
                counter,
              );
              windows.push({ rep, transport, concurrency, tool, subject, ...r });
              process.stderr.write(
                `[${windows.length}/${total}] rep ${rep} ${transport} c=${concurrency} ${tool} ${subject}: ` +
                  `p50 ${fmt(r.p50 / 1000)} ms, ${fmt(r.callsPerSecond, 0)}/s, cpu ${fmt(r.cpuPerCallUs, 0)} µs/call` +
                  `${r.errors ? `, ${r.errors} errors (${r.firstError})` : ''}\n`,
              );
            }
          }
    const fsyncs: Record<string, number | null> = {};
    const canTrace = o.fsyncCalls > 0 && straceAvailable();
    for (const [k, s] of subjects) {
      if (!canTrace || s.name === 'direct') continue;
      fsyncs[k] = await fsyncsPerCall(s, 'noop', o.fsyncCalls, counter);
      process.stderr.write(`fsyncs ${k}: ${fsyncs[k]} per call\n`);
    }
    return {
      diskFsyncMs: { before: diskBefore, after: fsyncLatencyMs(env.dir) },
      loadAverage: { before: loadBefore, after: loadavg() },
      options: o,
      windows,
      summary: summarize(windows),
      fsyncsPerCall: fsyncs,
      fsyncMethod: canTrace
        ? `strace -f -c -e trace=fsync,fdatasync -p <pid> over ${o.fsyncCalls} noop calls at concurrency 16, after the timed windows`
        : 'not counted (strace unavailable)',
    };
  } finally {
    for (const s of subjects.values()) await s.close().catch(() => undefined);
    await fleet.stop();
  }
}

/** The machine the run is on. */
export function machine() {
  const c = cpus();
  return {
    cpus: c.length,
    cpuModel: c[0]?.model ?? 'unknown',
    memoryGb: Math.round(totalmem() / 2 ** 30),
    platform: `${process.platform} ${process.arch}`,
  };
}

/**
 * This disk's commit latency as SQLite sees it with synchronous=FULL: `n` times a 4 KB write and
 * an fdatasync of a file in `dir` (ms). On a disk shared with other work it moves a lot, and a
 * cmcp call waits for one or two of them.
 */
export function fsyncLatencyMs(dir: string, n = 100): Spread & { p90: number } {
  const file = join(dir, 'fsync-probe');
  const fd = openSync(file, 'w');
  const page = Buffer.alloc(4096, 1);
  const xs: number[] = [];
  try {
    for (let i = 0; i < n; i++) {
      const t0 = process.hrtime.bigint();
      writeSync(fd, page, 0, page.length, (i % 16) * 4096);
      fdatasyncSync(fd);
      xs.push(Number(process.hrtime.bigint() - t0) / 1e6);
    }
  } finally {
    closeSync(fd);
    rmSync(file, { force: true });
  }
  xs.sort((a, b) => a - b);
  return { ...spread(xs), p90: xs[Math.floor(xs.length * 0.9)] as number };
}
