/**
 * A throw-away PostgreSQL server for tests and benches, from Debian's `postgresql` package
 * (PostgreSQL 15 on Debian 12; scripts/setup.sh installs it). Each {@link startPostgres} makes
 * its own cluster: `initdb` into a fresh temporary folder (trust authentication for one test
 * role), `pg_ctl start` listening on its own free port on 127.0.0.1 only, with its unix socket
 * inside the folder, and `stop()` ends it and removes the folder. Nothing is shared with the
 * machine's own clusters (/var/lib/postgresql is never touched).
 *
 * initdb and postgres refuse to run as root ("cannot be run as root", PostgreSQL 15 docs
 * §19.1: the server must be owned by an unprivileged user). As root the cluster is made and run
 * as the package's `postgres` system user (else `nobody`): the folder is handed to that user and
 * the binaries are spawned with its uid/gid.
 *
 * Use: per test file, `startPostgres()` in `beforeAll` and `stop()` in `afterAll` (one cluster
 * per file; {@link createDatabase} for one database per test); from a vitest globalSetup, start
 * one in setup, `project.provide` its `url`, stop it in the returned teardown; from a bench,
 * `startPostgres({ durable: true })` (compiled to dist/testing/postgres.js).
 */
import { type ChildProcess, execFileSync, spawn } from 'node:child_process';
import {
  accessSync,
  chownSync,
  constants,
  mkdirSync,
  mkdtempSync,
  readdirSync,
  readFileSync,
  rmSync,
} from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import pg from 'pg';
import { freeLoopbackPort } from './process.js';

/** Where setup instructions point when PostgreSQL is missing. */
export const POSTGRES_SETUP_HINT =
  'run the setup script (scripts/setup.sh --for test, as npm test does; it installs the Debian package postgresql, whose binaries are in /usr/lib/postgresql/<major>/bin)';

/** The role initdb makes (superuser of the throw-away cluster; trust authentication). */
export const POSTGRES_TEST_ROLE = 'cmcp_test';

/** The oldest PostgreSQL major the gateway's PostgreSQL DDL is written for. */
export const POSTGRES_MIN_MAJOR = 15;

/** A running throw-away server. */
export interface PostgresInstance {
  /** `postgres://cmcp_test@127.0.0.1:<port>/postgres` (no password: trust authentication). */
  url: string;
  host: '127.0.0.1';
  port: number;
  user: string;
  /** The cluster's folder (data/, sock/, postgres.log); removed by stop(). */
  dir: string;
  /** The unix socket folder (inside dir). */
  socketDir: string;
  /** Major version of the binaries that run it (e.g. 15). */
  major: number;
  /** URL of the same server's database `name` (see {@link createDatabase}). */
  urlOf(name: string): string;
  /** The server log so far (for failure messages). */
  log(): string;
  /** Stops the server (fast shutdown; immediate after 10 s) and removes its folder. Idempotent. */
  stop(): Promise<void>;
  /**
   * Takes the server down without removing anything: `immediate` (default) ends the postmaster
   * and every backend at once, as a crash would; `fast` is a clean shutdown.
   */
  down(mode?: 'immediate' | 'fast'): Promise<void>;
  /** Starts the server again after {@link down}, on the same port. */
  up(): Promise<void>;
  /**
   * SIGSTOPs the postmaster and every process it started (its backends), or SIGCONTs them
   * (`resume`): a database host that stalled. Connections stay open and unanswered.
   */
  pause(resume?: boolean): void;
}

export interface StartPostgresOptions {
  /** Where the cluster's temporary folder is made (default: the OS temp folder). */
  parentDir?: string;
  /**
   * fsync and synchronous_commit as in production (default false: a throw-away test cluster
   * does not need to survive the machine; benches that measure commit cost pass true).
   */
  durable?: boolean;
}

