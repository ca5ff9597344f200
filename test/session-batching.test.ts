/**
 * Batched session bindings on swtpm (docs/spec/binding.md#batched-bindings): sessions opened
 * together share quotes, each claim proves its leaf with an RFC 6962 audit path and verifies
 * (library and `cmcp verify`); a lone session is bound at once in a tree of one; a tampered
 * proof, a wrong index, a wrong root and an out-of-range size or index are each refused with
 * their own reason. The TPM quote runs off the event loop: behind a TPM that takes 50 ms per
 * quote (testing/tpm-latency-proxy.ts), a timer keeps firing during an asynchronous quote and
 * does not during a synchronous one.
 */
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import type { VerificationReport } from '@cmcp/verify';
import { verifyClaim } from '@cmcp/verify';
import { runVerify } from '@cmcp/verify/cli';
import type { AuditBundle } from '@cmcp/verify/formats';
import {
  b64u,
  batchDigest,
  bindingDigest,
  type Claim,
  merkleLeafHash,
  reportData,
  signClaim,
  type UnsignedClaim,
} from '@cmcp/verify/formats';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { Tpm, TpmError } from '../native/tpm/index.js';
import type { Gateway } from '../src/gateway/lifecycle/start.js';
import { TpmProvider } from '../src/tee/tpm-provider.js';
import { startTpmLatencyProxy, type TpmLatencyProxy } from '../testing/tpm-latency-proxy.js';
import { startSwtpm } from '../testing/vitest-swtpm.js';
import { type CountingServer, startCountingServer } from './fixtures/counting-server.js';
import { cleanup, rest, startInProcess, type TestConfig, writeConfig } from './harness/gateway.js';

let up: CountingServer;
let tpm: Awaited<ReturnType<typeof startSwtpm>>;
let cfg: TestConfig;
let gw: Gateway;
const dir = mkdtempSync(join(tmpdir(), 'cmcp-batch-'));

beforeAll(async () => {
  up = await startCountingServer();
  tpm = await startSwtpm();
  cfg = await writeConfig({
    upstreams: [{ name: 'c', transport: 'http', url: up.url }],
    attestation: { provider: 'tpm', tcti: tpm.tcti, ak_algorithm: 'ecc-p256', pcrs: [0, 7] },
  });
  gw = await startInProcess(cfg);
});
afterAll(async () => {
  await gw?.close();
  await tpm?.stop();
  await up?.close();
  if (cfg) cleanup(cfg.dir);
  rmSync(dir, { recursive: true, force: true });
});

const failed = (r: VerificationReport) =>
  r.checks.filter((c) => c.status === 'fail').map((c) => `${c.id}:${c.reason_code}`);

async function openAndClose(): Promise<{ claim: Claim; bundle: AuditBundle }> {
  const s = await rest(gw.url, 'alice-token', 'POST', '/sessions', {});
  expect(s.status).toBe(201);
  expect(s.body.binding.status).toBe('bound');
  const sid = s.body.session_id as string;
  const claim = (await rest(gw.url, 'alice-token', 'POST', `/sessions/${sid}/close`)).body as Claim;
  const bundle = (await rest(gw.url, 'alice-token', 'GET', `/sessions/${sid}/audit`)).body as AuditBundle;
  return { claim, bundle };
}

/** `cmcp verify` on the claim and bundle, as files: exit code and output. */
async function cli(claim: unknown, bundle: unknown): Promise<{ code: number; out: string }> {
  const name = `${Math.random().toString(36).slice(2)}`;
  const cp = join(dir, `${name}.claim.json`);
  const bp = join(dir, `${name}.bundle.json`);
  writeFileSync(cp, JSON.stringify(claim));
  writeFileSync(bp, JSON.stringify(bundle));
  let out = '';
  const code = await runVerify(
    cp,
    { audit: bp, json: true, require: 'hardware-unanchored' },
    { stdout: (t) => (out += t), stderr: (t) => (out += t) },
  );
  return { code, out };
}

