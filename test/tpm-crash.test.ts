/**
 * Crash-proof TPM use (docs/spec/tpm.md#instance-ak) on one swtpm, which holds only 3 transient
 * objects and never flushes them by itself: this instance's leftovers are flushed at start-up and
 * another instance's never are; 20 SIGKILLs of `cmcp start` under load leave nothing that
 * accumulates, and sessions are still hardware-bound afterwards.
 */
import { mkdtempSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import {
  flushInstanceLeftovers,
  instanceAkHandle,
  instanceTag,
  parsePublic,
  Tpm,
  transientHandles,
} from '../native/tpm/index.js';
import { startSwtpm } from '../testing/vitest-swtpm.js';
import { type CountingServer, startCountingServer } from './fixtures/counting-server.js';
import {
  type ChildGateway,
  cleanup,
  freePort,
  rest,
  rpc,
  startChild,
  writeConfig,
} from './harness/gateway.js';

let up: CountingServer;
let tpm: Awaited<ReturnType<typeof startSwtpm>>;
const dir = mkdtempSync(join(tmpdir(), 'cmcp-tpm-crash-'));
const children: ChildGateway[] = [];

beforeAll(async () => {
  up = await startCountingServer();
  tpm = await startSwtpm();
});
afterAll(async () => {
  for (const c of children) await c.stop('SIGKILL');
  up?.release();
  await up?.close();
  await tpm?.stop();
  cleanup(dir);
});

/** Creates a tagged AK as `instanceId` would and leaves it loaded, as a SIGKILL would. */
function leakTaggedAk(instanceId: string): void {
  const t = Tpm.open(tpm.tcti);
  try {
    const ak = t.createAk('ecc-p256', instanceTag(instanceId)) as unknown as { handle: number | null };
    ak.handle = null; // forget it: close() no longer flushes it (the process "died")
  } finally {
    t.close();
  }
}

function withTpm<T>(fn: (t: Tpm) => T): T {
  const t = Tpm.open(tpm.tcti);
  try {
    return fn(t);
  } finally {
    t.close();
  }
}

const tagsOfTransients = () =>
  withTpm((t) =>
    transientHandles(t).map((h) => {
      const pub = t.readPublic(h);
      return pub ? parsePublic(pub.publicArea).authPolicy.toString('hex') : null;
    }),
  );

describe('leftover transients', () => {
  it("flushes this instance's tagged leftovers and never another instance's", () => {
    leakTaggedAk('mine');
    leakTaggedAk('other');
    expect(tagsOfTransients().sort()).toEqual(
      [instanceTag('mine').toString('hex'), instanceTag('other').toString('hex')].sort(),
    );
    expect(withTpm((t) => flushInstanceLeftovers(t, 'mine'))).toBe(1);
    expect(tagsOfTransients()).toEqual([instanceTag('other').toString('hex')]);
    // The other instance's leftover stays through everything below (one of the 3 slots).
  });
});

describe('20 SIGKILLs under load on one swtpm', () => {
  it('leave no transient of the gateway behind, and sessions stay hardware-bound', async () => {
    const port = await freePort();
    const cfg = await writeConfig({
      dir,
      port,
      upstreams: [{ name: 'c', transport: 'http', url: up.url, timeout_ms: 10_000 }],
      attestation: { provider: 'tpm', tcti: tpm.tcti, ak_algorithm: 'ecc-p256', pcrs: [0, 7] },
      extra: { instance_id: 'crash-a' },
    });
    const statuses: string[] = [];
    for (let kill = 0; kill < 20; kill++) {
      const child = await startChild(cfg);
      children.push(child);
      // Load: sessions opened (each a quote), calls with and without execution_id, a held call.
      const load = Array.from({ length: 6 }, (_, i) =>
        i % 3 === 0
          ? rest(child.url, 'alice-token', 'POST', '/sessions', {}).then((r) => {
              if (r.status === 201) statuses.push(r.body.binding.status);
            })
          : rpc(child.url, 'alice-token', {
              jsonrpc: '2.0',
              id: i,
              method: 'tools/call',
              params: {
                name: i % 3 === 1 ? 'c.record' : 'c.hold',
                arguments: { k: kill, i, ms: 2000 },
                ...(i % 2 ? { _cmcp: { execution_id: `k${kill}-${i}` } } : {}),
              },
            }),
      ).map((p) => p.catch(() => null));
      await new Promise((r) => setTimeout(r, 50 + Math.floor(Math.random() * 300)));
      await child.stop('SIGKILL');
      await Promise.all(load);
    }
    // Between runs nothing of this instance is transient; the other instance's leftover is intact.
    expect(tagsOfTransients()).toEqual([instanceTag('other').toString('hex')]);
    expect(withTpm((t) => t.readPublic(instanceAkHandle('crash-a')))).not.toBeNull();

    const last = await startChild(cfg);
    children.push(last);
    const s = await rest(last.url, 'alice-token', 'POST', '/sessions', {});
    expect(s.status).toBe(201);
    expect(s.body.binding.status).toBe('bound');
    await last.stop('SIGKILL');
    expect(statuses.length).toBeGreaterThan(0);
    expect(statuses.every((x) => x === 'bound')).toBe(true);
    expect(tagsOfTransients()).toEqual([instanceTag('other').toString('hex')]);
  }, 300_000);
});
