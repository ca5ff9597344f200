/**
 * `npm run bench` (issue 12): the comparison of cmcp with a direct call, a TCP relay and the npm
 * stdio proxies (./compare/run.ts), written as JSON to bench/results/ and rendered into
 * BENCHMARKS.md (./compare/report.ts); then the execution_id section (./execution-id.ts), the
 * latency a relayed progress notification adds (./relayed-progress.ts) and verification speed per
 * evidence format (./verify.ts). The session-binding section (./session-binding.ts) runs before the
 * comparison so that BENCHMARKS.md carries its numbers.
 *
 *   npm run bench                  full comparison (5 repetitions, bounded to ~15 min on 2 cores)
 *   npm run bench -- --quick       3 short repetitions (a few minutes)
 *   npm run bench -- --memory      200,000 calls against cmcp light, RSS and heap sampled;
 *                                  exit 1 if they keep growing (./memory.ts)
 *   npm run bench -- --profile     CPU profile of cmcp full under load, top self time (./cpu-profile.ts)
 *   npm run bench -- --group-commit  cmcp full with group commit (with --store-worker also in the store
 *                                  worker) beside direct (./group-commit.ts; BENCHMARKS.md renders the newest run)
 *   npm run bench -- --render F    render BENCHMARKS.md again from a saved comparison (after new profiles)
 *   npm run bench -- --session-binding   sessions/s with and without batched bindings, swtpm and a 50 ms TPM
 *   npm run bench -- --loop-block  [--runs N]  the close, second close and export of a 10,000-entry session, on SQLite and on a PostgreSQL replica: the
 *                                  longest event-loop stall over N runs (20), MET/MISSED against
 *                                  3 ms, beside the machine's own reference (a fixed copy timed the
 *                                  same way, 30 s) (./loop-block.ts; also part of the full run's sections)
 *   npm run bench -- --cpu-side-by-side --cmcp-root DIR   gateway CPU per call of cmcp full, the
 *                                  build in DIR against this one, alternating windows (./cpu-side-by-side.ts)
 *   npm run bench -- --tls         only the TLS section (./tls.ts): tools/call p50 at c=1 and calls/s at
 *                                  c=64, plain HTTP against TLS 1.3 on the agent listener
 *   npm run bench -- --receipts  [--calls N]  only the receipts section (./receipts.ts): tools/call p50 at
 *                                  c=1 with checkpoints signed per window against a 10 s window, calls/s
 *                                  and checkpoint signatures per second at c=64
 *   npm run bench -- --replicas    only the replicas section (./replicas.ts): one gateway on SQLite, 1, 2, 3
 *                                  replicas on one PostgreSQL at concurrency 64; BENCHMARKS.md rendered
 *                                  again from the newest full comparison
 */
import { spawn } from 'node:child_process';
import { EventEmitter } from 'node:events';
import {
  existsSync,
  mkdirSync,
  mkdtempSync,
  readdirSync,
  readFileSync,
  rmSync,
  writeFileSync,
} from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { Command, InvalidArgumentError } from 'commander';
import { renderReport } from './compare/report.js';
import { type CompareOptions, type CompareResult, runCompare } from './compare/run.js';
import { runCpuProfile } from './cpu-profile.js';
import { runCpuSideBySide, sideBySideEnvs, sideBySideTable } from './cpu-side-by-side.js';
import { runExecutionIdBench } from './execution-id.js';
import { groupCommitTable, runGroupCommitBench } from './group-commit.js';
import { REPO_ROOT } from './load/profile.js';
import { runMemoryBench } from './memory.js';
import { runReceiptsBench } from './receipts.js';
import { runRelayedProgressBench, saveRelayedProgress } from './relayed-progress.js';
import { replicasTable, runReplicasBench } from './replicas.js';
import { runSessionBindingBench } from './session-binding.js';
import { runTlsBench } from './tls.js';
import { runVerifyBench } from './verify.js';

const int = (v: string) => {
  const n = Number(v);
  if (!Number.isSafeInteger(n) || n <= 0) throw new InvalidArgumentError('a positive integer');
  return n;
};

