/**
 * The short crash test (`npm run crash-test` runs ≥ 50 kills; testing/crash/): 10 SIGKILLs of a
 * `cmcp start` gateway on swtpm under load at concurrency 8 — calls with and without
 * execution_id, retries, sessions opened and closed — each followed by a restart, then a
 * graceful stop; every rule of testing/crash/check.ts must hold.
 */
import { existsSync, mkdtempSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { checkCrashRun } from '../testing/crash/check.js';
import { runCrashTest } from '../testing/crash/run.js';
import { startSwtpm } from '../testing/vitest-swtpm.js';
import { cleanup, REPO_ROOT } from './harness/gateway.js';

let tpm: Awaited<ReturnType<typeof startSwtpm>>;
const dir = mkdtempSync(join(tmpdir(), 'cmcp-crash-test-'));

beforeAll(async () => {
  if (!existsSync(join(REPO_ROOT, 'dist', 'src', 'cli', 'main.js')))
    throw new Error('dist/ is missing: run `npm run build` first');
  tpm = await startSwtpm();
});
afterAll(async () => {
  await tpm?.stop();
  cleanup(dir);
});

describe('crash test (10 kills)', () => {
  it('no call ran without exactly one terminal entry, no execution ran twice, every chain and claim verifies', async () => {
    const r = await runCrashTest({ kills: 10, tcti: tpm.tcti, dir, repoRoot: REPO_ROOT });
    expect(r.check.violations).toEqual([]);
    expect(r.lastExitCode).toBe(0);
    // The run exercised what it claims to: upstream work, answers, retries, sessions, recovery.
    expect(r.check.counts.upstreamRan).toBeGreaterThan(20);
    expect(r.load.answered).toBeGreaterThan(20);
    expect(r.load.retries).toBeGreaterThan(0);
    expect(r.load.sessionsClosed).toBeGreaterThan(0);
    expect(r.check.counts.executions).toBeGreaterThan(0);
    expect(r.check.counts.claims).toBeGreaterThan(0);

    // The rules can fail: an upstream run without a record, or twice, is reported.
    const phantom = checkCrashRun(
      r.dbPath,
      'up.work',
      [
        { op: 'never-recorded', ms: 1 },
        { op: 'never-recorded', ms: 1 },
      ],
      [{ callId: 'no-such-call', entryHash: 'x', errorCode: null }],
    );
    expect(phantom.violations).toEqual(
      expect.arrayContaining([
        'upstream ran never-recorded: 0 forwarded terminal entries',
        'op never-recorded reached the upstream 2 times',
        'answered call no-such-call: 0 terminal entries',
      ]),
    );
  }, 300_000);
});
