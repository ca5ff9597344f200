/**
 * `cmcp-verify receipt` and `cmcp-verify consistency` (packages/verify/src/cli/transparency.ts):
 * files as a relying party has them — the JSON-RPC answer that carried a receipt, the session's
 * bundle as the entry source, a claim or a C2SP verifier key for the gateway key, checkpoint
 * notes — through the runners the commands call, and once through the built `cmcp-verify` bin.
 */
import { execFileSync } from 'node:child_process';
import { generateKeyPairSync } from 'node:crypto';
import { existsSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { runVerifyConsistency, runVerifyReceipt } from '@cmcp/verify/cli';
import {
  checkpointVerifier,
  consistencyProof,
  EVIDENCE_META_KEY,
  encodeVerifierKey,
  sessionOrigin,
  subtreeRoot,
} from '@cmcp/verify/formats';
import { afterAll, describe, expect, it } from 'vitest';
import { REPO_ROOT } from './harness/gateway.js';
import { checkpoint, receipt, session } from './harness/receipts.js';

const dir = mkdtempSync(join(tmpdir(), 'cmcp-receipt-'));
afterAll(() => rmSync(dir, { recursive: true, force: true }));
const file = (name: string, content: unknown) => {
  const p = join(dir, name);
  writeFileSync(p, typeof content === 'string' ? content : JSON.stringify(content));
  return p;
};

const A = session('2d0b8d20-3b20-4c65-9d3e-8b3f4a5c6d7e');
const B = session('3e1c9e31-4c31-4d76-8e4f-9c4a5b6d7e8f');
const answer = (r: unknown) => ({
  jsonrpc: '2.0',
  id: 7,
  result: { content: [], _meta: { [EVIDENCE_META_KEY]: r } },
});
const vkey = encodeVerifierKey(checkpointVerifier(sessionOrigin(A.id), A.s.jwk));

async function run(f: typeof runVerifyReceipt | typeof runVerifyConsistency, a: never, opts: object) {
  let out = '';
  let err = '';
  const code = await f(a, { json: true, ...opts }, { stdout: (t) => (out += t), stderr: (t) => (err += t) });
  return { code, report: out ? JSON.parse(out) : null, err };
}
const reasons = (report: { checks: { status: string; reason_code: string }[] }) =>
  report.checks.filter((c) => c.status === 'fail').map((c) => c.reason_code);

describe('cmcp-verify receipt', () => {
  const claim = file('claim.json', A.claim);
  const bundle = file('bundle.json', A.bundle);

  it('checks the receipt an answer carried, its entry from the bundle, the key from the claim', async () => {
    const r = await run(runVerifyReceipt, file('answer.json', answer(receipt(A, 5, 8))) as never, {
      claim,
      entry: bundle,
      require: 'signed-only',
    });
    expect(r.err).toBe('');
    expect(reasons(r.report)).toEqual([]);
    expect(r.code).toBe(0);
  });

  it('takes the key as a C2SP verifier key, and exits 1 for a receipt of another session or a key it does not know', async () => {
    expect(
      (await run(runVerifyReceipt, file('r.json', receipt(A, 2, 8)) as never, { key: [vkey] })).code,
    ).toBe(0);
    const foreign = { ...receipt(A, 2, 8), inclusion: receipt(B, 2, 8).inclusion };
    const r = await run(runVerifyReceipt, file('foreign.json', foreign) as never, { key: [vkey] });
    expect([r.code, reasons(r.report)]).toEqual([1, ['CHECKPOINT_SIGNER_UNKNOWN']]);
    const other = generateKeyPairSync('ed25519').privateKey;
    const signedElsewhere = receipt(A, 2, 8, checkpoint(A, 8, other));
    const r2 = await run(runVerifyReceipt, file('other.json', signedElsewhere) as never, {
      claim,
      require: 'signed-only',
    });
    expect([r2.code, reasons(r2.report)]).toEqual([1, ['CHECKPOINT_SIGNER_UNKNOWN']]);
  });

  it('exits 1 when the claim binding the key is below --require (software evidence is signed-only)', async () => {
    expect((await run(runVerifyReceipt, file('r2.json', receipt(A, 1, 4)) as never, { claim })).code).toBe(1);
  });

  it('exits 2 without a key, for a file without a receipt, and for a claim given as --key', async () => {
    const r = file('r3.json', receipt(A, 1, 4));
    expect((await run(runVerifyReceipt, r as never, {})).code).toBe(2);
    expect(
      (await run(runVerifyReceipt, file('none.json', { result: {} }) as never, { key: [vkey] })).code,
    ).toBe(2);
    const asKey = await run(runVerifyReceipt, r as never, { key: [claim] });
    expect([asKey.code, asKey.err]).toEqual([2, expect.stringContaining('VERIFY_KEY_INVALID')]);
  });
});

describe('cmcp-verify consistency', () => {
  const proof = (from: number, to: number) =>
    file(`p-${from}-${to}.json`, {
      session_id: A.id,
      from,
      to,
      consistency_proof: consistencyProof(from, to, A.read).map((h) => h.toString('hex')),
      checkpoint: null,
    });

  it('exits 0 for a growing series with its proofs, 1 for a forked pair', async () => {
    const notes = [file('c3', checkpoint(A, 3)), file('c7', checkpoint(A, 7))];
    expect(
      (await run(runVerifyConsistency, notes as never, { key: [vkey], consistency: [proof(3, 7)] })).code,
    ).toBe(0);
    const fork = file('c7f', checkpoint(A, 7, A.s.privateKey, subtreeRoot(0, 7, B.read)));
    const r = await run(runVerifyConsistency, [notes[0], fork] as never, {
      key: [vkey],
      consistency: [proof(3, 7)],
    });
    expect([r.code, reasons(r.report)]).toEqual([1, ['CHECKPOINT_EQUIVOCATION']]);
    const r2 = await run(runVerifyConsistency, [notes[1], fork] as never, { key: [vkey] });
    expect([r2.code, reasons(r2.report)]).toEqual([1, ['CHECKPOINT_EQUIVOCATION']]);
  });
});

describe('the built bin', () => {
  const bin = join(REPO_ROOT, 'packages/verify/dist/cli/main.js');
  it.skipIf(!existsSync(bin))('runs `cmcp-verify receipt` and prints the report', () => {
    const out = execFileSync(
      process.execPath,
      [bin, 'receipt', file('bin.json', receipt(A, 3, 6)), '--key', vkey, '--json'],
      {
        encoding: 'utf8',
      },
    );
    const report = JSON.parse(out) as { accepted: boolean; checks: { id: string }[] };
    expect(report.accepted).toBe(true);
    expect(report.checks.map((c) => c.id)).toContain('receipt.inclusion');
  });
});