const program = new Command('bench')
  .option('--quick', 'short repetitions (a few minutes)')
  .option('--memory', 'bounded-memory mode: many calls, RSS and heap sampled')
  .option('--calls <n>', 'calls of the memory, profile or receipts mode', int)
  .option('--profile', 'CPU profile of cmcp full under load')
  .option('--group-commit', 'cmcp full with group commit off and on, side by side')
  .option(
    '--store-worker',
    'with --group-commit: also cmcp full with its writes in the store worker; with --profile: profile that',
  )
  .option('--label <name>', 'name of the saved profile (bench/results/profile-<name>.json)', 'after')
  .option('--cmcp-root <dir>', 'profile the cmcp built in this checkout (its dist/) instead of this one')
  .option('--concurrency <n>', 'concurrent callers of the profile mode', int, 16)
  .option('--transport <t>', 'upstream of the profile mode: http, stdio or both', 'both')
  .option('--db-dir <dir>', "folder of the profiled gateway's database (e.g. /dev/shm)")
  .option('--render <file>', 'only render BENCHMARKS.md again from a saved compare-full-*.json')
  .option('--session-binding', 'only the session-binding section (batched bindings, sessions/s)')
  .option(
    '--loop-block',
    'only the loop-block section (close, second close and export of a 10,000-entry session)',
  )
  .option('--runs <n>', 'runs of the loop-block section', int)
  .option('--no-sections', 'skip the execution_id, verification and loop-block sections')
  .option('--cpu-side-by-side', 'CPU per call of cmcp full: the --cmcp-root build against this one')
  .option('--reps <n>', 'repetitions of the side-by-side mode', int, 6)
  .option('--replicas', 'only the replicas section (SQLite, 1-3 PostgreSQL replicas at concurrency 64)')
  .option('--receipts', 'only the receipts section: checkpoint signing p50 at c=1, signatures/s at c=64')
  .option('--tls', 'only the TLS section: tools/call p50 at c=1 and calls/s at c=64, plain HTTP against TLS')
  .parse();
const opts = program.opts<{
  quick?: boolean;
  memory?: boolean;
  calls?: number;
  profile?: boolean;
  groupCommit?: boolean;
  storeWorker?: boolean;
  label: string;
  cmcpRoot?: string;
  concurrency: number;
  transport: string;
  dbDir?: string;
  render?: string;
  sessionBinding?: boolean;
  loopBlock?: boolean;
  runs?: number;
  cpuSideBySide?: boolean;
  reps: number;
  replicas?: boolean;
  tls?: boolean;
  receipts?: boolean;
  sections: boolean;
}>();

/**
 * The loop-block section, on both engines: a single gateway on SQLite, saved as
 * bench/results/loop-block-<stamp>.json, and a replica on PostgreSQL (as the replicas section,
 * a throw-away server), saved as loop-block-postgres-<stamp>.json. The gateway it measures runs
 * in a process of its own (bench/loop-block.ts), as a gateway does: in this process its heap
 * would be shared with everything the other sections left, and every young-generation pause with it.
 */
async function loopBlock(runs: number, machineSeconds: number): Promise<void> {
  for (const engine of ['sqlite', 'postgres'] as const) {
    console.log(
      `\n== a long session's close, second close and export on ${engine === 'sqlite' ? 'SQLite' : 'PostgreSQL (a replica)'}: longest event-loop stall (bench/loop-block.ts) ==`,
    );
    const out = join(resultsDir, `loop-block-${engine === 'sqlite' ? '' : 'postgres-'}${stamp}.json`);
    const script = fileURLToPath(new URL('./loop-block.js', import.meta.url));
    const args = [
      script,
      '--engine',
      engine,
      '--runs',
      String(runs),
      '--machine-seconds',
      String(machineSeconds),
    ];
    // Exit code 1 is a MISSED verdict, reported from the JSON below; anything else is a failure.
    const code = await new Promise<number | null>((resolve, reject) =>
      spawn(process.execPath, [...args, '--out', out], { stdio: 'inherit' })
        .on('error', reject)
        .on('exit', resolve),
    );
    if (code !== 0 && code !== 1) throw new Error(`bench/loop-block.js exited with ${code}`);
    if (!existsSync(out)) throw new Error(`bench/loop-block.js wrote no ${out}`);
  }
}

/** The session-binding section, saved as bench/results/session-binding-<stamp>.json. */
async function sessionBinding(quick: boolean): Promise<void> {
  console.log('\n== session binding: sessions/s with and without batching (bench/session-binding.ts) ==');
  const r = await runSessionBindingBench({ reps: quick ? 2 : 3, windowMs: quick ? 800 : 2000 });
  writeFileSync(join(resultsDir, `session-binding-${stamp}.json`), `${JSON.stringify(r, null, 2)}\n`);
}

