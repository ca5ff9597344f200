/**
 * The replica processes of the replicas' crash test and bench (testing/replicas.ts): real
 * `cmcp start` processes (dist/), here two on one SQLite file (several processes of one host
 * share a file, one live process per instance_id): both serve, a SIGKILLed one starts again
 * with its config and port, a start of an instance_id that is still live is refused with
 * INSTANCE_RUNNING and tried again until its deadline, and a graceful stop exits 0.
 */
import { existsSync, mkdtempSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { loadConfig } from '../src/config/index.js';
import { postgresReplicaConfig, ReplicaSet } from '../testing/replicas.js';
import { cleanup, REPO_ROOT } from './harness/gateway.js';

const dir = mkdtempSync(join(tmpdir(), 'cmcp-replica-set-'));
const sets: ReplicaSet[] = [];
afterAll(async () => {
  for (const s of sets) await s.stopAll();
  cleanup(dir);
});

const base = (i: number, port: number) => ({
  dev_mode: true,
  instance_id: `replica-${i}`,
  listen: { host: '127.0.0.1', port },
  database: join(dir, 'shared.db'),
  attestation: { provider: 'software' },
});

async function ready(url: string): Promise<number> {
  return (await fetch(`${url}/readyz`)).status;
}

describe('replica processes', () => {
  it('postgresReplicaConfig gives each replica its own instance_id and listener, the shared URL and the lease settings', () => {
    const c = postgresReplicaConfig(
      { dev_mode: true, attestation: { provider: 'software' } },
      {
        i: 2,
        port: 9000,
        databaseUrl: 'postgres://u@127.0.0.1:5432/cmcp',
        leaseTtlMs: 3000,
        renewEveryMs: 1000,
      },
    );
    expect(c).toEqual({
      dev_mode: true,
      attestation: { provider: 'software' },
      instance_id: 'replica-2',
      listen: { host: '127.0.0.1', port: 9000 },
      database: 'postgres://u@127.0.0.1:5432/cmcp',
      replicas: { lease_ttl_ms: 3000, renew_every_ms: 1000 },
    });
  });

  it('two on one SQLite file: both serve; a killed one restarts on its port; a live instance_id is refused; stops exit 0', async () => {
    if (!existsSync(join(REPO_ROOT, 'dist', 'src', 'cli', 'main.js')))
      throw new Error('dist/ is missing: run `npm run build` first');
    const set = await ReplicaSet.start({ repoRoot: REPO_ROOT, dir, count: 2, config: base });
    sets.push(set);
    expect(set.running()).toEqual([0, 1]);
    // The written configs are valid gateway configs with distinct instances.
    expect(loadConfig(join(dir, 'replica-1.yaml')).instance_id).toBe('replica-1');
    for (const i of [0, 1]) expect(await ready(set.url(i))).toBe(200);

    const pid = set.pid(1);
    await set.kill(1);
    expect(set.running()).toEqual([0]);
    await expect(fetch(`${set.url(1)}/healthz`)).rejects.toThrow();
    await set.restart(1);
    expect(set.pid(1)).not.toBe(pid);
    expect(set.starts(1)).toBe(2);
    expect(await ready(set.url(1))).toBe(200);

    // A second process of replica-0 while the first lives: refused and retried until the deadline.
    const other = mkdtempSync(join(dir, 'other-'));
    const lines: string[] = [];
    await expect(
      ReplicaSet.start({
        repoRoot: REPO_ROOT,
        dir: other,
        count: 1,
        config: (_i, port) => base(0, port),
        startTimeoutMs: 8000,
        log: (l) => lines.push(l),
      }),
    ).rejects.toThrow(/INSTANCE_RUNNING/);
    expect(lines.some((l) => l.includes('start refused (INSTANCE_RUNNING, try 1)'))).toBe(true);

    expect(await set.stopAll()).toEqual([0, 0]);
    expect(set.running()).toEqual([]);
  }, 120_000);
});
