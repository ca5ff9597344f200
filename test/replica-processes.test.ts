/**
 * Replicas as real OS processes on one real PostgreSQL (testing/postgres.ts): each child
 * (test/harness/replica-child.mjs, the built store) holds its own lease, opens a session and
 * records a call's admission and attempt, then waits "at the upstream". This process is another
 * replica whose sweep seals expired leases (src/store/postgres/replica-lease.ts).
 * - SIGKILL of a replica mid-call: its attempt is sealed `outcome_unknown` by the other replica
 *   once its lease expired by the database's clock, and not before.
 * - SIGSTOP of a replica mid-call: its lease is taken over and its call sealed; after SIGCONT
 *   its terminal fails with LEASE_LOST (nothing written after the fence) and its gate closes
 *   (it admits no request).
 * Needs the build (dist/), as the other process tests do.
 */
import { type ChildProcess, spawn } from 'node:child_process';
import { join } from 'node:path';
import pg from 'pg';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { migratePostgres } from '../src/store/migrations/postgres.js';
import { chainEntries } from '../src/store/postgres/chain.js';
import { acquireLease } from '../src/store/postgres/leases.js';
import { ReplicaLease } from '../src/store/postgres/replica-lease.js';
import { LEASE_EXPIRED_REASON } from '../src/store/postgres/sealing.js';
import { openReplicaPool } from '../src/store/postgres/transaction.js';
import { createDatabase, type PostgresInstance, startPostgres } from '../testing/postgres.js';
import { exited, waitExit } from '../testing/process.js';
import { REPO_ROOT } from './harness/gateway.js';
import { hasPostgres } from './harness/postgres.js';

const withPostgres = hasPostgres();
const TTL_MS = 1500;
const RENEW_MS = 300;
let server: PostgresInstance | null = null;
let url = '';
let admin: pg.Pool;
let sealerPool: pg.Pool;
let sealer: ReplicaLease | null = null;
const children: ChildProcess[] = [];

beforeAll(async () => {
  if (!withPostgres) return;
  server = await startPostgres();
  url = await createDatabase(server, 'processes_1');
  admin = new pg.Pool({ connectionString: url, max: 2 });
  admin.on('error', () => undefined); // the server's stop at the end must not be an unhandled 'error'
  const c = await admin.connect();
  try {
    await migratePostgres(c, 'processes_1');
  } finally {
    c.release();
  }
  sealerPool = openReplicaPool(url, { leaseTtlMs: 60_000, max: 4 });
  sealer = await ReplicaLease.start(sealerPool, {
    replicaId: 'sealer',
    holder: 'test process',
    keyThumbprint: 'sealer',
    ttlMs: 60_000,
    sweepEveryMs: 100,
  });
}, 60_000);
afterAll(async () => {
  for (const c of children) if (!exited(c)) c.kill('SIGKILL');
  await sealer?.stop();
  await sealerPool?.end();
  await admin?.end();
  await server?.stop();
});

/** A replica process, and the lines it printed so far. */
function replica(id: string): { proc: ChildProcess; line: (prefix: string) => Promise<string> } {
  const proc = spawn(
    process.execPath,
    [join(REPO_ROOT, 'test/harness/replica-child.mjs'), url, id, String(TTL_MS), String(RENEW_MS)],
    { cwd: REPO_ROOT, stdio: ['pipe', 'pipe', 'inherit'] },
  );
  children.push(proc);
  let out = '';
  proc.stdout?.on('data', (d) => {
    out += String(d);
  });
  const line = (prefix: string) =>
    new Promise<string>((ok, fail) => {
      const t = setInterval(() => {
        const l = out.split('\n').find((x) => x.startsWith(prefix));
        if (l) {
          clearInterval(t);
          ok(l);
        } else if (exited(proc)) {
          clearInterval(t);
          fail(new Error(`replica ${id} exited before printing "${prefix}"`));
        }
      }, 20);
    });
  return { proc, line };
}

/** The execution's state and the replica lease's expiry, with the database's clock, in one statement. */
async function observe(replicaId: string, executionId: string) {
  const r = await admin.query<{ state: string; expires_ms: string; now_ms: string; lease_token: string }>(
    `SELECT x.state, l.expires_ms::text, l.lease_token::text,
            (extract(epoch from clock_timestamp()) * 1000)::bigint::text AS now_ms
       FROM executions x, replica_leases l WHERE x.execution_id = $1 AND l.replica_id = $2`,
    [executionId, replicaId],
  );
  const row = r.rows[0];
  if (!row) throw new Error('no execution or lease row');
  return {
    state: row.state,
    expiresMs: Number(row.expires_ms),
    nowMs: Number(row.now_ms),
    token: Number(row.lease_token),
  };
}