/** The replicas section, saved as bench/results/replicas-<stamp>.json. */
async function replicas(quick: boolean): Promise<void> {
  console.log(
    '\n== replicas: one gateway on SQLite, 1, 2, 3 replicas on one PostgreSQL (bench/replicas.ts) ==',
  );
  const replicaDir = join(dir, 'replicas');
  mkdirSync(replicaDir);
  const r = await runReplicasBench({
    reps: quick ? 2 : 3,
    windowMs: quick ? 1500 : 3000,
    warmMs: 500,
    concurrency: 64,
    dir: replicaDir,
    log: (line) => console.log(line),
  });
  const file = join(resultsDir, `replicas-${stamp}.json`);
  writeFileSync(file, `${JSON.stringify(r, null, 2)}\n`);
  console.log(`${replicasTable(r)}\nresults: ${file}`);
}

/** BENCHMARKS.md rendered again from the newest saved full comparison (none: left as it is). */
async function renderNewest(): Promise<void> {
  const newest = readdirSync(resultsDir)
    .filter((n) => /^compare-full-.*\.json$/.test(n))
    .sort()
    .at(-1);
  if (!newest) return;
  const file = join(resultsDir, newest);
  const saved = JSON.parse(readFileSync(file, 'utf8')) as CompareResult & { elapsedS?: number };
  await renderReport(saved, { file, quick: false, elapsedS: saved.elapsedS ?? Number.NaN });
  console.log(`report: BENCHMARKS.md (rendered again from ${newest})`);
}

// 64 concurrent callers on one SDK stdio client wait for `drain` on the child's stdin together.
EventEmitter.defaultMaxListeners = 128;

