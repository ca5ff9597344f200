/**
 * One measurement window of the comparison: `concurrency` callers share one subject for a fixed
 * time after a short warm-up; every call's latency is taken at the client (hrtime, µs), and the
 * subject's process is read through the probe (./probe.ts) before and after, for CPU per call,
 * event-loop delay and memory.
 */
import { existsSync, readFileSync, statSync } from 'node:fs';
import { join } from 'node:path';
import type { Subject } from './subjects.js';

/** What the probe reports (probe.ts). */
export interface ProbeSnapshot {
  pid: number;
  at_ms: number;
  cpu_us: { user: number; system: number };
  memory: { rss: number; heapUsed: number; heapTotal: number; external: number; arrayBuffers: number };
  eld_ns: { p50: number; p99: number; max: number; count: number };
}

/**
 * Asks the probe in `pid` for a snapshot (SIGUSR2) and waits for it (at most 3 s).
 * @throws when none comes (the process is gone or has no probe).
 */
export async function readProbe(probeDir: string, pid: number): Promise<ProbeSnapshot> {
  const file = join(probeDir, `probe-${pid}.json`);
  const before = existsSync(file) ? statSync(file).mtimeMs : 0;
  const asked = Date.now();
  process.kill(pid, 'SIGUSR2');
  const deadline = asked + 3000;
  for (;;) {
    await new Promise((r) => setTimeout(r, 10));
    if (existsSync(file) && statSync(file).mtimeMs !== before) {
      try {
        const s = JSON.parse(readFileSync(file, 'utf8')) as ProbeSnapshot;
        if (s.at_ms >= asked) return s;
      } catch {
        // being written
      }
    }
    if (Date.now() > deadline) throw new Error(`no probe answer from pid ${pid}`);
  }
}

export interface WindowResult {
  calls: number;
  errors: number;
  firstError: string | null;
  elapsedMs: number;
  callsPerSecond: number;
  /** Client-side latency percentiles (µs). */
  p50: number;
  p95: number;
  p99: number;
  /** CPU of the measured process per call (µs, user + system). */
  cpuPerCallUs: number;
  /** Event-loop delay p99 of the measured process over the window (ms). */
  eldP99Ms: number;
  rssBytes: number;
  heapUsedBytes: number;
}

/** The `p`-quantile (0..1) of sorted samples (nearest rank). */
export function quantile(sorted: number[], p: number): number {
  if (sorted.length === 0) return Number.NaN;
  return sorted[Math.min(sorted.length - 1, Math.max(0, Math.ceil(p * sorted.length) - 1))] as number;
}

async function drive(
  s: Subject,
  tool: 'noop' | 'blob',
  concurrency: number,
  ms: number,
  counter: { i: number },
  latencies: number[] | null,
): Promise<{ errors: number; firstError: string | null }> {
  const until = Date.now() + ms;
  let errors = 0;
  let firstError: string | null = null;
  const worker = async () => {
    while (Date.now() < until) {
      const t0 = process.hrtime.bigint();
      try {
        await s.call(tool, counter.i++);
        latencies?.push(Number(process.hrtime.bigint() - t0) / 1000);
      } catch (e) {
        errors += 1;
        firstError ??= (e as Error).message.slice(0, 300);
        if (errors > 50) throw new Error(`${s.name}/${s.transport}: too many errors: ${firstError}`);
      }
    }
  };
  await Promise.all(Array.from({ length: concurrency }, worker));
  return { errors, firstError };
}

/** Runs one window (module doc). */
export async function runWindow(
  s: Subject,
  o: { tool: 'noop' | 'blob'; concurrency: number; warmMs: number; ms: number; probeDir: string },
  counter: { i: number },
): Promise<WindowResult> {
  await drive(s, o.tool, o.concurrency, o.warmMs, counter, null);
  const a = await readProbe(o.probeDir, s.pid);
  const lat: number[] = [];
  const t0 = Date.now();
  const { errors, firstError } = await drive(s, o.tool, o.concurrency, o.ms, counter, lat);
  const elapsedMs = Date.now() - t0;
  const b = await readProbe(o.probeDir, s.pid);
  lat.sort((x, y) => x - y);
  const cpu = b.cpu_us.user + b.cpu_us.system - (a.cpu_us.user + a.cpu_us.system);
  return {
    calls: lat.length,
    errors,
    firstError,
    elapsedMs,
    callsPerSecond: (lat.length * 1000) / elapsedMs,
    p50: quantile(lat, 0.5),
    p95: quantile(lat, 0.95),
    p99: quantile(lat, 0.99),
    cpuPerCallUs: lat.length ? cpu / lat.length : Number.NaN,
    eldP99Ms: b.eld_ns.p99 / 1e6,
    rssBytes: b.memory.rss,
    heapUsedBytes: b.memory.heapUsed,
  };
}
