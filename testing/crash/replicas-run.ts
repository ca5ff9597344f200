/**
 * The crash test on replicas (`npm run crash-test -- --replicas 3 --postgres`):
 * `replicas` `cmcp start` processes on one PostgreSQL database (testing/replicas.ts), each on
 * its own TPM, under the crash test's load (load.ts) spread over the running replicas — a
 * session opened through one is used and closed through others, a retry of an execution whose
 * answer was lost goes to whichever replica the load picks. A random running replica is
 * SIGKILLed at random moments and started again (once its lease expired: INSTANCE_RUNNING until
 * then), `kills` times, while the others keep serving; at least one replica keeps running.
 * Every `pauseEvery`-th disruption is a SIGSTOP instead: the replica stays paused past its
 * lease's expiry and another replica's sweep, is resumed (its late writes must fail their fence:
 * its `/readyz` must then say `LEASE_LOST`, else a violation), and is then killed and started
 * again as its supervisor would on the failing probe. With `postgres`, every `faultEvery`-th
 * disruption is a PostgreSQL fault instead, in turn: every replica backend terminated
 * (`pg_terminate_backend`), an immediate stop and start of the server, the server SIGSTOPped
 * for half the lease ttl, and SIGSTOPped past the ttl (the replicas lose their leases and
 * regain them, running); every replica must still be running afterwards. Then
 * every replica stops with SIGTERM (each must exit 0), and check.ts holds the database
 * (postgres-snapshot.ts), the upstream's log and the answers against the rules — plus every
 * replica's lease sealed.
 */
import { execFile } from 'node:child_process';
import { createHash } from 'node:crypto';
import { join } from 'node:path';
import { promisify } from 'node:util';
import pg from 'pg';
import type { PostgresInstance } from '../postgres.js';
import { postgresReplicaConfig, ReplicaSet } from '../replicas.js';
import { type CheckResult, checkCrashSnapshot } from './check.js';
import { CrashLoad, type LoadCounts } from './load.js';
import { readPostgresSnapshot } from './postgres-snapshot.js';
import { checkCrashReceipts, type ReceiptCheck } from './receipts.js';
import { startLoggingUpstream } from './upstream.js';

export interface ReplicaCrashOptions {
  /** How many SIGKILLs (each followed by a restart of that replica). */
  kills: number;
  /** How many replicas (≥ 2). */
  replicas: number;
  /** An empty PostgreSQL database (testing/postgres.ts createDatabase); migrated by `cmcp db migrate`. */
  databaseUrl: string;
  /** tctildr configuration of each replica's TPM (one per replica). */
  tctis: string[];
  /** A fresh folder for configs and logs. */
  dir: string;
  /** The repository root (holds dist/src/cli/main.js: run `npm run build` first). */
  repoRoot: string;
  /** Load workers (default 8). */
  concurrency?: number;
  /** Time between kills, uniformly random in [minUpMs, maxUpMs] (default 200–1500). */
  minUpMs?: number;
  maxUpMs?: number;
  /** Every n-th disruption is a SIGSTOP past the lease's expiry instead of a SIGKILL (0: none; default 5). */
  pauseEvery?: number;
  /** The replicas' lease ttl and renewal, milliseconds (default 3000 and 1000). */
  leaseTtlMs?: number;
  renewEveryMs?: number;
  /** The server behind `databaseUrl`: with it, PostgreSQL faults are among the disruptions. */
  postgres?: PostgresInstance;
  /** Every n-th disruption is a PostgreSQL fault (needs `postgres`; 0: none; default 3). */
  faultEvery?: number;
  log?: (line: string) => void;
}

export interface ReplicaCrashReport {
  kills: number;
  /** How many of the kills were SIGSTOP pauses past the lease's expiry first. */
  pauses: number;
  /** PostgreSQL faults injected, by kind. */
  faults: Record<string, number>;
  /** Starts of each replica (1 + its restarts). */
  starts: number[];
  /** Exit code of each replica after the final SIGTERM (each must be 0). */
  exitCodes: (number | null)[];
  /** Restarts that failed, and paused replicas still ready after their resume (each a violation). */
  restartFailures: string[];
  load: LoadCounts;
  check: CheckResult;
  /** The answered calls' receipts, fetched once every replica is back (receipts.ts). */
  receipts: ReceiptCheck;
}

const TOKEN = 'crash-test-token';
const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

function baseConfig(upstreamUrl: string, tcti: string): Record<string, unknown> {
  return {
    upstreams: [{ name: 'up', transport: 'http', url: upstreamUrl, timeout_ms: 10_000 }],
    attestation: { provider: 'tpm', tcti, ak_algorithm: 'ecc-p256', pcrs: [0, 7] },
    agents: [{ agent_id: 'crash-agent', token_sha256: createHash('sha256').update(TOKEN).digest('hex') }],
    shutdown: { drain_ms: 3000 },
  };
}