/**
 * The bin folder of the newest installed PostgreSQL ≥ {@link POSTGRES_MIN_MAJOR} holding initdb,
 * pg_ctl and postgres (Debian: /usr/lib/postgresql/<major>/bin; `CMCP_POSTGRES_BIN` overrides),
 * or null when there is none.
 */
export function findPostgresBin(): { bin: string; major: number } | null {
  const override = process.env.CMCP_POSTGRES_BIN;
  const candidates: string[] = override ? [override] : debianBins();
  for (const bin of candidates) {
    if (!['initdb', 'pg_ctl', 'postgres'].every((b) => executable(join(bin, b)))) continue;
    const major = serverMajor(bin);
    if (major !== null && major >= POSTGRES_MIN_MAJOR) return { bin, major };
  }
  return null;
}

/** Why no throw-away PostgreSQL can be started here, or null when one can. */
export function postgresMissingReason(): string | null {
  if (findPostgresBin()) return null;
  return `no PostgreSQL ${POSTGRES_MIN_MAJOR}+ server binaries (initdb, pg_ctl, postgres) found; ${POSTGRES_SETUP_HINT}`;
}

function debianBins(): string[] {
  const root = '/usr/lib/postgresql';
  try {
    return readdirSync(root)
      .filter((v) => /^\d+$/.test(v))
      .sort((a, b) => Number(b) - Number(a))
      .map((v) => join(root, v, 'bin'));
  } catch {
    return [];
  }
}

function executable(p: string): boolean {
  try {
    accessSync(p, constants.X_OK);
    return true;
  } catch {
    return false;
  }
}

/** `postgres --version` → major ("postgres (PostgreSQL) 15.14 (Debian 15.14-0+deb12u1)" → 15). */
function serverMajor(bin: string): number | null {
  try {
    const out = execFileSync(join(bin, 'postgres'), ['--version'], { encoding: 'utf8', timeout: 10_000 });
    const m = /\(PostgreSQL\)\s+(\d+)/.exec(out);
    return m ? Number(m[1]) : null;
  } catch {
    return null;
  }
}

/** The unprivileged account to run as when this process is root; null when not root. */
function unprivilegedUser(): { uid: number; gid: number; name: string } | null {
  if (process.getuid?.() !== 0) return null;
  for (const name of ['postgres', 'nobody']) {
    try {
      const uid = Number(execFileSync('id', ['-u', name], { encoding: 'utf8' }).trim());
      const gid = Number(execFileSync('id', ['-g', name], { encoding: 'utf8' }).trim());
      if (uid > 0) return { uid, gid, name };
    } catch {
      // no such user
    }
  }
  throw new Error(
    'running as root, and neither the postgres nor the nobody user exists to run PostgreSQL as',
  );
}

interface Runner {
  bin: string;
  as: { uid: number; gid: number; name: string } | null;
  env: NodeJS.ProcessEnv;
}

/** Runs one PostgreSQL binary to completion; rejects with its output on a non-zero exit. */
function run(r: Runner, tool: string, args: string[], timeoutMs = 60_000): Promise<string> {
  return new Promise((ok, fail) => {
    const child: ChildProcess = spawn(join(r.bin, tool), args, {
      env: r.env,
      stdio: ['ignore', 'pipe', 'pipe'],
      ...(r.as ? { uid: r.as.uid, gid: r.as.gid } : {}),
    });
    let out = '';
    child.stdout?.on('data', (d) => {
      out += d;
    });
    child.stderr?.on('data', (d) => {
      out += d;
    });
    const timer = setTimeout(() => child.kill('SIGKILL'), timeoutMs);
    child.once('error', (e) => {
      clearTimeout(timer);
      fail(new Error(`${tool}: ${e.message}`));
    });
    child.once('exit', (code, signal) => {
      clearTimeout(timer);
      if (code === 0) ok(out);
      else fail(new Error(`${tool} ${args.join(' ')} failed (${signal ?? `exit ${code}`}):\n${out.trim()}`));
    });
  });
}

