/**
 * `npm run bench -- --profile [--label L] [--cmcp-root DIR]`: cmcp full (./compare/subjects.ts)
 * started with `--cpu-prof`, driven with `calls` trivial calls at a fixed concurrency, half over
 * its HTTP upstream and half over its stdio one, then stopped (SIGTERM: the profile is written at
 * exit). Returns the busy CPU time per call and the top self-time functions (./cpuprofile-top.ts);
 * `--cmcp-root` profiles another build (e.g. the commit before a change) with the same driver.
 */
import { copyFileSync, mkdirSync, readdirSync } from 'node:fs';
import { basename, join } from 'node:path';
import { connectSubject, type Env, startFleet } from './compare/subjects.js';
import { formatTop, topSelfTime } from './cpuprofile-top.js';

export async function runCpuProfile(
  env: Env,
  o: { calls: number; concurrency: number; outDir: string; label: string },
): Promise<{
  calls: number;
  elapsedMs: number;
  busyMs: number;
  cpuPerCallUs: number;
  /** Share of busy time in better-sqlite3 transactions (statements, COMMIT, its fsync). */
  sqliteShare: number;
  /** Share of busy time in Wasm (cedar-wasm). */
  wasmShare: number;
  summary: string;
  top: string;
  profile: string;
}> {
  const profDir = join(env.dir, 'cpu-prof');
  mkdirSync(profDir, { recursive: true });
  const fleet = await startFleet({ ...env, cmcpNodeArgs: ['--cpu-prof', '--cpu-prof-dir', profDir] }, [
    'cmcp-full',
  ]);
  let elapsedMs = 0;
  let done = 0;
  try {
    const subjects = [
      await connectSubject(env, fleet, 'cmcp-full', 'http'),
      await connectSubject(env, fleet, 'cmcp-full', 'stdio'),
    ];
    const counter = { i: 0 };
    const t0 = Date.now();
    const worker = async () => {
      while (done < o.calls) {
        const i = done++;
        await (subjects[i % 2] as (typeof subjects)[0]).call('noop', counter.i++);
      }
    };
    await Promise.all(Array.from({ length: o.concurrency }, worker));
    elapsedMs = Date.now() - t0;
    for (const s of subjects) await s.close();
  } finally {
    await fleet.stop();
  }
  const file = readdirSync(profDir).find((f) => f.endsWith('.cpuprofile'));
  if (!file) throw new Error('the gateway wrote no .cpuprofile (did it exit cleanly?)');
  const saved = join(o.outDir, `profile-${o.label}.cpuprofile`);
  copyFileSync(join(profDir, file), saved);
  const t = topSelfTime(saved, 25);
  const cpuPerCallUs = (t.busyMs * 1000) / done;
  const summary = `${done} calls (cmcp full, concurrency ${o.concurrency}, half HTTP, half stdio upstream) in ${(elapsedMs / 1000).toFixed(1)} s; gateway busy ${t.busyMs.toFixed(0)} ms of ${t.totalMs.toFixed(0)} ms sampled (${t.wasmMs.toFixed(0)} ms of it in cedar-wasm), so ${cpuPerCallUs.toFixed(0)} µs busy per call on the main thread (wall time in JS, native calls and Wasm, including waits inside SQLite's fsync; start-up and shutdown included).`;
  const top = formatTop(t.top);
  const sqliteShare = t.top.filter((x) => x.fn === 'sqliteTransaction').reduce((a, x) => a + x.share, 0);
  const wasmShare = t.busyMs > 0 ? t.wasmMs / t.busyMs : 0;
  console.log(`${summary}\n${top}`);
  return {
    calls: done,
    elapsedMs,
    busyMs: t.busyMs,
    cpuPerCallUs,
    sqliteShare,
    wasmShare,
    summary,
    top,
    profile: basename(saved),
  };
}
