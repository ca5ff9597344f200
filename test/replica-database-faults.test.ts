/**
 * No replica dies of its database (docs/replicas.md#the-database-going-away). Two `cmcp start`
 * replicas, each on its own swtpm, on one real throw-away PostgreSQL, under a little load
 * (sessions with short calls through both): the database's backends terminated
 * (`pg_terminate_backend`), the server restarted, the server SIGSTOPped short of the lease's ttl
 * and past it — each time both replicas stay alive, and serve (a session opened, a call
 * answered, the session closed) once the database is back. A replica started while its
 * backends are being terminated either serves or exits 4 (DATABASE_UNAVAILABLE), and one started
 * on a refused connection exits 4 with that code, never of an unhandled 'error' event.
 * Needs the build (dist/).
 */
import { type ChildProcess, spawn } from 'node:child_process';
import { closeSync, openSync, readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import pg from 'pg';
import { describe, expect, it } from 'vitest';
import { stringify } from 'yaml';
import { freeLoopbackPort, waitExit } from '../testing/process.js';
import { postgresReplicaConfig } from '../testing/replicas.js';
import { REPO_ROOT } from './harness/gateway.js';
import { hasPostgres } from './harness/postgres.js';
import { sleep, useReplicaPair } from './harness/replica-pair.js';

const withPostgres = hasPostgres();
const TTL_MS = 6000;
const RENEW_MS = 2000;
const pair = useReplicaPair({
  name: 'db-faults',
  leaseTtlMs: TTL_MS,
  renewEveryMs: RENEW_MS,
  enabled: withPostgres,
});
const { dir, expectBothServe, load } = pair;

/** Terminates every backend of the test database but the caller's. */
async function terminateBackends(): Promise<number> {
  const c = new pg.Client({ connectionString: pair.databaseUrl });
  c.on('error', () => undefined);
  await c.connect();
  try {
    const r = await c.query(
      'SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = current_database() AND pid <> pg_backend_pid()',
    );
    return r.rowCount ?? 0;
  } finally {
    await c.end().catch(() => undefined);
  }
}

/** `cmcp start --config file` with `env`; @returns its exit code (null: killed) and output, or 'up' once it answered /healthz. */
async function startProcess(
  file: string,
  port: number | null,
  ms: number,
): Promise<{ code: number | null | 'up'; out: string; proc: ChildProcess }> {
  const logFile = `${file}.log`;
  const fd = openSync(logFile, 'w');
  let proc: ChildProcess;
  try {
    proc = spawn(
      process.execPath,
      [join(REPO_ROOT, 'dist', 'src', 'cli', 'main.js'), 'start', '--config', file],
      {
        env: { ...process.env, CMCP_LOG_LEVEL: 'warn' },
        stdio: ['ignore', fd, fd],
      },
    );
  } finally {
    closeSync(fd);
  }
  const code = new Promise<number | null>((r) => proc.once('exit', (c) => r(c)));
  const end = Date.now() + ms;
  while (Date.now() < end) {
    if (proc.exitCode !== null || proc.signalCode !== null) break;
    if (port !== null) {
      const up = await fetch(`http://127.0.0.1:${port}/healthz`, { signal: AbortSignal.timeout(1000) }).then(
        (r) => r.ok,
        () => false,
      );
      if (up) return { code: 'up', out: readFileSync(logFile, 'utf8'), proc };
    }
    await sleep(100);
  }
  if (!(await waitExit(proc, 1000))) {
    proc.kill('SIGKILL');
    throw new Error(`start neither served nor ended:\n${readFileSync(logFile, 'utf8')}`);
  }
  return { code: await code, out: readFileSync(logFile, 'utf8'), proc };
}

/**
 * A process holding one client checked out of a replica's pool (dist/, openReplicaPool) while
 * this test terminates its backend; it prints `alive` and exits 0 when the pool's next query
 * answers. @returns its exit code and output.
 */
async function holdTerminatedClient(): Promise<{ code: number | null; out: string }> {
  const script = `
    import { openReplicaPool } from ${JSON.stringify(join(REPO_ROOT, 'dist/src/store/postgres/transaction.js'))};
    const pool = openReplicaPool(process.argv[1], { leaseTtlMs: ${TTL_MS} });
    const client = await pool.connect();
    const pid = (await client.query('SELECT pg_backend_pid() AS pid')).rows[0].pid;
    console.log('held ' + pid);
    await new Promise((r) => process.stdin.once('data', r));
    await new Promise((r) => setTimeout(r, 500));
    const failed = await client.query('SELECT 1').then(() => 'answered', (e) => e.message);
    client.release(true);
    await pool.query('SELECT 1');
    console.log('alive ' + failed);
    await pool.end();
  `;
  const proc = spawn(process.execPath, ['--input-type=module', '-e', script, pair.databaseUrl], {
    stdio: ['pipe', 'pipe', 'pipe'],
  });
  let out = '';
  proc.stdout?.on('data', (d) => {
    out += String(d);
  });
  proc.stderr?.on('data', (d) => {
    out += String(d);
  });
  const code = new Promise<number | null>((r) => proc.once('exit', (c) => r(c)));
  for (const end = Date.now() + 20_000; !/held (\d+)/.test(out); await sleep(50))
    if (Date.now() > end || proc.exitCode !== null) throw new Error(`no checkout: ${out}`);
  const pid = Number(/held (\d+)/.exec(out)?.[1]);
  const c = new pg.Client({ connectionString: pair.databaseUrl });
  c.on('error', () => undefined);
  await c.connect();
  await c.query('SELECT pg_terminate_backend($1)', [pid]);
  await c.end();
  proc.stdin?.end('go\n');
  if (!(await waitExit(proc, 20_000))) proc.kill('SIGKILL');
  return { code: await code, out };
}

describe.skipIf(!withPostgres)('replicas and their database going away', () => {
  it("a client held out of a replica's pool whose backend is terminated: no unhandled 'error', the pool serves on", async () => {
    const r = await holdTerminatedClient();
    expect(r.out).not.toMatch(/Unhandled 'error' event/);
    expect(r.code, r.out).toBe(0);
    expect(r.out).toMatch(/alive .*(terminat|not queryable)/i);
  }, 60_000);

  it('backends terminated under load: both replicas stay alive and serve', async () => {
    const stop = { stopped: false };
    const running = load(stop);
    for (let k = 0; k < 8; k++) {
      await sleep(300);
      await terminateBackends();
    }
    stop.stopped = true;
    await running;
    await expectBothServe(30_000);
  }, 120_000);

  it('the server restarted (immediate stop, start) under load: both stay alive and serve', async () => {
    const stop = { stopped: false };
    const running = load(stop);
    await sleep(500);
    await pair.server.down('immediate');
    await sleep(1000);
    await pair.server.up();
    stop.stopped = true;
    await running;
    await expectBothServe(30_000);
  }, 120_000);

  it('the server SIGSTOPped short of the ttl: both stay alive, keep their lease, and serve', async () => {
    const stop = { stopped: false };
    const running = load(stop);
    await sleep(500);
    pair.server.pause();
    await sleep(TTL_MS / 3);
    pair.server.pause(true);
    stop.stopped = true;
    await running;
    await expectBothServe(30_000);
    for (const i of [0, 1]) {
      const r = await fetch(`${pair.replicas.url(i)}/readyz`);
      expect(((await r.json()) as { checks: { lease: unknown } }).checks.lease).toBeNull();
    }
  }, 120_000);

  it('the server SIGSTOPped past the ttl: both stay alive and serve again', async () => {
    const stop = { stopped: false };
    const running = load(stop);
    await sleep(500);
    pair.server.pause();
    await sleep(TTL_MS + 2000);
    pair.server.pause(true);
    stop.stopped = true;
    await running;
    await expectBothServe(TTL_MS * 3 + 10_000);
  }, 120_000);

  it('a replica started while its backends are terminated serves or exits 4 (DATABASE_UNAVAILABLE)', async () => {
    const replicas = pair.replicas;
    await replicas.stop(1);
    const port = await freeLoopbackPort();
    const file = join(dir, 'starting.yaml');
    writeFileSync(
      file,
      stringify(
        postgresReplicaConfig(pair.baseConfig(1), {
          i: 1,
          port,
          databaseUrl: pair.databaseUrl,
          leaseTtlMs: TTL_MS,
          renewEveryMs: RENEW_MS,
        }),
      ),
    );
    const outcomes: (number | null | 'up')[] = [];
    for (let k = 0; k < 3; k++) {
      const stop = { stopped: false };
      const killing = (async () => {
        while (!stop.stopped) {
          await terminateBackends().catch(() => undefined);
          await sleep(20 + k * 40);
        }
      })();
      const r = await startProcess(file, port, 60_000);
      stop.stopped = true;
      await killing;
      outcomes.push(r.code);
      expect(r.out).not.toMatch(/Unhandled 'error' event/);
      if (r.code === 'up') {
        r.proc.kill('SIGTERM');
        expect(await waitExit(r.proc, 30_000)).toBe(true);
      } else expect(r.code, r.out).toBe(4);
      // A start that died after acquiring its lease could not release it (the database went
      // away): the next start waits for it to expire, as a supervisor's backoff would.
      await sleep(TTL_MS + 500);
    }
    await replicas.restart(1);
    await expectBothServe(30_000);
  }, 300_000);

  it('a replica whose database refuses the connection at start-up exits 4 (DATABASE_UNAVAILABLE)', async () => {
    const closedPort = await freeLoopbackPort();
    const file = join(dir, 'refused.yaml');
    writeFileSync(
      file,
      stringify(
        postgresReplicaConfig(pair.baseConfig(1), {
          i: 9,
          port: await freeLoopbackPort(),
          databaseUrl: `postgres://cmcp_test@127.0.0.1:${closedPort}/db_faults`,
          leaseTtlMs: TTL_MS,
          renewEveryMs: RENEW_MS,
        }),
      ),
    );
    const r = await startProcess(file, null, 30_000);
    expect(r.code, r.out).toBe(4);
    expect(r.out).toMatch(/DATABASE_UNAVAILABLE/);
  }, 60_000);
});
