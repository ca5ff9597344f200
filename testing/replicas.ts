/**
 * Several `cmcp start` gateway processes ("replicas") on one shared database, for the replicas'
 * crash test (testing/crash/replicas-run.ts) and bench (bench/replicas.ts). Each replica keeps
 * its port and config file across restarts; a SIGKILLed replica is started again with the same
 * config. On PostgreSQL a killed replica's lease stays live until its ttl passes
 * (docs/replicas.md#leases-and-fencing-tokens), so a restart refused with INSTANCE_RUNNING is
 * tried again until the lease expired or the start deadline passed, as a supervisor would; so is
 * a start whose fresh lease was lost before it served (LEASE_LOST). 127.0.0.1 only.
 */
import { type ChildProcess, spawn } from 'node:child_process';
import { closeSync, openSync, readFileSync, statSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { stringify } from 'yaml';
import { exited, freeLoopbackPort, waitExit } from './process.js';

/** Options of {@link ReplicaSet.start}. */
export interface ReplicaSetOptions {
  /** The repository root (holds dist/src/cli/main.js: run `npm run build` first). */
  repoRoot: string;
  /** A folder for the replicas' config files and logs (`replica-<i>.yaml`, `replica-<i>.log`). */
  dir: string;
  /** How many replicas (≥ 1). */
  count: number;
  /** The config of replica `i` listening on `port` on 127.0.0.1 (written as YAML). */
  config: (i: number, port: number) => Record<string, unknown>;
  /** Extra environment of every replica (default `CMCP_LOG_LEVEL=warn`). */
  env?: NodeJS.ProcessEnv;
  /** Extra Node options before main.js (e.g. a probe `--import`). */
  nodeArgs?: string[];
  /** How long one start may take, retries while INSTANCE_RUNNING included (default 60 s). */
  startTimeoutMs?: number;
  /** Progress lines (default: none). */
  log?: (line: string) => void;
}

/**
 * The config of replica `i` of a set on one PostgreSQL database: `base` with its own
 * `instance_id` (`replica-<i>`, the lease's replica id), its listener, the shared `database` and
 * the `replicas` lease settings.
 */
export function postgresReplicaConfig(
  base: Record<string, unknown>,
  o: { i: number; port: number; databaseUrl: string; leaseTtlMs: number; renewEveryMs: number },
): Record<string, unknown> {
  return {
    ...base,
    instance_id: `replica-${o.i}`,
    listen: { host: '127.0.0.1', port: o.port },
    database: o.databaseUrl,
    replicas: { lease_ttl_ms: o.leaseTtlMs, renew_every_ms: o.renewEveryMs },
  };
}

interface Slot {
  i: number;
  port: number;
  file: string;
  logFile: string;
  proc: ChildProcess | null;
  /** Starts so far (1 after the first). */
  starts: number;
}

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

function logSize(file: string): number {
  try {
    return statSync(file).size;
  } catch {
    return 0;
  }
}

function readLogFrom(file: string, from: number): string {
  try {
    return readFileSync(file).subarray(from).toString('utf8');
  } catch {
    return '';
  }
}

/** A set of replica processes (module doc). */
export class ReplicaSet {
  private constructor(
    private readonly o: ReplicaSetOptions,
    private readonly slots: Slot[],
  ) {}

  /**
   * Writes every replica's config and starts them one after the other (each answers `/healthz`).
   * @throws when a replica does not start within the deadline (the started ones are killed).
   */
  static async start(o: ReplicaSetOptions): Promise<ReplicaSet> {
    if (!Number.isInteger(o.count) || o.count < 1) throw new Error('ReplicaSet: count must be ≥ 1');
    const slots: Slot[] = [];
    for (let i = 0; i < o.count; i++) {
      const port = await freeLoopbackPort();
      const file = join(o.dir, `replica-${i}.yaml`);
      writeFileSync(file, stringify(o.config(i, port)));
      slots.push({ i, port, file, logFile: join(o.dir, `replica-${i}.log`), proc: null, starts: 0 });
    }
    const set = new ReplicaSet(o, slots);
    try {
      for (const s of slots) await set.launch(s);
    } catch (e) {
      await Promise.all(slots.map((s) => set.kill(s.i)));
      throw e;
    }
    return set;
  }

  get count(): number {
    return this.slots.length;
  }

  /** `http://127.0.0.1:<port>` of replica `i` (whether or not it is running). */
  url(i: number): string {
    return `http://127.0.0.1:${this.slot(i).port}`;
  }

  /** The indexes of the replicas running now. */
  running(): number[] {
    return this.slots.filter((s) => s.proc && !exited(s.proc)).map((s) => s.i);
  }

  /** The process id of replica `i`, or null when it is not running. */
  pid(i: number): number | null {
    const p = this.slot(i).proc;
    return p && !exited(p) ? (p.pid ?? null) : null;
  }

  /** How many times replica `i` was started. */
  starts(i: number): number {
    return this.slot(i).starts;
  }

  /** The last part of replica `i`'s stderr/stdout log (for failure messages). */
  logTail(i: number, chars = 4000): string {
    try {
      return readFileSync(this.slot(i).logFile, 'utf8').slice(-chars);
    } catch {
      return '';
    }
  }

  /** SIGKILLs replica `i` and waits for its exit (nothing when it is not running). */
  async kill(i: number): Promise<void> {
    const p = this.slot(i).proc;
    if (!p || exited(p)) return;
    p.kill('SIGKILL');
    await waitExit(p, 10_000);
  }

  /**
   * Sends replica `i` SIGSTOP, or SIGCONT (`resume`): a paused process, as a stalled VM or a long
   * GC would leave it (nothing when it is not running).
   */
  pause(i: number, resume = false): void {
    const p = this.slot(i).proc;
    if (p && !exited(p)) p.kill(resume ? 'SIGCONT' : 'SIGSTOP');
  }

  /**
   * Starts replica `i` again with its config (it must not be running).
   * @throws when it does not start within the deadline.
   */
  async restart(i: number): Promise<void> {
    const s = this.slot(i);
    if (s.proc && !exited(s.proc)) throw new Error(`replica ${i} is running`);
    await this.launch(s);
  }

  /**
   * SIGTERMs replica `i` (a graceful stop: drain, record, release) and waits for its exit.
   * @returns its exit code (null when killed by a signal, after 30 s without an exit).
   */
  async stop(i: number): Promise<number | null> {
    const p = this.slot(i).proc;
    if (!p || exited(p)) return p?.exitCode ?? null;
    const code = new Promise<number | null>((r) => p.once('exit', (c) => r(c)));
    p.kill('SIGTERM');
    if (!(await waitExit(p, 30_000))) {
      p.kill('SIGKILL');
      await waitExit(p, 10_000);
      return null;
    }
    return code;
  }

  /** Stops every running replica at once (SIGTERM). @returns each replica's exit code by index. */
  async stopAll(): Promise<(number | null)[]> {
    return Promise.all(this.slots.map((s) => this.stop(s.i)));
  }

  private slot(i: number): Slot {
    const s = this.slots[i];
    if (!s) throw new Error(`no replica ${i}`);
    return s;
  }

  /** Spawns until the replica answers /healthz; a start refused with INSTANCE_RUNNING or LEASE_LOST is tried again. */
  private async launch(s: Slot): Promise<void> {
    const deadline = Date.now() + (this.o.startTimeoutMs ?? 60_000);
    for (let attempt = 1; ; attempt++) {
      const from = logSize(s.logFile);
      const proc = this.spawnOne(s);
      const up = await this.waitHealthy(s, proc, deadline);
      if (up === 'up') {
        s.proc = proc;
        s.starts++;
        return;
      }
      const tail = this.logTail(s.i);
      // A supervisor starts a replica again when its start was refused because its previous
      // lease is still live (INSTANCE_RUNNING), or when the lease it just took was lost before
      // it served (LEASE_LOST: a start-up slower than the lease ttl; nothing was written). Only
      // this start's own part of the log is read.
      const again = /\((INSTANCE_RUNNING|LEASE_LOST)\)/.exec(readLogFrom(s.logFile, from))?.[1];
      if (up === 'exited' && again && Date.now() < deadline) {
        this.o.log?.(`replica ${s.i}: start refused (${again}, try ${attempt}), starting again`);
        await sleep(250);
        continue;
      }
      if (!exited(proc)) {
        proc.kill('SIGKILL');
        await waitExit(proc, 10_000);
      }
      throw new Error(`replica ${s.i} did not start (${up}):\n${tail}`);
    }
  }

  private spawnOne(s: Slot): ChildProcess {
    const fd = openSync(s.logFile, 'a');
    try {
      writeFileSync(fd, `--- start ${new Date().toISOString()}\n`);
      return spawn(
        process.execPath,
        [
          ...(this.o.nodeArgs ?? []),
          join(this.o.repoRoot, 'dist', 'src', 'cli', 'main.js'),
          'start',
          '--config',
          s.file,
        ],
        { env: { ...process.env, CMCP_LOG_LEVEL: 'warn', ...this.o.env }, stdio: ['ignore', fd, fd] },
      );
    } finally {
      closeSync(fd);
    }
  }

  private async waitHealthy(
    s: Slot,
    proc: ChildProcess,
    deadline: number,
  ): Promise<'up' | 'exited' | 'timeout'> {
    for (;;) {
      if (exited(proc)) return 'exited';
      try {
        const r = await fetch(`http://127.0.0.1:${s.port}/healthz`, { signal: AbortSignal.timeout(1000) });
        if (r.ok) return 'up';
      } catch {
        // not listening yet
      }
      if (Date.now() > deadline) return 'timeout';
      await sleep(50);
    }
  }
}