/** Live clusters of this process, stopped at exit if a test forgot (or died before) stop(). */
const live = new Set<{ dataDir: string; dir: string }>();
let exitHookSet = false;

/** Ends a cluster without waiting: SIGQUIT (immediate shutdown) to the postmaster, folder removed. */
function kill(c: { dataDir: string; dir: string }): void {
  try {
    // postmaster.pid's first line is the postmaster's pid.
    const pid = Number(readFileSync(join(c.dataDir, 'postmaster.pid'), 'utf8').split('\n')[0]);
    if (pid > 0) process.kill(pid, 'SIGQUIT');
  } catch {
    // not started, or already gone
  }
  rmSync(c.dir, { recursive: true, force: true });
  live.delete(c);
}

function killAtExit(): void {
  for (const c of [...live]) kill(c);
}

/**
 * Starts a throw-away PostgreSQL on 127.0.0.1 and waits until it accepts connections.
 * About 1–3 s (initdb dominates). Retries on a port taken between choosing and binding.
 * @throws Error naming the setup script when no PostgreSQL 15+ is installed; with initdb's or
 *   the server log's text when it cannot start.
 */
export async function startPostgres(opts: StartPostgresOptions = {}): Promise<PostgresInstance> {
  const found = findPostgresBin();
  if (!found) throw new Error(postgresMissingReason() ?? 'PostgreSQL not found');
  const as = unprivilegedUser();
  const dir = mkdtempSync(join(opts.parentDir ?? tmpdir(), 'cmcp-pg-'));
  const dataDir = join(dir, 'data');
  const socketDir = join(dir, 'sock');
  const logFile = join(dir, 'postgres.log');
  mkdirSync(socketDir);
  if (as) for (const p of [dir, socketDir]) chownSync(p, as.uid, as.gid);
  // A clean environment: no PGHOST/PGPORT/PGDATA of the caller's, the C locale, HOME in our folder.
  const env: NodeJS.ProcessEnv = {
    PATH: process.env.PATH ?? '/usr/bin:/bin',
    HOME: dir,
    LC_ALL: 'C',
    LANG: 'C',
  };
  const r: Runner = { bin: found.bin, as, env };
  const entry = { dataDir, dir };
  live.add(entry);
  if (!exitHookSet) {
    process.once('exit', killAtExit);
    exitHookSet = true;
  }
  const readLog = () => readLogFile(logFile);
  try {
    await run(r, 'initdb', [
      '--pgdata',
      dataDir,
      '--username',
      POSTGRES_TEST_ROLE,
      '--auth',
      'trust',
      '--encoding',
      'UTF8',
      '--locale',
      'C',
      '--no-sync',
      '--no-instructions',
    ]);
    const port = await startServer(r, dataDir, socketDir, logFile, opts.durable ?? false);
    const postmasterPid = () => Number(readFileSync(join(dataDir, 'postmaster.pid'), 'utf8').split('\n')[0]);
    const urlOf = (name: string) =>
      `postgres://${POSTGRES_TEST_ROLE}@127.0.0.1:${port}/${encodeURIComponent(name)}`;
    await waitReady(urlOf('postgres'));
    let stopped = false;
    return {
      url: urlOf('postgres'),
      host: '127.0.0.1',
      port,
      user: POSTGRES_TEST_ROLE,
      dir,
      socketDir,
      major: found.major,
      urlOf,
      log: readLog,
      async stop() {
        if (stopped) return;
        stopped = true;
        try {
          await run(
            r,
            'pg_ctl',
            ['stop', '--pgdata', dataDir, '--mode', 'fast', '--wait', '--timeout', '10'],
            20_000,
          );
        } catch {
          await run(
            r,
            'pg_ctl',
            ['stop', '--pgdata', dataDir, '--mode', 'immediate', '--wait'],
            20_000,
          ).catch(() => undefined);
        }
        live.delete(entry);
        rmSync(dir, { recursive: true, force: true });
      },
      async down(mode = 'immediate') {
        await run(r, 'pg_ctl', ['stop', '--pgdata', dataDir, '--mode', mode, '--wait'], 20_000);
      },
      async up() {
        await startServer(r, dataDir, socketDir, logFile, opts.durable ?? false, port);
        await waitReady(urlOf('postgres'));
      },
      pause(resume = false) {
        const pm = postmasterPid();
        const children = execFileSync('ps', ['-o', 'pid=', '--ppid', String(pm)], { encoding: 'utf8' })
          .split('\n')
          .map((l) => Number(l.trim()))
          .filter((n) => n > 0);
        const signal = resume ? 'SIGCONT' : 'SIGSTOP';
        // Resumed postmaster first, paused last: no backend is forked while its parent runs alone.
        for (const pid of resume ? [pm, ...children] : [...children, pm]) {
          try {
            process.kill(pid, signal);
          } catch {
            // a backend that ended meanwhile
          }
        }
      },
    };
  } catch (e) {
    const log = readLog();
    kill(entry);
    const hint = as ? `\n(run as user ${as.name}: every folder above ${dir} must be searchable by it)` : '';
    throw new Error(`${(e as Error).message}${hint}\n--- postgres.log ---\n${log}`);
  }
}