/** `cmcp db migrate --database <url>` through the real CLI. @throws on a non-zero exit. */
async function migrate(o: ReplicaCrashOptions): Promise<string> {
  const { stdout } = await promisify(execFile)(process.execPath, [
    join(o.repoRoot, 'dist', 'src', 'cli', 'main.js'),
    'db',
    'migrate',
    '--database',
    o.databaseUrl,
  ]);
  return stdout;
}

/** `checks.lease` of a resumed replica's `/readyz` (within 5 s: its next renewal finds the lease lost). */
async function leaseGateOf(url: string): Promise<string> {
  let last = 'no answer';
  for (const end = Date.now() + 5000; Date.now() < end; await sleep(200)) {
    try {
      const r = await fetch(`${url}/readyz`, { signal: AbortSignal.timeout(2000) });
      const body = (await r.json()) as { checks?: { lease?: string } };
      last = String(body.checks?.lease ?? `HTTP ${r.status}`);
      if (last === 'LEASE_LOST') return last;
    } catch (e) {
      last = (e as Error).message;
    }
  }
  return last;
}

/** Polls `url`/readyz until it answers 200 or `ms` pass. @returns whether it became ready. */
async function readyOf(url: string, ms: number): Promise<boolean> {
  for (const end = Date.now() + ms; Date.now() < end; await sleep(200)) {
    try {
      if ((await fetch(`${url}/readyz`, { signal: AbortSignal.timeout(2000) })).ok) return true;
    } catch {
      // not answering yet
    }
  }
  return false;
}

/** The PostgreSQL faults, in the order they are injected. */
const FAULTS = ['terminate', 'restart', 'pause_short', 'pause_past_ttl'] as const;

/**
 * Injects one PostgreSQL fault on `server` (module doc). @returns what it did, for the log.
 * @throws when the server cannot be reached to terminate backends or started again.
 */
async function injectFault(
  kind: (typeof FAULTS)[number],
  server: PostgresInstance,
  databaseUrl: string,
  leaseTtlMs: number,
): Promise<string> {
  if (kind === 'terminate') {
    const c = new pg.Client({ connectionString: databaseUrl });
    c.on('error', () => undefined);
    await c.connect();
    try {
      const r = await c.query<{ n: string }>(
        `SELECT count(pg_terminate_backend(pid))::text AS n FROM pg_stat_activity
          WHERE datname = current_database() AND pid <> pg_backend_pid() AND backend_type = 'client backend'`,
      );
      return `terminated ${r.rows[0]?.n ?? 0} backends`;
    } finally {
      await c.end();
    }
  }
  if (kind === 'restart') {
    const t = Date.now();
    await server.down('immediate');
    await sleep(300);
    await server.up();
    return `restarted (down ${Date.now() - t} ms)`;
  }
  const ms = kind === 'pause_short' ? Math.floor(leaseTtlMs / 2) : Math.floor(leaseTtlMs * 1.5) + 500;
  server.pause();
  try {
    await sleep(ms);
  } finally {
    server.pause(true);
  }
  return `SIGSTOPped ${ms} ms (ttl ${leaseTtlMs} ms)`;
}

