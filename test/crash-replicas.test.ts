/**
 * The short crash test on replicas (`npm run crash-test -- --replicas 3 --postgres` runs ≥ 50
 * kills; testing/crash/replicas-run.ts): three `cmcp start` replicas, each on its own swtpm, on
 * one real throw-away PostgreSQL, under load spread over them (calls with and without
 * execution_id, retries, sessions used across replicas); 8 disruptions — SIGKILLs of random
 * replicas (each restarted once its lease expired, one SIGSTOPped past its lease first) and the
 * four PostgreSQL faults (backends terminated, a server restart, the server SIGSTOPped short of
 * and past the lease ttl) — then a graceful stop of all: every rule of testing/crash/check.ts
 * must hold, and every lease ends sealed.
 */
import { existsSync, mkdtempSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { runReplicaCrashTest } from '../testing/crash/replicas-run.js';
import { createDatabase, type PostgresInstance, startPostgres } from '../testing/postgres.js';
import { startSwtpm } from '../testing/vitest-swtpm.js';
import { cleanup, REPO_ROOT } from './harness/gateway.js';
import { hasPostgres } from './harness/postgres.js';

const withPostgres = hasPostgres();
const dir = mkdtempSync(join(tmpdir(), 'cmcp-crash-replicas-'));
let server: PostgresInstance | null = null;
const tpms: Awaited<ReturnType<typeof startSwtpm>>[] = [];

beforeAll(async () => {
  if (!withPostgres) return;
  if (!existsSync(join(REPO_ROOT, 'dist', 'src', 'cli', 'main.js')))
    throw new Error('dist/ is missing: run `npm run build` first');
  server = await startPostgres({ durable: true });
  for (let i = 0; i < 3; i++) tpms.push(await startSwtpm());
}, 120_000);
afterAll(async () => {
  for (const t of tpms) await t.stop();
  await server?.stop();
  cleanup(dir);
});

describe.skipIf(!withPostgres)(
  'crash test on 3 replicas (4 kills, one a SIGSTOP past the lease; 4 PostgreSQL faults)',
  () => {
    it('no call ran without exactly one terminal entry, no execution ran twice, every chain and claim verifies, every lease sealed', async () => {
      const r = await runReplicaCrashTest({
        kills: 8,
        replicas: 3,
        postgres: server as PostgresInstance,
        faultEvery: 2,
        databaseUrl: await createDatabase(server as PostgresInstance, 'crash_replicas'),
        tctis: tpms.map((t) => t.tcti),
        dir,
        repoRoot: REPO_ROOT,
      });
      expect(r.check.violations).toEqual([]);
      expect(r.restartFailures).toEqual([]);
      expect(r.exitCodes).toEqual([0, 0, 0]);
      // Every answered call in a session has a receipt after the disruptions whose inclusion
      // proof reaches its checkpoint's root, and each session's checkpoints are consistent.
      expect(r.receipts.violations).toEqual([]);
      expect(r.receipts.receipts).toBeGreaterThan(10);
      expect(r.receipts.sessions).toBeGreaterThan(0);
      // Disruptions 2, 4, 6, 8 were the PostgreSQL faults, each once, every replica running after
      // each (else restartFailures names it); 1, 3, 5, 7 were kills, each followed by a start of
      // that replica; the fifth was a SIGSTOP past the lease first, whose resumed replica said
      // LEASE_LOST (else restartFailures names it).
      expect(r.faults).toEqual({ terminate: 1, restart: 1, pause_short: 1, pause_past_ttl: 1 });
      expect(r.starts.reduce((a, b) => a + b, 0)).toBe(3 + 4);
      expect(r.pauses).toBe(1);
      // The run exercised what it claims to: upstream work, answers, retries, sessions, sealing.
      expect(r.check.counts.upstreamRan).toBeGreaterThan(20);
      expect(r.load.answered).toBeGreaterThan(20);
      expect(r.load.sessionsClosed).toBeGreaterThan(0);
      expect(r.check.counts.executions).toBeGreaterThan(0);
      expect(r.check.counts.claims).toBeGreaterThan(0);
    }, 300_000);
  },
);