/**
 * `pg_ctl start` on a free loopback port (or `fixedPort`, a restart's); a port taken meanwhile
 * is retried (3 tries).
 */
async function startServer(
  r: Runner,
  dataDir: string,
  socketDir: string,
  logFile: string,
  durable: boolean,
  fixedPort?: number,
): Promise<number> {
  let last: Error | null = null;
  for (let attempt = 0; attempt < 3; attempt++) {
    const port = fixedPort ?? (await freeLoopbackPort());
    const settings = [
      '-c listen_addresses=127.0.0.1',
      `-c port=${port}`,
      `-c unix_socket_directories=${socketDir}`,
      '-c shared_buffers=32MB',
      '-c max_connections=100',
      ...(durable ? [] : ['-c fsync=off', '-c synchronous_commit=off', '-c full_page_writes=off']),
    ];
    try {
      await run(r, 'pg_ctl', [
        'start',
        '--pgdata',
        dataDir,
        '--log',
        logFile,
        '--wait',
        '--timeout',
        '30',
        '-o',
        settings.join(' '),
      ]);
      return port;
    } catch (e) {
      last = e as Error;
      if (!/could not bind|address already in use/i.test(readLogFile(logFile))) break;
    }
  }
  throw last ?? new Error('pg_ctl start failed');
}

function readLogFile(p: string): string {
  try {
    return readFileSync(p, 'utf8');
  } catch {
    return '';
  }
}

/** Connects until the server answers `SELECT 1` (pg_ctl --wait already saw it accept). */
async function waitReady(url: string): Promise<void> {
  const deadline = Date.now() + 30_000;
  for (;;) {
    const client = new pg.Client({ connectionString: url });
    try {
      await client.connect();
      await client.query('SELECT 1');
      return;
    } catch (e) {
      if (Date.now() > deadline)
        throw new Error(`PostgreSQL did not accept connections: ${(e as Error).message}`);
    } finally {
      await client.end().catch(() => undefined);
    }
    await new Promise((res) => setTimeout(res, 100));
  }
}

/**
 * Creates database `name` on the server (for one test's isolation) and returns its URL.
 * @throws pg errors (e.g. 42P04 duplicate_database).
 */
export async function createDatabase(server: PostgresInstance, name: string): Promise<string> {
  const client = new pg.Client({ connectionString: server.url });
  await client.connect();
  try {
    await client.query(`CREATE DATABASE ${pg.escapeIdentifier(name)}`);
  } finally {
    await client.end();
  }
  return server.urlOf(name);
}