/** Runs the crash test on replicas and returns counts and violations (never throws for a violation). */
export async function runReplicaCrashTest(o: ReplicaCrashOptions): Promise<ReplicaCrashReport> {
  if (o.replicas < 2) throw new Error('the replicas crash test needs at least 2 replicas');
  if (o.tctis.length < o.replicas) throw new Error('one TPM (tcti) per replica');
  const [minUp, maxUp] = [o.minUpMs ?? 200, o.maxUpMs ?? 1500];
  const leaseTtlMs = o.leaseTtlMs ?? 3000;
  const renewEveryMs = o.renewEveryMs ?? 1000;
  const upstream = await startLoggingUpstream();
  const load = new CrashLoad(TOKEN, 'up.work', o.concurrency ?? 8);
  let set: ReplicaSet | null = null;
  try {
    o.log?.((await migrate(o)).trim().split('\n').pop() ?? '');
    set = await ReplicaSet.start({
      repoRoot: o.repoRoot,
      dir: o.dir,
      count: o.replicas,
      config: (i, port) =>
        postgresReplicaConfig(baseConfig(upstream.url, o.tctis[i] as string), {
          i,
          port,
          databaseUrl: o.databaseUrl,
          leaseTtlMs,
          renewEveryMs,
        }),
      // A restart waits for the killed replica's lease to expire: a ttl and some.
      startTimeoutMs: leaseTtlMs * 4 + 30_000,
      log: o.log,
    });
    const replicas = set;
    const pick = () => {
      const up = replicas.running();
      return replicas.url(up[Math.floor(Math.random() * up.length)] ?? 0);
    };
    const stop = { stopped: false };
    const running = load.run(pick, stop);
    const restarts = new Map<number, Promise<void>>();
    const restartFailures: string[] = [];
    const pauseEvery = o.pauseEvery ?? 5;
    let pauses = 0;
    const faultEvery = o.postgres ? (o.faultEvery ?? 3) : 0;
    const faults: Record<string, number> = {};
    let nFaults = 0;
    for (let k = 0; k < o.kills; k++) {
      await sleep(minUp + Math.random() * (maxUp - minUp));
      if (o.postgres && faultEvery > 0 && (k + 1) % faultEvery === 0) {
        const kind = FAULTS[nFaults++ % FAULTS.length] as (typeof FAULTS)[number];
        faults[kind] = (faults[kind] ?? 0) + 1;
        // The faults are for running replicas: a start meeting an unreachable database exits
        // (its supervisor starts it again), which is not what this step tests.
        await Promise.all(restarts.values());
        // A replica answers /healthz before its start-up ends; wait (bounded) for each to be ready.
        for (const i of replicas.running()) await readyOf(replicas.url(i), 30_000);
        const before = replicas.running();
        let did: string;
        try {
          did = await injectFault(kind, o.postgres, o.databaseUrl, leaseTtlMs);
        } catch (e) {
          restartFailures.push(`PostgreSQL fault ${kind}: ${(e as Error).message.slice(0, 300)}`);
          continue;
        }
        // A lease lost to a stall past the ttl is regained within a renewal or two.
        await sleep(kind === 'pause_past_ttl' ? leaseTtlMs : renewEveryMs);
        for (const i of before)
          if (!replicas.running().includes(i) && !restarts.has(i))
            restartFailures.push(
              `replica ${i}: exited after PostgreSQL fault ${kind}; log: ${replicas.logTail(i, 400)}`,
            );
        o.log?.(`fault ${k + 1}/${o.kills}: PostgreSQL ${kind}: ${did}; ${load.counts.requests} requests`);
        continue;
      }
      // Keep one replica serving: with every other one down, wait for a restart first.
      while (replicas.running().length <= 1 && restarts.size) await Promise.race(restarts.values());
      const up = replicas.running();
      const victim = up[Math.floor(Math.random() * up.length)] as number;
      const pause = pauseEvery > 0 && (k + 1) % pauseEvery === 0 && up.length >= 2;
      if (pause) {
        pauses++;
        replicas.pause(victim);
        // Past its lease's expiry and one sweep of another replica (every ttl).
        await sleep(leaseTtlMs * 2 + 1000);
        replicas.pause(victim, true);
        const gate = await leaseGateOf(replicas.url(victim));
        // Gone by itself is fenced too (its supervisor starts it again); alive and not saying
        // LEASE_LOST is the violation.
        if (gate !== 'LEASE_LOST' && replicas.running().includes(victim))
          restartFailures.push(
            `replica ${victim}: resumed after its lease expired, /readyz lease check ${gate}; log: ${replicas.logTail(victim, 400)}`,
          );
        else if (gate !== 'LEASE_LOST')
          o.log?.(`replica ${victim}: exited after its resume (${gate}): ${replicas.logTail(victim, 400)}`);
      }
      await replicas.kill(victim);
      const restart = replicas
        .restart(victim)
        .catch((e: Error) => {
          restartFailures.push(`replica ${victim}: ${e.message.slice(0, 500)}`);
        })
        .finally(() => restarts.delete(victim));
      restarts.set(victim, restart);
      o.log?.(
        `kill ${k + 1}/${o.kills}${pause ? ' (paused past its lease first)' : ''}: replica ${victim}; ${load.counts.requests} requests, ${upstream.ran.length} ran upstream`,
      );
    }
    await Promise.all(restarts.values());
    // Every replica is back: serve a little more (retries too), then stop them all gracefully.
    await sleep(maxUp);
    let turn = 0;
    const anyReplica = () => {
      const up = replicas.running();
      return replicas.url(up[turn++ % up.length] as number);
    };
    const receipts = await checkCrashReceipts(anyReplica, TOKEN, load.answered);
    o.log?.(
      `receipts: ${receipts.receipts} verified, ${receipts.sessions} sessions, ${receipts.consistencyProofs} consistency proofs`,
    );
    const exitCodes = await replicas.stopAll();
    stop.stopped = true;
    await running;
    await sleep(500); // upstream calls still sleeping have logged already; let them end
    const snapshot = await readPostgresSnapshot(o.databaseUrl);
    return {
      kills: o.kills,
      pauses,
      faults,
      starts: Array.from({ length: o.replicas }, (_, i) => replicas.starts(i)),
      exitCodes,
      restartFailures,
      load: load.counts,
      check: checkCrashSnapshot(snapshot, 'up.work', upstream.ran, load.answered),
      receipts,
    };
  } finally {
    await set?.stopAll();
    await upstream.close();
  }
}
