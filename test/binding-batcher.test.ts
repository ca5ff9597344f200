/**
 * The batcher of session bindings (src/session/binding-batcher.ts), driven step by step through a
 * provider whose quotes the test answers by hand (the provider is not under test here; the swtpm
 * path is test/session-batching.test.ts): a lone binding is requested at once, bindings that
 * arrive during a quote form the next batch (bounded, one measurement per batch), each gets its
 * leaf and audit path under the REPORT_DATA the provider was asked to bind, a provider failure
 * reaches the whole batch, and evidence of another measurement fails MEASUREMENT_CHANGED.
 */
import { randomBytes } from 'node:crypto';
import { batchDigest, merkleLeafHash, reportData, rootFromAuditPath } from '@cmcp/verify/formats';
import { describe, expect, it } from 'vitest';
import { type BatchedBinding, BindingBatcher } from '../src/session/binding-batcher.js';
import { type AttestationProvider, BindingError, type BoundEvidence } from '../src/tee/provider.js';

/** A provider whose binds wait until the test settles them, in order. */
function handProvider() {
  const asked: { rd: Buffer; settle: (ev: BoundEvidence | Error) => void }[] = [];
  const provider: AttestationProvider = {
    name: 'hand',
    tier: 'tpm',
    bind: (rd) =>
      new Promise<BoundEvidence>((resolve, reject) => {
        asked.push({ rd, settle: (ev) => (ev instanceof Error ? reject(ev) : resolve(ev)) });
      }),
    close() {},
  };
  return { provider, asked };
}
const evidence = (digest?: string): BoundEvidence => ({
  tpm: null,
  ...(digest
    ? { measurement: { version: 1, digest, inputs: {} } as unknown as BoundEvidence['measurement'] }
    : {}),
});
const tick = () => new Promise((r) => setImmediate(r));
const thumb = randomBytes(32);

describe('BindingBatcher', () => {
  it('a lone binding is requested at once, as a tree of one', async () => {
    const { provider, asked } = handProvider();
    const b = new BindingBatcher(provider, thumb);
    const d = randomBytes(32);
    const p = b.bind(d, null);
    expect(asked).toHaveLength(1); // synchronously: no timer, no waiting for company
    const leaf = merkleLeafHash(d);
    expect(asked[0]!.rd).toEqual(reportData(thumb, batchDigest(leaf, 1)));
    asked[0]!.settle(evidence());
    const r = await p;
    expect(r.ok).toBe(true);
    expect(r.batch).toEqual({ leaf_index: 0, tree_size: 1, root: leaf.toString('hex'), audit_path: [] });
  });

  it('bindings that arrive during a quote share the next one, each with its own audit path', async () => {
    const { provider, asked } = handProvider();
    const b = new BindingBatcher(provider, thumb);
    const first = b.bind(randomBytes(32), null);
    const digests = Array.from({ length: 5 }, () => randomBytes(32));
    const rest = digests.map((d) => b.bind(d, null));
    expect(asked).toHaveLength(1);
    asked[0]!.settle(evidence());
    await first;
    expect(asked).toHaveLength(2);
    asked[1]!.settle(evidence());
    const shares = await Promise.all(rest);
    expect(b.quotes).toBe(2);
    for (const [i, s] of shares.entries()) {
      expect(s.batch.leaf_index).toBe(i);
      expect(s.batch.tree_size).toBe(5);
      expect(s.reportData).toEqual(asked[1]!.rd);
      const root = rootFromAuditPath(
        merkleLeafHash(digests[i]!),
        i,
        5,
        s.batch.audit_path.map((h) => Buffer.from(h, 'hex')),
      );
      expect(root?.toString('hex')).toBe(s.batch.root);
      expect(s.reportData).toEqual(reportData(thumb, batchDigest(root!, 5)));
    }
  });

  it('a batch holds at most the limit, and one measurement', async () => {
    const { provider, asked } = handProvider();
    const b = new BindingBatcher(provider, thumb, 3);
    const all: Promise<BatchedBinding>[] = [b.bind(randomBytes(32), 'sha256:a')];
    for (const m of ['sha256:a', 'sha256:a', 'sha256:a', 'sha256:a', 'sha256:b', 'sha256:a'])
      all.push(b.bind(randomBytes(32), m));
    const sizes: number[] = [];
    for (let i = 0; i < 5 && asked[i]; i++) {
      asked[i]!.settle(evidence());
      await tick();
    }
    const shares = await Promise.all(all);
    for (const s of shares) if (s.batch.leaf_index === 0) sizes.push(s.batch.tree_size);
    expect(sizes).toEqual([1, 3, 1, 1, 1]);
    expect(() => new BindingBatcher(provider, thumb, 0)).toThrow(RangeError);
    expect(() => new BindingBatcher(provider, thumb, 1025)).toThrow(RangeError);
  });

  it('a provider failure reaches every session of its batch, and the next batch still runs', async () => {
    const { provider, asked } = handProvider();
    const b = new BindingBatcher(provider, thumb);
    const first = b.bind(randomBytes(32), null);
    const two = [b.bind(randomBytes(32), null), b.bind(randomBytes(32), null)];
    asked[0]!.settle(new BindingError('TPM_UNREACHABLE', 'gone'));
    const r0 = await first;
    expect(r0.ok).toBe(false);
    asked[1]!.settle(new BindingError('TPM_RC', 'refused'));
    for (const r of await Promise.all(two)) {
      expect(r.ok).toBe(false);
      expect(!r.ok && (r.error as BindingError).reason).toBe('TPM_RC');
      expect(r.batch.tree_size).toBe(2);
    }
    const later = b.bind(randomBytes(32), null);
    asked[2]!.settle(evidence());
    expect((await later).ok).toBe(true);
  });

  it('evidence of another measurement than the preimage names fails MEASUREMENT_CHANGED', async () => {
    const { provider, asked } = handProvider();
    const b = new BindingBatcher(provider, thumb);
    const p = b.bind(randomBytes(32), 'sha256:old');
    asked[0]!.settle(evidence('sha256:new'));
    const r = await p;
    expect(r.ok).toBe(false);
    expect(!r.ok && (r.error as BindingError).reason).toBe('MEASUREMENT_CHANGED');
    const q = b.bind(randomBytes(32), 'sha256:new');
    asked[1]!.settle(evidence('sha256:new'));
    expect((await q).ok).toBe(true);
  });
});
