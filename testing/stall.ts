/**
 * The event loop's longest stall while some work runs, measured by a 1 ms timer: the longest
 * time between two of its ticks, as wall time and as the main thread's CPU time over that gap.
 * On a machine shared with other work the wall time also counts time the process was not
 * scheduled; the CPU time counts only what this thread did meanwhile (synchronous work, GC on
 * the main thread), but not a blocking wait (a busy handler's sleep, an fsync), which only the
 * wall time shows.
 *
 * The CPU time is clock_gettime(CLOCK_THREAD_CPUTIME_ID) (POSIX; Linux counts the running
 * slice to the nanosecond), called through koffi: process.threadCpuUsage (getrusage
 * RUSAGE_THREAD) advances only at scheduler ticks on this kernel (4 ms at HZ=250), so one
 * piece of 2 ms reads as 0 or 4 ms and could not hold a bound of a few ms.
 *
 * The GC pauses inside the longest gap are summed ({@link Stall.gcMs}) and its page faults
 * counted ({@link Stall.faults}). With STALL_TRACE=1 in the environment it prints what ran
 * inside that gap: the GC pauses (perf_hooks 'gc' entries; kind 1 is a scavenge) and any
 * performance.mark placed in the code under study, as offsets from the gap's start — which step
 * made the stall — and the gap's window on CLOCK_MONOTONIC in µs, the clock of a
 * `node --cpu-prof` profile's sample times and of `perf record -k CLOCK_MONOTONIC`, so that the
 * samples inside the gap can be picked out of either.
 */
import { type PerformanceEntry, PerformanceObserver, performance } from 'node:perf_hooks';
import koffi from 'koffi';

export interface Stall {
  /** Longest gap between two ticks, milliseconds of wall time. */
  wallMs: number;
  /** Longest main-thread CPU time spent inside one gap, milliseconds. */
  cpuMs: number;
  /** The longest (by CPU) gap's wall-clock window, performance.now() milliseconds. */
  window?: [number, number];
  /**
   * Milliseconds of GC pause (perf_hooks 'gc' entries, clipped to the window) inside the longest
   * gap: how much of {@link cpuMs} a collection, not the work under study, may account for.
   */
  gcMs: number;
  /**
   * Page faults the main thread took inside the longest (by CPU) gap (getrusage(RUSAGE_THREAD)
   * ru_minflt + ru_majflt, counted exactly, unlike its times): how much of the gap the kernel
   * may have spent mapping memory.
   */
  faults: number;
  /** Wall time the probe ran, milliseconds: the time a stall could have fallen in. */
  spanMs: number;
  /**
   * Longest main-thread CPU time of a gap that holds no GC pause (no perf_hooks 'gc' entry
   * overlaps it), milliseconds: the longest turn the work itself, not a collection's atomic
   * pause, held the loop. Only gaps over {@link WORK_GAP_FLOOR_MS} are kept, so 0 means none was
   * longer. An upper bound on the work: perf_hooks does not report incremental marking steps,
   * which may still fall inside such a gap.
   */
  workCpuMs: number;
}

/** Gaps with less main-thread CPU than this are not kept for {@link Stall.workCpuMs}, milliseconds. */
export const WORK_GAP_FLOOR_MS = 0.5;
/**
 * At most this many gaps are kept for {@link Stall.workCpuMs}, in arrays made once per
 * measurement (~0.8 MB), so a tick allocates nothing. A measurement here has ~1,000 of them per
 * second at most (the 1 ms timer on a busy loop); past the capacity the shortest kept gap gives
 * way to a longer one, so only a GC-free gap shorter than 32,768 others could be missed.
 */
const WORK_GAPS_KEPT = 1 << 15;

/** CLOCK_THREAD_CPUTIME_ID on Linux (<linux/time.h>). */
const CLOCK_THREAD_CPUTIME_ID = 3;
const libc = koffi.load('libc.so.6');
const Timespec = koffi.struct('cmcp_stall_timespec', { tv_sec: 'long', tv_nsec: 'long' });
const clockGettime = libc.func('clock_gettime', 'int', ['int', koffi.out(koffi.pointer(Timespec))]) as (
  clock: number,
  out: { tv_sec?: number; tv_nsec?: number },
) => number;
const ts: { tv_sec?: number; tv_nsec?: number } = {};
/** RUSAGE_THREAD (<sys/resource.h>, Linux): the calling thread's counts. */
const RUSAGE_THREAD = 1;
// struct rusage (getrusage(2), x86_64/aarch64 Linux): two timevals (16 bytes each), then fourteen
// longs; ru_minflt and ru_majflt are the 5th and 6th. Read from a reused buffer, so a tick makes no
// garbage (decoding the struct into an object each tick made the probe's own 4 ms turns).
const rusage = Buffer.alloc(144);
const getrusage = libc.func('getrusage', 'int', ['int', 'void *']) as (who: number, out: Buffer) => number;

