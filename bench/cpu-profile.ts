/**
 * `npm run bench -- --profile [--label L] [--cmcp-root DIR] [--concurrency N] [--transport T]
 * [--db-dir DIR]`: cmcp full (./compare/subjects.ts) started with `--cpu-prof`, driven with
 * `calls` trivial calls at a fixed concurrency (default 16), over its HTTP upstream, its stdio one
 * or half each (default), then stopped (SIGTERM: the profile is written at exit). Returns the busy
 * CPU time per call and the top self-time and total-time functions (./cpuprofile-top.ts);
 * `--cmcp-root` profiles another build (e.g. the commit before a change) with the same driver;
 * `--db-dir /dev/shm` keeps the database on tmpfs so that fsync waits do not hide the CPU.
 */
import { copyFileSync, mkdirSync, readdirSync } from 'node:fs';
import { basename, join } from 'node:path';
import { connectSubject, type Env, type Subject, startFleet } from './compare/subjects.js';
import { formatTop, topSelfTime } from './cpuprofile-top.js';

export async function runCpuProfile(
  env: Env,
  o: {
    calls: number;
    concurrency: number;
    outDir: string;
    label: string;
    transports?: ('http' | 'stdio')[];
  },
): Promise<{
  calls: number;
  elapsedMs: number;
  busyMs: number;
  cpuPerCallUs: number;
  /** Share of busy time in better-sqlite3 transactions (statements, COMMIT, its fsync). */
  sqliteShare: number;
  /** Share of busy time in Wasm (cedar-wasm). */
  wasmShare: number;
  /**
   * Main-thread self time per call in the store (better-sqlite3 and the statements it runs,
   * the audit chain, registry, attempt log, store/) and in hashing (node's crypto hash, JCS), µs:
   * what a store worker (config store.worker) moves off the event loop.
   */
  storeUsPerCall: number;
  hashUsPerCall: number;
  summary: string;
  top: string;
  topTotal: string;
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
    const transports = o.transports ?? ['http', 'stdio'];
    const subjects: Subject[] = [];
    for (const t of transports) subjects.push(await connectSubject(env, fleet, 'cmcp-full', t));
    const counter = { i: 0 };
    const t0 = Date.now();
    const worker = async () => {
      while (done < o.calls) {
        const i = done++;
        await (subjects[i % subjects.length] as Subject).call('noop', counter.i++);
      }
    };
    await Promise.all(Array.from({ length: o.concurrency }, worker));
    elapsedMs = Date.now() - t0;
    for (const s of subjects) await s.close();
  } finally {
    await fleet.stop();
  }
  // The main thread's (thread id 0 in CPU.<date>.<time>.<pid>.<tid>.<seq>.cpuprofile): a store
  // worker (config store.worker) writes its own profile beside it.
  const file = readdirSync(profDir).find((f) => /^CPU\.\d+\.\d+\.\d+\.0\.\d+\.cpuprofile$/.test(f));
  if (!file) throw new Error('the gateway wrote no .cpuprofile (did it exit cleanly?)');
  const saved = join(o.outDir, `profile-${o.label}.cpuprofile`);
  copyFileSync(join(profDir, file), saved);
  const t = topSelfTime(saved, 25);
  const cpuPerCallUs = (t.busyMs * 1000) / done;
  const over = (o.transports ?? ['http', 'stdio']).join(' + ');
  const summary = `${done} calls (cmcp full, concurrency ${o.concurrency}, ${over} upstream${env.dbDir ? `, database in ${env.dbDir}` : ''}) in ${(elapsedMs / 1000).toFixed(1)} s; gateway busy ${t.busyMs.toFixed(0)} ms of ${t.totalMs.toFixed(0)} ms sampled (${t.wasmMs.toFixed(0)} ms of it in cedar-wasm), so ${cpuPerCallUs.toFixed(0)} µs busy per call on the main thread (wall time in JS, native calls and Wasm, including waits inside SQLite's fsync; start-up and shutdown included).`;
  const top = formatTop(t.top);
  const topTotal = formatTop(t.topTotal);
  const sqliteShare = t.top.filter((x) => x.fn === 'sqliteTransaction').reduce((a, x) => a + x.share, 0);
  const wasmShare = t.busyMs > 0 ? t.wasmMs / t.busyMs : 0;
  const all = topSelfTime(saved, Number.POSITIVE_INFINITY).top;
  const perCall = (re: RegExp) =>
    (all.filter((x) => re.test(x.where)).reduce((a, x) => a + x.selfMs, 0) * 1000) / done;
  const storeUsPerCall = perCall(
    /^(better-sqlite3\/|src\/audit\/|src\/store\/|src\/execution\/registry|src\/call\/(attempts|record|recovery)\.)/,
  );
  const hashUsPerCall = perCall(/^(node:internal\/crypto\/hash|canonicalize\/)/);
  console.log(
    `main-thread self time per call: store ${storeUsPerCall.toFixed(0)} µs, hashing ${hashUsPerCall.toFixed(0)} µs`,
  );
  console.log(`${summary}\nself time\n${top}\ntotal time\n${topTotal}`);
  return {
    calls: done,
    elapsedMs,
    busyMs: t.busyMs,
    cpuPerCallUs,
    sqliteShare,
    wasmShare,
    storeUsPerCall,
    hashUsPerCall,
    summary,
    top,
    topTotal,
    profile: basename(saved),
  };
}
