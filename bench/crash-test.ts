/**
 * `npm run crash-test` (docs/testing.md, the crash test): SIGKILLs a gateway on a fresh swtpm under load at
 * random moments, restarts it each time, then checks the record (testing/crash/). Prints the
 * counts and every violation; exits 1 on any violation, 0 otherwise. 127.0.0.1 only, bounded.
 *
 *   node dist/bench/crash-test.js [--kills 50] [--concurrency 8] [--min-up-ms 200] [--max-up-ms 1500]
 *     [--background-load N] [--keep]
 *
 * It prints its parameters and the machine's load average (os.loadavg) at start and end;
 * `--background-load N` runs N busy CPU spinners during the run (killed at its end) so a run at
 * a given load can be repeated.
 *
 * With `--replicas N --postgres`: N replicas, each on its own swtpm, on one
 * throw-away PostgreSQL (testing/postgres.ts), the load spread over them, a random replica
 * SIGKILLed and restarted each time, every `--pause-every`-th (default 5; 0: none) SIGSTOPped past its
 * lease's expiry first (testing/crash/replicas-run.ts; `--lease-ttl-ms`, default 3000), and every
 * `--fault-every`-th (default 3; 0: none) a PostgreSQL fault instead: backends terminated, a
 * server restart, a SIGSTOP of the server short of and past the lease ttl.
 */
import { type ChildProcess, spawn } from 'node:child_process';
import { mkdtempSync, rmSync } from 'node:fs';
import { loadavg, tmpdir } from 'node:os';
import { dirname, join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import { parseArgs } from 'node:util';
import { runReplicaCrashTest } from '../testing/crash/replicas-run.js';
import { runCrashTest } from '../testing/crash/run.js';
import { createDatabase, startPostgres } from '../testing/postgres.js';
import { provisionSwtpm, type SwtpmInstance, startSwtpm } from '../testing/swtpm.js';

const { values: a } = parseArgs({
  options: {
    kills: { type: 'string', default: '50' },
    concurrency: { type: 'string', default: '8' },
    'min-up-ms': { type: 'string', default: '200' },
    'max-up-ms': { type: 'string', default: '1500' },
    replicas: { type: 'string', default: '1' },
    postgres: { type: 'boolean', default: false },
    'lease-ttl-ms': { type: 'string', default: '3000' },
    'pause-every': { type: 'string', default: '5' },
    'fault-every': { type: 'string', default: '3' },
    'background-load': { type: 'string', default: '0' },
    keep: { type: 'boolean', default: false },
  },
});
const int = (name: string, s: string | undefined, min: number) => {
  const n = Number(s);
  if (!Number.isInteger(n) || n < min) {
    process.stderr.write(`crash-test: --${name} must be an integer ≥ ${min}\n`);
    process.exit(2);
  }
  return n;
};
const kills = int('kills', a.kills, 1);
const concurrency = int('concurrency', a.concurrency, 1);
const minUpMs = int('min-up-ms', a['min-up-ms'], 0);
const maxUpMs = Math.max(minUpMs, int('max-up-ms', a['max-up-ms'], 0));
const replicas = int('replicas', a.replicas, 1);
const leaseTtlMs = int('lease-ttl-ms', a['lease-ttl-ms'], 1000);
const pauseEvery = int('pause-every', a['pause-every'], 0);
const faultEvery = int('fault-every', a['fault-every'], 0);
const backgroundLoad = int('background-load', a['background-load'], 0);
if (backgroundLoad > 64) {
  process.stderr.write('crash-test: --background-load is at most 64\n');
  process.exit(2);
}
if (replicas > 1 !== a.postgres) {
  process.stderr.write('crash-test: --replicas N (N ≥ 2) and --postgres go together\n');
  process.exit(2);
}

const repoRoot = resolve(dirname(fileURLToPath(import.meta.url)), '..', '..');
const dir = mkdtempSync(join(tmpdir(), 'cmcp-crash-'));
const provisioned = await provisionSwtpm(join(dir, 'swtpm-template'));
const tpms: SwtpmInstance[] = [];
const load = () =>
  loadavg()
    .map((x) => x.toFixed(2))
    .join(' ');
console.log(
  `crash-test: kills ${kills}, concurrency ${concurrency}, up ${minUpMs}–${maxUpMs} ms, replicas ${replicas}` +
    (a.postgres ? `, lease ttl ${leaseTtlMs} ms, pause every ${pauseEvery}, fault every ${faultEvery}` : '') +
    `, background load ${backgroundLoad}; load average at start ${load()}`,
);
// Busy spinners: each a node process looping for at most 2 hours, killed in `finally`.
const spinners: ChildProcess[] = Array.from({ length: backgroundLoad }, () =>
  spawn(process.execPath, ['-e', 'const end = Date.now() + 7_200_000; while (Date.now() < end);'], {
    stdio: 'ignore',
  }),
);
let stopPostgres: () => Promise<void> = async () => undefined;
let failed = true;
try {
  for (let i = 0; i < replicas; i++)
    tpms.push(await startSwtpm({ templateStateDir: provisioned.stateDir, parentDir: dir }));
  const started = Date.now();
  const log = (line: string) => console.log(line);
  let summary: Record<string, unknown>;
  let violations: string[];
  if (a.postgres) {
    const pg = await startPostgres({ durable: true });
    stopPostgres = () => pg.stop();
    const r = await runReplicaCrashTest({
      kills,
      replicas,
      databaseUrl: await createDatabase(pg, 'cmcp_crash'),
      tctis: tpms.map((t) => t.tcti),
      concurrency,
      minUpMs,
      maxUpMs,
      leaseTtlMs,
      pauseEvery,
      postgres: pg,
      faultEvery,
      renewEveryMs: Math.floor(leaseTtlMs / 3),
      dir,
      repoRoot,
      log,
    });
    summary = {
      kills: r.kills,
      pauses: r.pauses,
      postgres_faults: r.faults,
      replicas,
      starts: r.starts,
      exit_codes: r.exitCodes,
      load: r.load,
      ...r.check.counts,
      receipts: r.receipts.receipts,
      receipt_sessions: r.receipts.sessions,
      consistency_proofs: r.receipts.consistencyProofs,
    };
    violations = [...r.check.violations, ...r.restartFailures, ...r.receipts.violations];
    r.exitCodes.forEach((c, i) => {
      if (c !== 0) violations.push(`replica ${i} exited ${c} after SIGTERM`);
    });
  } else {
    const r = await runCrashTest({
      kills,
      concurrency,
      minUpMs,
      maxUpMs,
      tcti: (tpms[0] as SwtpmInstance).tcti,
      dir,
      repoRoot,
      log,
    });
    summary = { kills: r.kills, last_exit_code: r.lastExitCode, load: r.load, ...r.check.counts };
    violations = [...r.check.violations];
    if (r.lastExitCode !== 0) violations.push(`the last gateway exited ${r.lastExitCode} after SIGTERM`);
  }
  console.log(JSON.stringify(summary, null, 2));
  for (const line of violations.slice(0, 50)) console.log(`VIOLATION ${line}`);
  console.log(
    `${violations.length} violation(s) in ${((Date.now() - started) / 1000).toFixed(1)} s; load average at end ${load()}`,
  );
  failed = violations.length > 0;
} finally {
  for (const p of spinners) p.kill('SIGKILL');
  for (const t of tpms) await t.stop();
  await stopPostgres();
  if (a.keep) console.log(`kept ${dir}`);
  else rmSync(dir, { recursive: true, force: true });
}
process.exit(failed ? 1 : 0);
