/**
 * `cmcp_replica_lease{state}` (docs/operations.md#metrics-traces-readiness) on a real `cmcp start`
 * replica on a real throw-away PostgreSQL (testing/postgres.ts), scraped on its metrics listener:
 * `live` while it holds its lease; after it stalled (SIGSTOP) past the lease ttl while another
 * holder of its instance_id took the lease over, `lost` (its main listener then admits only the
 * probes, /metrics not among them); once that holder lets go, `live` again
 * (the replica regains its lease by itself). `promtool check metrics` finds nothing in cmcp's
 * families at each step. Needs the build (dist/).
 */
import { spawnSync } from 'node:child_process';
import { mkdtempSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import pino from 'pino';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { LeaseGate, startReplicaLease } from '../src/gateway/lifecycle/lease-gate.js';
import type { ReplicaLease } from '../src/store/postgres/replica-lease.js';
import { openReplicaPool } from '../src/store/postgres/transaction.js';
import { type ChildGateway, freePort, startChild, writeConfig } from './harness/gateway.js';
import { hasPostgres } from './harness/postgres.js';
import { type ReplicaBackend, startReplicaBackend, stopReplicaBackend } from './harness/replicas.js';

const withPostgres = hasPostgres();
const replicas = { lease_ttl_ms: 2000, renew_every_ms: 400 };
const OP = 'lease-metrics-operator';
let backend: ReplicaBackend | null = null;
const children: ChildGateway[] = [];
const dirs: string[] = [];

beforeAll(async () => {
  if (withPostgres) backend = await startReplicaBackend('lease_metrics_1');
}, 60_000);
afterAll(async () => {
  await stopReplicaBackend(backend ?? {}, children, dirs);
});

/** The lease gauge's two series from one scrape of `base`/metrics, and the scrape's cmcp lines. */
async function leaseGauge(base: string): Promise<{ live: number; lost: number; own: string }> {
  const text = await (await fetch(`${base}/metrics`)).text();
  const value = (state: string) => {
    const m = new RegExp(`^cmcp_replica_lease\\{state="${state}"\\} (\\S+)$`, 'm').exec(text);
    return m ? Number(m[1]) : Number.NaN;
  };
  const own = text
    .split('\n')
    .filter((l) => /^(# (HELP|TYPE) )?cmcp_/.test(l))
    .join('\n');
  return { live: value('live'), lost: value('lost'), own };
}

/** promtool's findings on `exposition` (empty: clean). @throws when promtool is not installed. */
function promtool(exposition: string): string {
  const r = spawnSync('promtool', ['check', 'metrics'], { input: `${exposition}\n`, encoding: 'utf8' });
  if (r.error) throw new Error('promtool is not installed (Debian package prometheus)');
  return `${r.stdout}${r.stderr}${r.status === 0 ? '' : `exit ${r.status}`}`;
}

async function until<T>(read: () => Promise<T>, ok: (v: T) => boolean, ms: number): Promise<T> {
  const end = Date.now() + ms;
  for (;;) {
    const v = await read();
    if (ok(v) || Date.now() > end) return v;
    await new Promise((r) => setTimeout(r, 200));
  }
}

describe.skipIf(!withPostgres)("a replica's lease gauge", () => {
  it('shows the held lease, then the lost one while another holder has it, then the regained one', async () => {
    const b = backend as ReplicaBackend;
    const dir = mkdtempSync(join(tmpdir(), 'cmcp-lease-metrics-'));
    dirs.push(dir);
    const metricsPort = await freePort();
    const cfg = await writeConfig({
      dir,
      port: await freePort(),
      upstreams: [{ name: 'c', transport: 'http', url: b.up.url }],
      operators: [{ operator_id: 'ops', token: OP }],
      extra: {
        database: b.url,
        instance_id: 'lm0',
        replicas,
        metrics: { listen: { host: '127.0.0.1', port: metricsPort } },
      },
    });
    const child = await startChild(cfg);
    children.push(child);
    const metricsUrl = `http://127.0.0.1:${metricsPort}`;

    const held = await leaseGauge(metricsUrl);
    expect(held).toMatchObject({ live: 1, lost: 0 });
    expect(held.own).toContain('# TYPE cmcp_replica_lease gauge');
    expect(promtool(held.own)).toBe('');

    // The replica stalls past its ttl; another holder of its instance_id takes the lease over.
    child.proc.kill('SIGSTOP');
    let successor: ReplicaLease | null = null;
    const pool = openReplicaPool(b.url, { leaseTtlMs: replicas.lease_ttl_ms, max: 2 });
    try {
      await new Promise((r) => setTimeout(r, replicas.lease_ttl_ms + 1500));
      successor = await startReplicaLease(pool, {
        instanceId: 'lm0',
        replicas,
        keyThumbprint: 'lease-metrics-successor',
        gate: new LeaseGate(),
        log: pino({ level: 'silent' }),
      });
      child.proc.kill('SIGCONT');
      const lost = await until(
        () => leaseGauge(metricsUrl),
        (g) => g.lost === 1,
        10_000,
      );
      expect(lost).toMatchObject({ live: 0, lost: 1 });
      expect(promtool(lost.own)).toBe('');
      // The main listener admits nothing but the probes now: readiness says why.
      const ready = await fetch(`${child.url}/readyz`);
      expect(ready.status).toBe(503);
      expect(((await ready.json()) as { checks: { lease: string } }).checks.lease).toBe('LEASE_LOST');

      // The other holder lets go: the replica acquires its lease again by itself.
      await successor.stop();
      successor = null;
      const regained = await until(
        () => leaseGauge(metricsUrl),
        (g) => g.live === 1,
        15_000,
      );
      expect(regained).toMatchObject({ live: 1, lost: 0 });
      expect(promtool(regained.own)).toBe('');
    } finally {
      child.proc.kill('SIGCONT');
      await successor?.stop().catch(() => undefined);
      await pool.end();
    }
  }, 90_000);
});
