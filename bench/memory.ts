/**
 * `npm run bench -- --memory [--calls N]` (issue 12 item 8): `calls` trivial calls (default
 * 200,000) at concurrency 64 against cmcp light over its HTTP upstream (its database on tmpfs
 * when the machine has /dev/shm), bounded in time, with the
 * gateway's RSS and V8 heap sampled every 2 s through the probe (./compare/probe.ts). Memory is
 * called bounded when, over the second half of the run, the floor of the samples (see
 * {@link judgeMemory}) rises by less than max(16 MB, 10 % of its level) for RSS and less than
 * 8 MB for the heap: a leak proportional to calls grows on; caches that fill and stop do not.
 */
import { existsSync, mkdtempSync, rmSync } from 'node:fs';
import { join } from 'node:path';
import { linearRegression } from 'simple-statistics';
import { readProbe } from './compare/measure.js';
import { connectSubject, type Env, startFleet } from './compare/subjects.js';

export interface MemorySample {
  calls: number;
  atS: number;
  rssMb: number;
  heapUsedMb: number;
}

export interface MemoryResult {
  calls: number;
  elapsedS: number;
  callsPerSecond: number;
  errors: number;
  /** Where the gateway's database was (tmpfs or the bench folder). */
  database: string;
  samples: MemorySample[];
  /** Rise of the fitted line over the second half (MB). */
  rssRiseMb: number;
  heapRiseMb: number;
  rssLimitMb: number;
  heapLimitMb: number;
  bounded: boolean;
}

/**
 * Rise over the second half of the run of a least-squares line (MB against calls) through the
 * floor of the samples: the second half is cut into 8 runs of samples and each contributes its
 * lowest value, so the collector's sawtooth (heap used rises between collections and drops at
 * each) does not read as growth; a leak lifts the floor.
 */
function rise(samples: MemorySample[], pick: (s: MemorySample) => number): { rise: number; level: number } {
  const half = samples.slice(Math.floor(samples.length / 2));
  const buckets = 8;
  if (half.length < buckets * 2) return { rise: Number.NaN, level: Number.NaN };
  const floor: [number, number][] = [];
  for (let b = 0; b < buckets; b++) {
    const part = half.slice(
      Math.floor((b * half.length) / buckets),
      Math.floor(((b + 1) * half.length) / buckets),
    );
    const low = part.reduce((a, x) => (pick(x) < pick(a) ? x : a));
    floor.push([low.calls, pick(low)]);
  }
  const { m } = linearRegression(floor);
  const span = (half.at(-1) as MemorySample).calls - (half[0] as MemorySample).calls;
  return { rise: m * span, level: half.reduce((a, x) => a + pick(x), 0) / half.length };
}

/** The verdict on a run's samples (module doc). */
export function judgeMemory(samples: MemorySample[]): {
  rssRiseMb: number;
  heapRiseMb: number;
  rssLimitMb: number;
  heapLimitMb: number;
  bounded: boolean;
} {
  const rss = rise(samples, (x) => x.rssMb);
  const heap = rise(samples, (x) => x.heapUsedMb);
  const rssLimitMb = Math.max(16, rss.level * 0.1);
  const heapLimitMb = 8;
  return {
    rssRiseMb: rss.rise,
    heapRiseMb: heap.rise,
    rssLimitMb,
    heapLimitMb,
    bounded: rss.rise < rssLimitMb && heap.rise < heapLimitMb,
  };
}

/** Runs the memory mode (module doc). */
export async function runMemoryBench(
  env: Env,
  o: { calls: number; maxMs: number; concurrency: number },
): Promise<MemoryResult> {
  // The database on tmpfs when there is one: this mode is about memory, and on a disk shared with
  // other work every commit's fsync would bound the run to a fraction of its calls.
  const dbDir = existsSync('/dev/shm') ? mkdtempSync(join('/dev/shm', 'cmcp-memory-')) : undefined;
  const fleet = await startFleet({ ...env, logLevel: 'warn', dbDir }, ['cmcp-light']);
  const samples: MemorySample[] = [];
  let done = 0;
  let errors = 0;
  const t0 = Date.now();
  const sample = async (pid: number) => {
    const p = await readProbe(env.probeDir, pid);
    samples.push({
      calls: done,
      atS: (Date.now() - t0) / 1000,
      rssMb: p.memory.rss / 2 ** 20,
      heapUsedMb: p.memory.heapUsed / 2 ** 20,
    });
    return samples.at(-1) as MemorySample;
  };
  try {
    const s = await connectSubject(env, fleet, 'cmcp-light', 'http');
    const until = t0 + o.maxMs;
    let running = true;
    const sampler = (async () => {
      while (running) {
        const last = await sample(s.pid);
        process.stderr.write(
          `memory: ${last.calls} calls, RSS ${last.rssMb.toFixed(1)} MB, heap ${last.heapUsedMb.toFixed(1)} MB\n`,
        );
        await new Promise((r) => setTimeout(r, 2000));
      }
    })();
    let next = 0;
    const worker = async () => {
      while (next < o.calls && Date.now() < until) {
        const i = next++;
        try {
          await s.call('noop', i);
        } catch (e) {
          errors += 1;
          if (errors > 100) throw e;
        }
        done += 1;
      }
    };
    await Promise.all(Array.from({ length: o.concurrency }, worker));
    running = false;
    await sampler;
    await sample(s.pid);
    await s.close();
  } finally {
    await fleet.stop();
    if (dbDir) rmSync(dbDir, { recursive: true, force: true });
  }
  const elapsedS = (Date.now() - t0) / 1000;
  const v = judgeMemory(samples);
  const database = dbDir ? 'tmpfs (/dev/shm)' : 'the bench folder';
  const r = { calls: done, elapsedS, callsPerSecond: done / elapsedS, errors, database, samples, ...v };
  console.log(
    `memory: ${done} calls in ${elapsedS.toFixed(0)} s (${r.callsPerSecond.toFixed(0)}/s, ${errors} errors); ` +
      `over the second half the RSS floor rose ${v.rssRiseMb.toFixed(1)} MB (limit ${v.rssLimitMb.toFixed(1)}), ` +
      `the heap floor ${v.heapRiseMb.toFixed(1)} MB (limit ${v.heapLimitMb}): ${v.bounded ? 'bounded' : 'KEEPS GROWING'}`,
  );
  return r;
}