/**
 * The calling thread's page faults so far (ru_minflt + ru_majflt), from the low 32 bits of each
 * little-endian long: a count far below 2^32 over any measurement here.
 */
export const faultsNow = (): number => {
  if (getrusage(RUSAGE_THREAD, rusage) !== 0) throw new Error('getrusage(RUSAGE_THREAD) failed');
  return rusage.readUInt32LE(32 + 4 * 8) + rusage.readUInt32LE(32 + 5 * 8);
};

/** The calling (main) thread's CPU time, milliseconds. */
export const cpuNow = (): number => {
  if (clockGettime(CLOCK_THREAD_CPUTIME_ID, ts) !== 0)
    throw new Error('clock_gettime(CLOCK_THREAD_CPUTIME_ID) failed');
  return (ts.tv_sec ?? 0) * 1000 + (ts.tv_nsec ?? 0) / 1e6;
};

/**
 * How the loop is probed. `timer`: a 1 ms interval; a gap between its ticks spans every turn of
 * the loop run meanwhile, so on a busy loop its CPU counts up to ~1 ms of the interval itself
 * besides the turn that held the tick. `turn`: a chain of immediates, one per iteration of the
 * loop, so a gap is exactly one iteration (every callback it ran): the longest time the loop was
 * held. The chain keeps the loop from sleeping in its poll, so the main thread is always
 * running: only the `turn` gaps' CPU, not the process's, is meaningful under it.
 */
export type StallProbe = 'timer' | 'turn';

/** Runs `work` with the probe on (the probe ticks once before `work` starts). */
export async function measureStall<T>(
  work: () => Promise<T> | T,
  probe: StallProbe = 'timer',
): Promise<{ value: T; stall: Stall }> {
  let wall = performance.now();
  let cpu = cpuNow();
  let faults = faultsNow();
  const began = wall;
  const stall: Stall = { wallMs: 0, cpuMs: 0, gcMs: 0, faults: 0, spanMs: 0, workCpuMs: 0 };
  // The gaps over WORK_GAP_FLOOR_MS: CPU ms, and their window's start and end (performance.now()).
  const gapCpu = new Float64Array(WORK_GAPS_KEPT);
  const gapFrom = new Float64Array(WORK_GAPS_KEPT);
  const gapTo = new Float64Array(WORK_GAPS_KEPT);
  let gapCount = 0;
  const keepGap = (c: number, from: number, to: number) => {
    let at = gapCount;
    if (gapCount < WORK_GAPS_KEPT) gapCount++;
    else {
      at = 0;
      for (let i = 1; i < WORK_GAPS_KEPT; i++) if ((gapCpu[i] as number) < (gapCpu[at] as number)) at = i;
      if ((gapCpu[at] as number) >= c) return;
    }
    gapCpu[at] = c;
    gapFrom[at] = from;
    gapTo[at] = to;
  };
  const tick = () => {
    const w = performance.now();
    const c = cpuNow();
    const f = faultsNow();
    stall.wallMs = Math.max(stall.wallMs, w - wall);
    if (c - cpu > WORK_GAP_FLOOR_MS) keepGap(c - cpu, wall, w);
    if (c - cpu > stall.cpuMs) {
      stall.cpuMs = c - cpu;
      stall.window = [wall, w];
      stall.faults = f - faults;
    }
    wall = w;
    cpu = c;
    faults = f;
  };
  let spinning = true;
  const spin = () => {
    if (!spinning) return; // measuring has ended: what runs next is not the work's
    tick();
    setImmediate(spin);
  };
  const timer = probe === 'timer' ? setInterval(tick, 1) : undefined;
  if (probe === 'turn') setImmediate(spin);
  const gcs: PerformanceEntry[] = [];
  const observer = new PerformanceObserver((l) => gcs.push(...l.getEntries()));
  observer.observe({ entryTypes: ['gc'] });
  try {
    await new Promise((resolve) => setTimeout(resolve, 5));
    const value = await work();
    // A stall at the end is seen once the timer ticks again.
    await new Promise((resolve) => setTimeout(resolve, 5));
    tick();
    spinning = false;
    stall.spanMs = performance.now() - began;
    // The observer's entries of the last gap arrive on a later turn.
    await new Promise((resolve) => setImmediate(resolve));
    const [from, to] = stall.window ?? [0, 0];
    for (const g of gcs)
      stall.gcMs += Math.max(0, Math.min(to, g.startTime + g.duration) - Math.max(from, g.startTime));
    for (let i = 0; i < gapCount; i++) {
      const [c, a, b] = [gapCpu[i] as number, gapFrom[i] as number, gapTo[i] as number];
      if (c > stall.workCpuMs && !gcs.some((g) => g.startTime < b && g.startTime + g.duration > a))
        stall.workCpuMs = c;
    }
    if (process.env.STALL_TRACE) traceWindow(stall, gcs);
    return { value, stall };
  } finally {
    spinning = false;
    clearInterval(timer);
    observer.disconnect();
  }
}

