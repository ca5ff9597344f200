/**
 * `npm run crash-test` (README "Crash test"): SIGKILLs a gateway on a fresh swtpm under load at
 * random moments, restarts it each time, then checks the record (testing/crash/). Prints the
 * counts and every violation; exits 1 on any violation, 0 otherwise. 127.0.0.1 only, bounded.
 *
 *   node dist/bench/crash-test.js [--kills 50] [--concurrency 8] [--min-up-ms 200] [--max-up-ms 1500] [--keep]
 */
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { dirname, join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import { parseArgs } from 'node:util';
import { runCrashTest } from '../testing/crash/run.js';
import { provisionSwtpm, startSwtpm } from '../testing/swtpm.js';

const { values: a } = parseArgs({
  options: {
    kills: { type: 'string', default: '50' },
    concurrency: { type: 'string', default: '8' },
    'min-up-ms': { type: 'string', default: '200' },
    'max-up-ms': { type: 'string', default: '1500' },
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

const repoRoot = resolve(dirname(fileURLToPath(import.meta.url)), '..', '..');
const dir = mkdtempSync(join(tmpdir(), 'cmcp-crash-'));
const provisioned = await provisionSwtpm(join(dir, 'swtpm-template'));
const tpm = await startSwtpm({ templateStateDir: provisioned.stateDir, parentDir: dir });
let failed = true;
try {
  const started = Date.now();
  const r = await runCrashTest({
    kills,
    concurrency,
    minUpMs,
    maxUpMs,
    tcti: tpm.tcti,
    dir,
    repoRoot,
    log: (line) => console.log(line),
  });
  console.log(
    JSON.stringify(
      { kills: r.kills, last_exit_code: r.lastExitCode, load: r.load, ...r.check.counts },
      null,
      2,
    ),
  );
  const violations = [...r.check.violations];
  if (r.lastExitCode !== 0) violations.push(`the last gateway exited ${r.lastExitCode} after SIGTERM`);
  for (const line of violations.slice(0, 50)) console.log(`VIOLATION ${line}`);
  console.log(`${violations.length} violation(s) in ${((Date.now() - started) / 1000).toFixed(1)} s`);
  failed = violations.length > 0;
} finally {
  await tpm.stop();
  if (a.keep) console.log(`kept ${dir}`);
  else rmSync(dir, { recursive: true, force: true });
}
process.exit(failed ? 1 : 0);
