/**
 * The crash test (docs/testing.md, the crash test): a `cmcp start` gateway on a TPM (swtpm) under
 * load (load.ts) is SIGKILLed at a random moment and restarted, `kills` times; a last start
 * recovers, serves a little and stops with SIGTERM (it must exit 0). Then check.ts holds the
 * database, the upstream's log (upstream.ts) and the answers against the rules.
 */
import { type ChildProcess, spawn } from 'node:child_process';
import { createHash } from 'node:crypto';
import { writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { stringify } from 'yaml';
import { freeLoopbackPort, waitExit } from '../process.js';
import { type CheckResult, checkCrashRun } from './check.js';
import { type Answered, CrashLoad, type LoadCounts } from './load.js';
import { startLoggingUpstream, type WorkArgs } from './upstream.js';

export interface CrashRunOptions {
  /** How many SIGKILLs (each followed by a restart). */
  kills: number;
  /** tctildr configuration of the TPM the gateway binds sessions with. */
  tcti: string;
  /** A fresh folder for config and database. */
  dir: string;
  /** The repository root (holds dist/src/cli/main.js: run `npm run build` first). */
  repoRoot: string;
  /** Load workers (default 8). */
  concurrency?: number;
  /** Each gateway is killed after a uniformly random time in [minUpMs, maxUpMs] (default 200–1500). */
  minUpMs?: number;
  maxUpMs?: number;
  /** Progress lines (default: none). */
  log?: (line: string) => void;
  /** Run the call path's writes in the store worker (config `store.worker`; default off). */
  storeWorker?: boolean;
}

export interface CrashReport {
  kills: number;
  /** The gateway's database (inside `dir`). */
  dbPath: string;
  /** Exit code of the last gateway after SIGTERM (must be 0). */
  lastExitCode: number | null;
  load: LoadCounts;
  /** What the upstream ran and what the load was answered (the checks' input, kept for tests). */
  ran: WorkArgs[];
  answered: Answered[];
  check: CheckResult;
}

const TOKEN = 'crash-test-token';
const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

interface Running {
  proc: ChildProcess;
  url: string;
}

async function startGateway(o: CrashRunOptions, file: string, port: number): Promise<Running> {
  const proc = spawn(
    process.execPath,
    [join(o.repoRoot, 'dist', 'src', 'cli', 'main.js'), 'start', '--config', file],
    {
      env: { ...process.env, CMCP_LOG_LEVEL: 'warn' },
      stdio: ['ignore', 'ignore', 'pipe'],
    },
  );
  let err = '';
  proc.stderr?.on('data', (d) => {
    err = (err + String(d)).slice(-4000);
  });
  const url = `http://127.0.0.1:${port}`;
  const deadline = Date.now() + 30_000;
  for (;;) {
    if (proc.exitCode !== null) throw new Error(`gateway exited ${proc.exitCode}: ${err}`);
    try {
      if ((await fetch(`${url}/healthz`)).ok) return { proc, url };
    } catch {
      // not listening yet
    }
    if (Date.now() > deadline) {
      proc.kill('SIGKILL');
      throw new Error(`gateway did not start: ${err}`);
    }
    await sleep(50);
  }
}

function writeConfig(
  o: CrashRunOptions,
  upstreamUrl: string,
  port: number,
): { file: string; dbPath: string } {
  const dbPath = join(o.dir, 'cmcp.db');
  const file = join(o.dir, 'cmcp.yaml');
  const cfg = {
    instance_id: 'crash-test',
    listen: { host: '127.0.0.1', port },
    database: dbPath,
    upstreams: [{ name: 'up', transport: 'http', url: upstreamUrl, timeout_ms: 10_000 }],
    attestation: { provider: 'tpm', tcti: o.tcti, ak_algorithm: 'ecc-p256', pcrs: [0, 7] },
    agents: [{ agent_id: 'crash-agent', token_sha256: createHash('sha256').update(TOKEN).digest('hex') }],
    shutdown: { drain_ms: 3000 },
    ...(o.storeWorker ? { store: { worker: true } } : {}),
  };
  writeFileSync(file, stringify(cfg));
  return { file, dbPath };
}

/** Runs the crash test and returns counts and violations (never throws for a violation). */
export async function runCrashTest(o: CrashRunOptions): Promise<CrashReport> {
  const upstream = await startLoggingUpstream();
  const load = new CrashLoad(TOKEN, 'up.work', o.concurrency ?? 8);
  const [minUp, maxUp] = [o.minUpMs ?? 200, o.maxUpMs ?? 1500];
  try {
    const port = await freeLoopbackPort();
    const { file, dbPath } = writeConfig(o, upstream.url, port);
    for (let k = 0; k < o.kills; k++) {
      const gw = await startGateway(o, file, port);
      const stop = { stopped: false };
      const running = load.run(gw.url, stop);
      await sleep(minUp + Math.random() * (maxUp - minUp));
      gw.proc.kill('SIGKILL');
      stop.stopped = true;
      await waitExit(gw.proc, 10_000);
      await running;
      o.log?.(
        `kill ${k + 1}/${o.kills}: ${load.counts.requests} requests, ${upstream.ran.length} ran upstream`,
      );
    }
    // The last start recovers what the last kill left, serves (retries too), and stops gracefully.
    const gw = await startGateway(o, file, port);
    const stop = { stopped: false };
    const running = load.run(gw.url, stop);
    await sleep(maxUp);
    const exited = new Promise<number | null>((r) => gw.proc.once('exit', (code) => r(code)));
    gw.proc.kill('SIGTERM');
    const lastExitCode = await exited;
    stop.stopped = true;
    await running;
    await sleep(500); // upstream calls still sleeping have logged already; let them end
    return {
      kills: o.kills,
      dbPath,
      lastExitCode,
      load: load.counts,
      ran: upstream.ran,
      answered: load.answered,
      check: checkCrashRun(dbPath, 'up.work', upstream.ran, load.answered),
    };
  } finally {
    await upstream.close();
  }
}