describe('sessions opened together share quotes', () => {
  let claims: { claim: Claim; bundle: AuditBundle }[] = [];
  let quotes = 0;
  beforeAll(async () => {
    const before = gw.sessions.binder.quotes;
    claims = await Promise.all(Array.from({ length: 16 }, () => openAndClose()));
    quotes = gw.sessions.binder.quotes - before;
  });

  it('16 concurrent sessions take fewer than 16 quotes, and every claim verifies (library and cmcp verify)', async () => {
    expect(quotes).toBeGreaterThanOrEqual(1);
    expect(quotes).toBeLessThan(16);
    const roots = new Set(claims.map((c) => c.claim.binding.batch?.root));
    expect(roots.size).toBe(quotes);
    expect(claims.some((c) => (c.claim.binding.batch?.tree_size ?? 0) > 1)).toBe(true);
    for (const { claim, bundle } of claims) {
      const r = verifyClaim(claim, { bundle });
      expect(failed(r)).toEqual([]);
      expect(r.verdict).toBe('hardware-unanchored');
      expect(r.checks.find((c) => c.id === 'binding.inclusion')?.status).toBe('pass');
      const v = await cli(claim, bundle);
      expect(v.code).toBe(0);
      expect(JSON.parse(v.out).verdict).toBe('hardware-unanchored');
    }
    // The claims of one batch carry one REPORT_DATA, hence one quote.
    const byRoot = new Map<string, Set<string>>();
    for (const { claim } of claims) {
      const k = claim.binding.batch!.root;
      byRoot.set(k, (byRoot.get(k) ?? new Set()).add(claim.evidence.tpm!.attest));
    }
    for (const attests of byRoot.values()) expect(attests.size).toBe(1);
  });

  it('a lone session is bound at once by its own quote, in a tree of one', async () => {
    const before = gw.sessions.binder.quotes;
    const { claim, bundle } = await openAndClose();
    expect(gw.sessions.binder.quotes - before).toBe(1);
    expect(claim.binding.batch).toMatchObject({ leaf_index: 0, tree_size: 1, audit_path: [] });
    const leaf = merkleLeafHash(bindingDigest(claim.binding.preimage));
    expect(claim.binding.batch?.root).toBe(leaf.toString('hex'));
    expect(claim.evidence.report_data).toBe(b64u(reportData(gw.key.thumbprint, batchDigest(leaf, 1))));
    expect(failed(verifyClaim(claim, { bundle }))).toEqual([]);
  });

  describe('a tampered batch is refused with its own reason', () => {
    /** A claim from a batch of at least `min` leaves, changed by `edit` and re-signed by the gateway key. */
    const tampered = (min: number, edit: (u: UnsignedClaim) => void) => {
      const pick = claims.find((c) => (c.claim.binding.batch?.tree_size ?? 0) >= min);
      if (!pick) throw new Error(`no batch of ${min}+ sessions in this run`);
      const { signature: _s, ...u } = structuredClone(pick.claim);
      edit(u);
      return { claim: signClaim(u, gw.key.privateKey), bundle: pick.bundle };
    };
    const reasons = async (t: { claim: Claim; bundle: AuditBundle }) => {
      const r = verifyClaim(t.claim, { bundle: t.bundle });
      expect(r.verdict).toBe('invalid');
      const v = await cli(t.claim, t.bundle);
      expect(v.code).toBe(1);
      expect(JSON.parse(v.out).checks).toEqual(r.checks);
      return failed(r);
    };

    it('a flipped audit-path hash → INCLUSION_PROOF_INVALID', async () => {
      const t = tampered(2, (u) => {
        const p = u.binding.batch!.audit_path;
        p[0] = (p[0]!.startsWith('0') ? '1' : '0') + p[0]!.slice(1);
      });
      expect(await reasons(t)).toEqual(['binding.inclusion:INCLUSION_PROOF_INVALID']);
    });

    it('another leaf index → LEAF_INDEX_MISMATCH', async () => {
      const t = tampered(2, (u) => {
        const b = u.binding.batch!;
        b.leaf_index = b.leaf_index === 0 ? 1 : b.leaf_index - 1;
      });
      expect(await reasons(t)).toEqual(['binding.inclusion:LEAF_INDEX_MISMATCH']);
    });

    it('another root → BATCH_ROOT_MISMATCH', async () => {
      const t = tampered(1, (u) => {
        u.binding.batch!.root = 'ab'.repeat(32);
      });
      // The quote binds the real root, so the hardware nonce check fails too; the proof is not blamed.
      expect(await reasons(t)).toEqual([
        'binding.inclusion:BATCH_ROOT_MISMATCH',
        'binding.report_data:BATCH_ROOT_MISMATCH',
        'evidence.binding:QUOTE_NONCE_MISMATCH',
      ]);
    });

    it('a tree size or leaf index out of range → TREE_SIZE_OUT_OF_RANGE / LEAF_INDEX_OUT_OF_RANGE', async () => {
      for (const size of [0, 1025, 2.5]) {
        const t = tampered(1, (u) => {
          u.binding.batch!.tree_size = size;
        });
        expect(await reasons(t)).toContain('binding.inclusion:TREE_SIZE_OUT_OF_RANGE');
      }
      const t = tampered(1, (u) => {
        u.binding.batch!.leaf_index = u.binding.batch!.tree_size;
      });
      expect(await reasons(t)).toContain('binding.inclusion:LEAF_INDEX_OUT_OF_RANGE');
    });

    it('the batch removed (read as a single binding) → REPORT_DATA_MISMATCH', async () => {
      const t = tampered(1, (u) => {
        delete u.binding.batch;
      });
      expect(await reasons(t)).toEqual([
        'binding.report_data:REPORT_DATA_MISMATCH',
        'evidence.binding:QUOTE_NONCE_MISMATCH',
      ]);
    });
  });
});

