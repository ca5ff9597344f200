import pg from 'pg';
import { describe, expect, it } from 'vitest';
import { hasPostgres } from './harness/postgres.js';
import { sleep, useReplicaPair } from './harness/replica-pair.js';

const withPostgres = hasPostgres();
const TTL_MS = 15_000;
const RENEW_MS = 5000;
const pair = useReplicaPair({
  name: 'db-outage',
  leaseTtlMs: TTL_MS,
  renewEveryMs: RENEW_MS,
  enabled: withPostgres,
});
const { expectBothServe, load } = pair;

/** Each replica's lease token and the pids of the replicas' processes. */
async function tokens(): Promise<Record<string, number>> {
  const c = new pg.Client({ connectionString: pair.databaseUrl });
  c.on('error', () => undefined);
  await c.connect();
  try {
    const r = await c.query<{ replica_id: string; lease_token: string }>(
      'SELECT replica_id, lease_token::text FROM replica_leases ORDER BY replica_id',
    );
    return Object.fromEntries(r.rows.map((x) => [x.replica_id, Number(x.lease_token)]));
  } finally {
    await c.end().catch(() => undefined);
  }
}

/** The lease check of each replica's /readyz, polled every 100 ms for `ms`: every value seen. */
async function leaseChecks(ms: number): Promise<Set<string>> {
  const seen = new Set<string>();
  for (const end = Date.now() + ms; Date.now() < end; await sleep(100))
    for (const i of [0, 1]) {
      const r = await fetch(`${pair.replicas.url(i)}/readyz`, {
        signal: AbortSignal.timeout(2000),
      }).then(
        (x) => x.json() as Promise<{ checks?: { lease?: string | null } }>,
        () => null,
      );
      seen.add(String(r?.checks?.lease ?? null));
    }
  return seen;
}

describe.skipIf(!withPostgres)("a database outage and the replicas' leases", () => {
  it('the postmaster down for 8.4 s (ttl 15 s, renewal 5 s): both keep their lease and serve', async () => {
    const replicas = pair.replicas;
    const pids = [replicas.pid(0), replicas.pid(1)];
    const before = await tokens();
    const stop = { stopped: false };
    const running = load(stop);
    await sleep(500);
    const downAt = Date.now();
    await pair.server.down('immediate');
    const watching = leaseChecks(8400 + 6000);
    await sleep(Math.max(0, 8400 - (Date.now() - downAt)));
    await pair.server.up();
    stop.stopped = true;
    await running;
    const seen = await watching;
    await expectBothServe(10_000);
    expect(seen.has('LEASE_LOST')).toBe(false);
    expect(await tokens()).toEqual(before);
    expect([replicas.pid(0), replicas.pid(1)]).toEqual(pids);
  }, 120_000);

  it('the server SIGSTOPped past the ttl: both lose their lease, acquire one again by themselves, and serve', async () => {
    const replicas = pair.replicas;
    const pids = [replicas.pid(0), replicas.pid(1)];
    const before = await tokens();
    pair.server.pause();
    await sleep(TTL_MS + 3000);
    pair.server.pause(true);
    await expectBothServe(TTL_MS * 3);
    const after = await tokens();
    for (const id of ['replica-0', 'replica-1']) expect(after[id]).toBeGreaterThan(before[id] as number);
    expect([replicas.pid(0), replicas.pid(1)]).toEqual(pids);
  }, 180_000);
});