describe.skipIf(!withPostgres)('replicas as processes', () => {
  it('SIGKILL of a replica mid-call: another replica seals its call outcome_unknown after its lease expired, not before', async () => {
    const a = replica('replica-k');
    const [, sessionId, callId] = (await a.line('attempted')).split(' ') as [string, string, string];
    a.proc.kill('SIGKILL');
    expect(await waitExit(a.proc, 5000)).toBe(true);
    const killed = await observe('replica-k', 'replica-k-x');
    expect(killed.state).toBe('in_flight');
    let sawLiveBeforeExpiry = false;
    let sealed = killed;
    const end = Date.now() + 15_000;
    for (;;) {
      sealed = await observe('replica-k', 'replica-k-x');
      if (sealed.state !== 'in_flight') break;
      if (sealed.nowMs < killed.expiresMs) sawLiveBeforeExpiry = true;
      if (Date.now() > end) throw new Error('never sealed');
      await new Promise((r) => setTimeout(r, 50));
    }
    expect(sawLiveBeforeExpiry).toBe(true);
    expect(sealed.state).toBe('outcome_unknown');
    expect(sealed.nowMs).toBeGreaterThanOrEqual(killed.expiresMs);
    const entries = await chainEntries(admin, sessionId);
    const terminals = entries.filter((e) => e.entry_type === 'tool_call' && e.call_id === callId);
    expect(terminals).toHaveLength(1);
    const t = terminals[0] as (typeof terminals)[number];
    expect(t.disposition).toBe('outcome_unknown');
    expect(t.error_code).toBe('CALL_INTERRUPTED');
    expect(t.detail).toMatchObject({
      reason: LEASE_EXPIRED_REASON,
      sealed_replica: 'replica-k',
      sealed_by: 'sealer',
    });
    expect(Date.parse(t.timestamp_utc)).toBeGreaterThanOrEqual(killed.expiresMs);
    const open = await admin.query('SELECT 1 FROM call_attempts WHERE call_id = $1', [callId]);
    expect(open.rowCount).toBe(0);
  }, 60_000);

  it('SIGSTOP of a replica mid-call: its lease is taken over and its call sealed; after SIGCONT its terminal fails with LEASE_LOST and its gate closes', async () => {
    const b = replica('replica-s');
    const [, sessionId, callId, token] = (await b.line('attempted')).split(' ') as [
      string,
      string,
      string,
      string,
    ];
    b.proc.kill('SIGSTOP');
    const end = Date.now() + 15_000;
    let seen = await observe('replica-s', 'replica-s-x');
    while (seen.state === 'in_flight') {
      if (Date.now() > end) throw new Error('never sealed');
      await new Promise((r) => setTimeout(r, 50));
      seen = await observe('replica-s', 'replica-s-x');
    }
    expect(seen.state).toBe('outcome_unknown');
    expect(seen.token).toBeGreaterThan(Number(token));
    b.proc.kill('SIGCONT');
    b.proc.stdin?.write('terminal\n');
    expect(await b.line('terminal')).toBe('terminal LEASE_LOST');
    expect(await b.line('gate')).toBe('gate lost');
    expect(await waitExit(b.proc, 10_000)).toBe(true);
    const entries = (await chainEntries(admin, sessionId)).filter((e) => e.call_id === callId);
    expect(entries.map((e) => [e.entry_type, e.disposition])).toEqual([['tool_call', 'outcome_unknown']]);
    expect((await observe('replica-s', 'replica-s-x')).state).toBe('outcome_unknown');
    // Once the sealing is done (state sealed), a restart takes the lease under a new token.
    const until = Date.now() + 10_000;
    while (
      (await admin.query("SELECT 1 FROM replica_leases WHERE replica_id = 'replica-s' AND state = 'sealed'"))
        .rowCount === 0
    ) {
      if (Date.now() > until) throw new Error('never marked sealed');
      await new Promise((r) => setTimeout(r, 50));
    }
    await expect(
      acquireLease(admin, { replicaId: 'replica-s', holder: 'restart', keyThumbprint: 's', ttlMs: TTL_MS }),
    ).resolves.toMatchObject({ fence: { replicaId: 'replica-s' } });
  }, 60_000);
});
