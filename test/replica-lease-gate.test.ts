/**
 * A replica's lease at the HTTP edge (src/gateway/lifecycle/lease-gate.ts) on a real throw-away PostgreSQL
 * (testing/postgres.ts): while the lease is live requests are admitted and readiness reports the
 * lease; once another holder of the same instance_id took the expired lease over, the replica's
 * next renewal finds it lost, its writes fail their fence (LEASE_LOST, nothing written), every
 * request but the probes is refused with LEASE_LOST and readiness goes 503-worthy. And the
 * `replicas` config section's defaults and bounds (src/config/replicas.ts).
 */
import { mkdtempSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { GATEWAY_CHAIN_ID } from '@cmcp/verify/formats';
import Fastify, { type FastifyInstance } from 'fastify';
import pino from 'pino';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { REPLICA_DEFAULTS, replicasSchema } from '../src/config/replicas.js';
import { Readiness } from '../src/gateway/health/readiness.js';
import { LeaseGate, startReplicaLease } from '../src/gateway/lifecycle/lease-gate.js';
import { migratePostgres } from '../src/store/migrations/postgres.js';
import { chainEntries } from '../src/store/postgres/chain.js';
import type { ReplicaLease } from '../src/store/postgres/replica-lease.js';
import { PostgresSessionStore } from '../src/store/postgres/session-store.js';
import { openReplicaPool } from '../src/store/postgres/transaction.js';
import { type Db, openDatabase } from '../src/store/sqlite/db.js';
import { sqliteWriteProbe } from '../src/store/sqlite/write-probe.js';
import { SoftwareProvider } from '../src/tee/provider.js';
import { UpstreamPool } from '../src/upstream/pool.js';
import { createDatabase, type PostgresInstance, startPostgres } from '../testing/postgres.js';
import { hasPostgres } from './harness/postgres.js';

const withPostgres = hasPostgres();
const log = pino({ level: 'silent' });
let server: PostgresInstance | null = null;
let url = '';
let sqlite: Db;
const pools: import('pg').Pool[] = [];
const leases: ReplicaLease[] = [];

beforeAll(async () => {
  sqlite = openDatabase(join(mkdtempSync(join(tmpdir(), 'cmcp-gate-')), 'probe.db'), 1000);
  if (!withPostgres) return;
  server = await startPostgres();
  url = await createDatabase(server, 'gate_1');
  const admin = openReplicaPool(url, { leaseTtlMs: 60_000, max: 1 });
  const c = await admin.connect();
  try {
    await migratePostgres(c, 'gate_1');
  } finally {
    c.release();
  }
  pools.push(admin);
}, 60_000);
afterAll(async () => {
  for (const l of leases) await l.stop().catch(() => undefined);
  for (const p of pools) await p.end();
  sqlite?.close();
  await server?.stop();
});

/** A small app behind the gate: a JSON-RPC route, a REST route, and /readyz from a real Readiness. */
async function app(gate: LeaseGate): Promise<{ app: FastifyInstance; readiness: Readiness }> {
  const readiness = new Readiness(
    sqliteWriteProbe(sqlite, 'gateway'),
    new UpstreamPool([], log),
    new SoftwareProvider(),
    null,
    gate,
  );
  const a = Fastify();
  gate.attach(a);
  a.post('/mcp', { config: { jsonRpc: true } }, async () => ({ jsonrpc: '2.0', id: 1, result: {} }));
  a.get('/sessions', async () => ({ sessions: [] }));
  a.get('/readyz', async (_req, reply) => {
    const r = await readiness.check();
    return reply.code(r.ready ? 200 : 503).send(r);
  });
  await a.ready();
  return { app: a, readiness };
}

async function until(cond: () => boolean, ms: number): Promise<boolean> {
  const end = Date.now() + ms;
  while (!cond() && Date.now() < end) await new Promise((r) => setTimeout(r, 25));
  return cond();
}

describe.skipIf(!withPostgres)("a replica's lease at the edge", () => {
  it('admits while live; after a takeover of its lease it writes nothing and refuses every request but the probes with LEASE_LOST', async () => {
    const replicas = { lease_ttl_ms: 1500, renew_every_ms: 200 };
    const pool = openReplicaPool(url, { leaseTtlMs: replicas.lease_ttl_ms, max: 4 });
    pools.push(pool);
    const gate = new LeaseGate();
    const lease = await startReplicaLease(pool, {
      instanceId: 'replica-a',
      replicas,
      keyThumbprint: 't-a',
      gate,
      log,
    });
    leases.push(lease);
    const { app: a } = await app(gate);

    expect((await a.inject({ method: 'POST', url: '/mcp', payload: {} })).statusCode).toBe(200);
    const ready = await a.inject({ method: 'GET', url: '/readyz' });
    expect(ready.statusCode).toBe(200);
    expect(ready.json().checks.lease).toBeNull();

    // The replica stalls (as under SIGSTOP): its lease runs out while another process of the
    // same instance_id takes it over, under the next token.
    const [admin] = pools as [import('pg').Pool];
    await admin.query(
      "UPDATE replica_leases SET expires_ms = expires_ms - 60000 WHERE replica_id = 'replica-a'",
    );
    const pool2 = openReplicaPool(url, { leaseTtlMs: replicas.lease_ttl_ms, max: 4 });
    pools.push(pool2);
    const gate2 = new LeaseGate();
    const successor = await startReplicaLease(pool2, {
      instanceId: 'replica-a',
      replicas,
      keyThumbprint: 't-a2',
      gate: gate2,
      log,
    });
    leases.push(successor);
    expect(successor.fence.leaseToken).toBeGreaterThan(lease.fence.leaseToken);

    expect(await until(() => !gate.live, 3000)).toBe(true);
    expect(lease.live).toBe(false);
    expect(gate2.live).toBe(true);

    const rpc = await a.inject({ method: 'POST', url: '/mcp', payload: {} });
    expect(rpc.statusCode).toBe(503);
    expect(rpc.json().error.data.error_code).toBe('LEASE_LOST');
    const rest = await a.inject({ method: 'GET', url: '/sessions' });
    expect(rest.statusCode).toBe(503);
    expect(rest.json().error.error_code).toBe('LEASE_LOST');
    const unready = await a.inject({ method: 'GET', url: '/readyz' });
    expect(unready.statusCode).toBe(503);
    expect(unready.json().checks.lease).toBe('LEASE_LOST');

    // Its writes fail the fence; the successor's commit.
    const before = (await chainEntries(admin, GATEWAY_CHAIN_ID)).length;
    await expect(
      new PostgresSessionStore(pool, lease.fence).appendEntries(GATEWAY_CHAIN_ID, [
        { entry_type: 'operator_note' },
      ]),
    ).rejects.toMatchObject({ code: 'LEASE_LOST' });
    expect(await chainEntries(admin, GATEWAY_CHAIN_ID)).toHaveLength(before);
    await new PostgresSessionStore(pool2, successor.fence).appendEntries(GATEWAY_CHAIN_ID, [
      { entry_type: 'operator_note' },
    ]);
    expect(await chainEntries(admin, GATEWAY_CHAIN_ID)).toHaveLength(before + 1);
    await a.close();
  }, 60_000);

  it("a second replica of a live lease's instance_id does not start (INSTANCE_RUNNING)", async () => {
    const replicas = { lease_ttl_ms: 5000, renew_every_ms: 1000 };
    const pool = openReplicaPool(url, { leaseTtlMs: replicas.lease_ttl_ms, max: 2 });
    pools.push(pool);
    leases.push(
      await startReplicaLease(pool, {
        instanceId: 'replica-b',
        replicas,
        keyThumbprint: 'b',
        gate: new LeaseGate(),
        log,
      }),
    );
    await expect(
      startReplicaLease(pool, {
        instanceId: 'replica-b',
        replicas,
        keyThumbprint: 'b2',
        gate: new LeaseGate(),
        log,
      }),
    ).rejects.toMatchObject({
      code: 'INSTANCE_RUNNING',
      // It says when a start would succeed: once the lease (at most its ttl) expired.
      message: expect.stringMatching(/its lease expires in \d+ ms, then this start succeeds/),
    });
  }, 30_000);
});

describe('the replicas config section', () => {
  it('defaults to a 15 s lease renewed every 5 s, and refuses a renewal slower than half the ttl', () => {
    expect(replicasSchema.parse(undefined)).toEqual(REPLICA_DEFAULTS);
    expect(replicasSchema.parse({ lease_ttl_ms: 30_000 })).toEqual({
      lease_ttl_ms: 30_000,
      renew_every_ms: 5000,
    });
    const bad = replicasSchema.safeParse({ lease_ttl_ms: 4000, renew_every_ms: 2500 });
    expect(bad.success).toBe(false);
    expect(bad.error?.issues[0]?.path).toEqual(['renew_every_ms']);
    expect(replicasSchema.safeParse({ lease_ttl_ms: 500 }).success).toBe(false);
    expect(replicasSchema.safeParse({ lease_ttl_ms: 15_000, extra: 1 }).success).toBe(false);
  });
});