/** What the machine alone charges to fixed work ({@link machineNoise}). */
export interface MachineNoise {
  seconds: number;
  iterations: number;
  /** Mean main-thread CPU per iteration, microseconds. */
  meanUs: number;
  /** The most main-thread CPU one iteration was charged, milliseconds. */
  maxMs: number;
  /** Iterations charged more than {@link overMs}. */
  over: number;
  overMs: number;
}

/**
 * Fixed work timed the way {@link measureStall} times a gap: a 35 KB copy (an export page's size)
 * between two buffers touched beforehand, on the main thread, one iteration after another for
 * `seconds`. Its instructions never change and it allocates nothing, so an iteration charged
 * far more than the mean was charged by the machine (the scheduler, a hypervisor that runs while
 * the thread's clock goes on), not by the code: the floor under any bound on a turn's CPU here.
 * It holds the loop for all of `seconds`: a bench's reference, with nothing else to serve.
 */
export function machineNoise(seconds: number, overMs: number): MachineNoise {
  const from = Buffer.alloc(35 * 1024, 1);
  const to = Buffer.alloc(35 * 1024, 2);
  const end = performance.now() + seconds * 1000;
  let iterations = 0;
  let sum = 0;
  let maxMs = 0;
  let over = 0;
  while (performance.now() < end) {
    const c0 = cpuNow();
    from.copy(to);
    const c = cpuNow() - c0;
    iterations++;
    sum += c;
    if (c > maxMs) maxMs = c;
    if (c > overMs) over++;
  }
  return { seconds, iterations, meanUs: (sum / Math.max(1, iterations)) * 1000, maxMs, over, overMs };
}

/** `12.3 ms (cpu 4.5 ms)`. */
export const showStall = (s: Stall) => `${s.wallMs.toFixed(1)} ms (cpu ${s.cpuMs.toFixed(1)} ms)`;

/** CLOCK_MONOTONIC (process.hrtime) minus performance.now(), ms: places a window in a --cpu-prof profile. */
const monotonicOffsetMs = Number(process.hrtime.bigint()) / 1e6 - performance.now();

/** STALL_TRACE=1: prints the marks (performance.mark) and GC pauses inside the longest gap. */
function traceWindow(stall: Stall, gcs: PerformanceEntry[]): void {
  const [from, to] = stall.window ?? [0, 0];
  const inside = [...performance.getEntriesByType('mark'), ...gcs]
    .filter((e) => e.startTime + e.duration >= from - 0.5 && e.startTime <= to)
    .sort((a, b) => a.startTime - b.startTime)
    .map(
      (e) =>
        `${(e.startTime - from).toFixed(2)} ${e.name}${e.duration ? ` ${e.duration.toFixed(2)}ms` : ''}${e.entryType === 'gc' ? ` kind=${(e as unknown as { detail?: { kind?: number } }).detail?.kind}` : ''}`,
    );
  console.log(
    `STALL window ${(to - from).toFixed(2)} ms [${from.toFixed(2)}, ${to.toFixed(2)}] (monotonic µs ${Math.round((from + monotonicOffsetMs) * 1000)}–${Math.round((to + monotonicOffsetMs) * 1000)}) cpu ${stall.cpuMs.toFixed(2)} faults ${stall.faults}:\n  ${inside.join('\n  ')}`,
  );
  performance.clearMarks();
}
