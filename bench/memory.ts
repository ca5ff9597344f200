/**
 * `npm run bench -- --memory [--calls N]` (issue 12 item 8): `calls` trivial calls (default
 * 200,000) at concurrency 64 against cmcp light over its HTTP upstream, bounded in time, with the
 * gateway's RSS and V8 heap sampled every 2 s through the probe (./compare/probe.ts). Memory is
 * called bounded when a least-squares line through the second half of the samples (MB against
 * calls) rises by less than max(16 MB, 10 % of its level) for RSS and less than 8 MB for the heap
 * over that half: a leak proportional to calls grows on; caches that fill and stop do not.
 */
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
  samples: MemorySample[];
  /** Rise of the fitted line over the second half (MB). */
  rssRiseMb: number;
  heapRiseMb: number;
  rssLimitMb: number;
  heapLimitMb: number;
  bounded: boolean;
}

function rise(samples: MemorySample[], pick: (s: MemorySample) => number): { rise: number; level: number } {
  const half = samples.slice(Math.floor(samples.length / 2));
  if (half.length < 3) return { rise: Number.NaN, level: Number.NaN };
  const { m } = linearRegression(half.map((s) => [s.calls, pick(s)]));
  const span = (half.at(-1) as MemorySample).calls - (half[0] as MemorySample).calls;
  return { rise: m * span, level: half.reduce((a, s) => a + pick(s), 0) / half.length };
}

export async function runMemoryBench(
  env: Env,
  o: { calls: number; maxMs: number; concurrency: number },
): Promise<MemoryResult> {
  const fleet = await startFleet({ ...env, logLevel: 'warn' }, ['cmcp-light']);
  const samples: MemorySample[] = [];
  let done = 0;
  let errors = 0;
  const t0 = Date.now();
  try {
    const s = await connectSubject(env, fleet, 'cmcp-light', 'http');
    const until = t0 + o.maxMs;
    let running = true;
    const sampler = (async () => {
      while (running) {
        const p = await readProbe(env.probeDir, s.pid);
        samples.push({
          calls: done,
          atS: (Date.now() - t0) / 1000,
          rssMb: p.memory.rss / 2 ** 20,
          heapUsedMb: p.memory.heapUsed / 2 ** 20,
        });
        const last = samples.at(-1) as MemorySample;
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
    const p = await readProbe(env.probeDir, s.pid);
    samples.push({
      calls: done,
      atS: (Date.now() - t0) / 1000,
      rssMb: p.memory.rss / 2 ** 20,
      heapUsedMb: p.memory.heapUsed / 2 ** 20,
    });
    await s.close();
  } finally {
    await fleet.stop();
  }
  const elapsedS = (Date.now() - t0) / 1000;
  const rss = rise(samples, (x) => x.rssMb);
  const heap = rise(samples, (x) => x.heapUsedMb);
  const rssLimitMb = Math.max(16, rss.level * 0.1);
  const heapLimitMb = 8;
  const bounded = rss.rise < rssLimitMb && heap.rise < heapLimitMb;
  const r = {
    calls: done,
    elapsedS,
    callsPerSecond: done / elapsedS,
    errors,
    samples,
    rssRiseMb: rss.rise,
    heapRiseMb: heap.rise,
    rssLimitMb,
    heapLimitMb,
    bounded,
  };
  console.log(
    `memory: ${done} calls in ${elapsedS.toFixed(0)} s (${r.callsPerSecond.toFixed(0)}/s, ${errors} errors); ` +
      `over the second half RSS rose ${rss.rise.toFixed(1)} MB (limit ${rssLimitMb.toFixed(1)}), heap ${heap.rise.toFixed(1)} MB (limit ${heapLimitMb}): ` +
      `${bounded ? 'bounded' : 'KEEPS GROWING'}`,
  );
  return r;
}
