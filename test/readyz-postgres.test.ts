/**
 * /readyz's database check on PostgreSQL against a real throw-away server: a committed write of
 * the replica's probe row; with the server stopped (SIGSTOP to the postmaster and its backends:
 * connections open, no answer — as a hung host or a partition) the check answers `timeout`
 * within its deadline instead of hanging, and ready again once the server resumes.
 */
import { execFileSync } from 'node:child_process';
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import type pg from 'pg';
import pino from 'pino';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { CHECK_DEADLINE_MS, Readiness } from '../src/gateway/health/readiness.js';
import { migratePostgres } from '../src/store/migrations/postgres.js';
import { openReplicaPool } from '../src/store/postgres/transaction.js';
import { postgresWriteProbe } from '../src/store/postgres/write-probe.js';
import { SoftwareProvider } from '../src/tee/provider.js';
import { UpstreamPool } from '../src/upstream/pool.js';
import { createDatabase, type PostgresInstance, startPostgres } from '../testing/postgres.js';
import { hasPostgres } from './harness/postgres.js';

const withPostgres = hasPostgres();
const log = pino({ level: 'silent' });
let server: PostgresInstance | null = null;
let pool: pg.Pool;

/** The cluster's processes: the postmaster (postmaster.pid's first line) and its children. */
function clusterPids(s: PostgresInstance): number[] {
  const pm = Number(readFileSync(join(s.dir, 'data', 'postmaster.pid'), 'utf8').split('\n')[0]);
  const kids = execFileSync('pgrep', ['-P', String(pm)], { encoding: 'utf8' })
    .split('\n')
    .filter(Boolean);
  return [pm, ...kids.map(Number)];
}

function signalCluster(s: PostgresInstance, sig: NodeJS.Signals): void {
  for (const pid of clusterPids(s)) process.kill(pid, sig);
}

beforeAll(async () => {
  if (!withPostgres) return;
  server = await startPostgres();
  const url = await createDatabase(server, 'ready_1');
  // The replica's own statement cut is long here (a 60 s lease): only the client's deadline ends a wait.
  pool = openReplicaPool(url, { leaseTtlMs: 60_000, max: 4 });
  const c = await pool.connect();
  try {
    await migratePostgres(c, 'ready_1');
  } finally {
    c.release();
  }
}, 60_000);
afterAll(async () => {
  if (server) signalCluster(server, 'SIGCONT');
  await pool?.end();
  await server?.stop();
});

/** Waits past the reused report (1 s), then checks. */
async function checkAfterReuse(r: Readiness) {
  await new Promise((res) => setTimeout(res, 1100));
  const t0 = Date.now();
  const report = await r.check();
  return { report, ms: Date.now() - t0 };
}

describe.skipIf(!withPostgres)('readiness on PostgreSQL', () => {
  it('writes the probe row; a stopped server is `timeout` within the deadline, then ready again', async () => {
    const s = server as PostgresInstance;
    const r = new Readiness(
      postgresWriteProbe(pool, 'replica-r'),
      new UpstreamPool([], log),
      new SoftwareProvider(),
    );
    const ok = await r.check();
    expect(ok.ready).toBe(true);
    const row = await pool.query("SELECT probed_at FROM readiness_probe WHERE writer = 'replica-r'");
    expect(row.rows).toHaveLength(1);

    signalCluster(s, 'SIGSTOP');
    try {
      const { report, ms } = await checkAfterReuse(r);
      expect(report.ready).toBe(false);
      expect(report.checks.database).toBe('timeout');
      // The deadline, with a wide margin for a loaded machine.
      expect(ms).toBeLessThan(CHECK_DEADLINE_MS + 5000);
    } finally {
      signalCluster(s, 'SIGCONT');
    }
    let again = false;
    for (let i = 0; i < 20 && !again; i++) again = (await checkAfterReuse(r)).report.ready;
    expect(again).toBe(true);
  }, 90_000);

  it('a probe that never answers still gives a report within the deadline', async () => {
    const s = server as PostgresInstance;
    // The probe as it was before the write probe: one round trip on the pool, no client-side cut.
    const r = new Readiness(
      () => pool.query('SELECT 1').then(() => null),
      new UpstreamPool([], log),
      new SoftwareProvider(),
    );
    expect((await r.check()).ready).toBe(true);
    signalCluster(s, 'SIGSTOP');
    try {
      const { report } = await checkAfterReuse(r);
      expect(report.ready).toBe(false);
      expect(report.checks.database).toBe('timeout');
    } finally {
      signalCluster(s, 'SIGCONT');
    }
  }, 30_000);
});