describe('a quote does not hold the event loop (50 ms TPM)', () => {
  let slow: TpmLatencyProxy;
  let t2: Awaited<ReturnType<typeof startSwtpm>>;
  beforeAll(async () => {
    t2 = await startSwtpm();
    slow = await startTpmLatencyProxy(t2.port, 50);
  });
  afterAll(async () => {
    await slow?.stop();
    await t2?.stop();
  });

  /** Runs `work` while a 2 ms timer ticks: the ticks seen before it finished and the longest gap. */
  async function probe(work: () => unknown): Promise<{ ms: number; ticks: number; maxGapMs: number }> {
    let ticks = 0;
    let last = performance.now();
    let maxGapMs = 0;
    const timer = setInterval(() => {
      const now = performance.now();
      maxGapMs = Math.max(maxGapMs, now - last);
      last = now;
      ticks++;
    }, 2);
    await new Promise((r) => setTimeout(r, 10));
    const [t0, seen0] = [performance.now(), ticks];
    last = t0;
    maxGapMs = 0;
    await work();
    const now = performance.now();
    const out = { ms: now - t0, ticks: ticks - seen0, maxGapMs: Math.max(maxGapMs, now - last) };
    clearInterval(timer);
    return out;
  }

  it('the provider quotes on the worker thread: timers keep firing; a synchronous quote stops them', async () => {
    const provider = new TpmProvider({ tcti: slow.tcti, akAlgorithm: 'ecc-p256', pcrs: [0, 7] });
    const started = await provider.start(null);
    expect(started.ok).toBe(true);
    try {
      const rd = Buffer.alloc(64, 7);
      const async = await probe(() => provider.bind(rd));
      expect(async.ms).toBeGreaterThanOrEqual(45);
      // Timers kept firing during the quote. (Not a bound on the longest gap: on a loaded machine
      // the scheduler alone can stretch one gap past the quote's 50 ms.)
      expect(async.ticks).toBeGreaterThanOrEqual(5);
    } finally {
      provider.close();
    }
    // The control: the same quote as a synchronous FFI call holds the loop for the whole 50 ms.
    const tpmSync = Tpm.open(slow.tcti);
    const ak = tpmSync.createAk('ecc-p256');
    try {
      const sync = await probe(() => tpmSync.quote(ak, Buffer.alloc(32, 1), [0, 7]));
      expect(sync.ms).toBeGreaterThanOrEqual(45);
      expect(sync.maxGapMs).toBeGreaterThanOrEqual(45);
      // No timer ran while the loop was held (the async quote saw ≥ 5).
      expect(sync.ticks).toBeLessThanOrEqual(1);
    } finally {
      ak.flush();
      tpmSync.close();
    }
  });

  it('the ESYS context refuses a second user while an asynchronous command is in flight (TPM_BUSY)', async () => {
    const t = Tpm.open(slow.tcti);
    const ak = t.createAk('ecc-p256');
    try {
      const q = t.quoteAsync(ak, Buffer.alloc(32, 2), [0]);
      // PCR_Read first, then the Quote held 50 ms by the relay: poll until the quote is in flight.
      let busy: unknown = null;
      for (let i = 0; i < 100 && busy === null; i++) {
        await new Promise((r) => setTimeout(r, 1));
        try {
          t.readPcrs([0]);
        } catch (e) {
          busy = e;
        }
      }
      expect(busy).toBeInstanceOf(TpmError);
      expect((busy as TpmError).code).toBe('TPM_BUSY');
      const quote = await q;
      expect(quote.pcrSelection.pcrs).toEqual([0]);
      // Free again once the quote returned.
      expect(Object.keys(t.readPcrs([0]))).toEqual(['0']);
    } finally {
      ak.flush();
      t.close();
    }
  });

  it('sessions opened during a 50 ms quote share the next one', async () => {
    const c2 = await writeConfig({
      upstreams: [{ name: 'c', transport: 'http', url: up.url }],
      attestation: { provider: 'tpm', tcti: slow.tcti, ak_algorithm: 'ecc-p256', pcrs: [0] },
    });
    const g2 = await startInProcess(c2);
    try {
      const before = g2.sessions.binder.quotes;
      const opened = await Promise.all(
        Array.from({ length: 16 }, () => rest(g2.url, 'alice-token', 'POST', '/sessions', {})),
      );
      expect(opened.every((s) => s.status === 201 && s.body.binding.status === 'bound')).toBe(true);
      const quotes = g2.sessions.binder.quotes - before;
      // Arrival is spread by the genesis transactions, so not all 16 wait for the first quote;
      // but every session that arrives during a quote joins the next one.
      expect(quotes).toBeGreaterThanOrEqual(1);
      expect(quotes).toBeLessThanOrEqual(8);
    } finally {
      await g2.close();
      cleanup(c2.dir);
    }
  });
});