const dir = mkdtempSync(join(tmpdir(), 'cmcp-bench-'));
const probeDir = join(dir, 'probe');
mkdirSync(probeDir);
const env = { dir, node: process.execPath, cmcpDist: join(opts.cmcpRoot ?? REPO_ROOT, 'dist'), probeDir };
const resultsDir = join(REPO_ROOT, 'bench', 'results');
mkdirSync(resultsDir, { recursive: true });
const stamp = new Date().toISOString().replace(/[:.]/g, '-');
let exitCode = 0;
try {
  if (opts.render) {
    const saved = JSON.parse(readFileSync(opts.render, 'utf8')) as CompareResult & { elapsedS?: number };
    const doc = await renderReport(saved, {
      file: opts.render,
      quick: false,
      elapsedS: saved.elapsedS ?? Number.NaN,
    });
    writeFileSync(opts.render, `${JSON.stringify(doc, null, 2)}\n`);
  } else if (opts.cpuSideBySide) {
    if (!opts.cmcpRoot)
      throw new InvalidArgumentError('--cpu-side-by-side needs --cmcp-root (the build before)');
    const sbsDb = opts.dbDir ? mkdtempSync(join(opts.dbDir, 'cmcp-sbs-')) : undefined;
    const base = { ...env, cmcpDist: join(REPO_ROOT, 'dist'), ...(sbsDb ? { dbDir: sbsDb } : {}) };
    const { before, after } = sideBySideEnvs(base, join(opts.cmcpRoot, 'dist'));
    for (const e of [before, after]) {
      mkdirSync(e.probeDir, { recursive: true });
      if (e.dbDir) mkdirSync(e.dbDir, { recursive: true });
    }
    try {
      const cells = await runCpuSideBySide(before, after, {
        reps: opts.reps,
        windowMs: 3000,
        warmMs: 300,
        concurrencies: [16, 64],
        transports: opts.transport === 'both' ? ['http', 'stdio'] : [opts.transport as 'http' | 'stdio'],
      });
      writeFileSync(
        join(resultsDir, `cpu-side-by-side-${stamp}.json`),
        `${JSON.stringify(cells, null, 2)}\n`,
      );
      console.log(sideBySideTable(cells));
    } finally {
      if (sbsDb) rmSync(sbsDb, { recursive: true, force: true });
    }
  } else if (opts.receipts) {
    await runReceiptsBench(opts.calls ?? (opts.quick ? 300 : 1000), opts.quick ? 2000 : 5000);
  } else if (opts.tls) {
    await runTlsBench(opts.quick ? 300 : 1000, opts.quick ? 2000 : 5000);
  } else if (opts.sessionBinding) {
    await sessionBinding(!!opts.quick);
  } else if (opts.loopBlock) {
    await loopBlock(opts.runs ?? (opts.quick ? 5 : 20), opts.quick ? 10 : 30);
  } else if (opts.replicas) {
    await replicas(!!opts.quick);
    if (!opts.quick) await renderNewest();
  } else if (opts.memory) {
    const r = await runMemoryBench(env, {
      calls: opts.calls ?? 200_000,
      maxMs: 12 * 60_000,
      concurrency: 64,
    });
    writeFileSync(join(resultsDir, `memory-${stamp}.json`), `${JSON.stringify(r, null, 2)}\n`);
    if (!r.bounded) exitCode = 1;
  } else if (opts.groupCommit) {
    const quick = !!opts.quick;
    const r = await runGroupCommitBench(env, {
      reps: quick ? 2 : 4,
      windowMs: quick ? 1500 : 3000,
      warmMs: 500,
      concurrencies: [1, 16, 64],
      fsyncCalls: quick ? 300 : 1000,
      worker: !!opts.storeWorker,
    });
    const file = join(resultsDir, `group-commit-${stamp}.json`);
    writeFileSync(file, `${JSON.stringify(r, null, 2)}\n`);
    console.log(`${groupCommitTable(r)}\nresults: ${file}`);
  } else if (opts.profile) {
    if (!['http', 'stdio', 'both'].includes(opts.transport))
      throw new InvalidArgumentError('--transport is http, stdio or both');
    const profDbDir = opts.dbDir ? mkdtempSync(join(opts.dbDir, 'cmcp-prof-')) : undefined;
    const profEnv = opts.storeWorker ? { ...env, cmcpConfig: { store: { worker: true } } } : env;
    const r = await runCpuProfile(profDbDir ? { ...profEnv, dbDir: profDbDir } : profEnv, {
      calls: opts.calls ?? 20_000,
      concurrency: opts.concurrency,
      transports: opts.transport === 'both' ? ['http', 'stdio'] : [opts.transport as 'http' | 'stdio'],
      outDir: resultsDir,
      label: opts.label,
    });
    writeFileSync(join(resultsDir, `profile-${opts.label}.json`), `${JSON.stringify(r, null, 2)}\n`);
    if (profDbDir) rmSync(profDbDir, { recursive: true, force: true });
  } else {
    const quick = !!opts.quick;
    const o: CompareOptions = {
      reps: quick ? 3 : 5,
      windowMs: quick ? 700 : 2500,
      warmMs: quick ? 200 : 400,
      concurrencies: [1, 16, 64],
      tools: ['noop', 'blob'],
      transports: ['http', 'stdio'],
      fsyncCalls: quick ? 200 : 1000,
    };
    if (opts.sections) {
      await sessionBinding(quick);
      await replicas(quick);
    }
    const t0 = Date.now();
    const r = await runCompare(env, o);
    const elapsedS = (Date.now() - t0) / 1000;
    if (opts.sections) {
      // Before the report: BENCHMARKS.md shows this run's relayed-progress result.
      console.log(
        '\n== a relayed progress notification, direct and through cmcp (bench/relayed-progress.ts) ==',
      );
      const progress = await runRelayedProgressBench(
        quick ? { reps: 3, rounds: 60 } : { reps: 5, rounds: 150 },
      );
      console.log(`results: ${saveRelayedProgress(progress)}`);
    }
    const file = join(resultsDir, `compare-${quick ? 'quick' : 'full'}-${stamp}.json`);
    const doc = { elapsedS, ...(await renderReport(r, { file, quick, elapsedS })) };
    writeFileSync(file, `${JSON.stringify(doc, null, 2)}\n`);
    console.log(`results: ${file}\nreport: BENCHMARKS.md`);
    if (opts.sections) {
      await runExecutionIdBench(quick ? 100 : 500);
      console.log('\n== verification speed per format ==');
      await runVerifyBench({ budgetMs: quick ? 300 : 1000 });
      await loopBlock(opts.runs ?? (quick ? 5 : 20), quick ? 10 : 30);
    }
  }
} finally {
  rmSync(dir, { recursive: true, force: true });
}
process.exit(exitCode);
