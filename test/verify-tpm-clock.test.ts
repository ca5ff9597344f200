/**
 * Rollback across quotes: `tpm.clock` compares TPMS_CLOCK_INFO with a previous
 * quote (`--previous-quote`, raw) or the previous claim's quote (`--previous-claim`). Against a
 * quote known to be earlier, a lower resetCount, a lower restartCount within one reset, or a lower
 * clock within one reset/restart is refused; against the previous claim's quote it is
 * QUOTE_ORDER_UNKNOWN (claims are in close order, quotes taken at open); `safe = 0` and a firmwareVersion change are reported, not refused.
 */
import { createHash } from 'node:crypto';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import type { CheckResult } from '@cmcp/verify';
import { verifyClaim, verifyTpmEvidence } from '@cmcp/verify';
import { runVerifyEvidence, type VerifyEvidenceCliOptions } from '@cmcp/verify/cli';
import { b64u } from '@cmcp/verify/formats';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { type AkPki, claimWithAkChain, makeAkPki } from '../testing/ak-pki.js';
import { ENDORSEMENT_QN, quoteAttest, type SoftTpm, signQuote, softTpm } from '../testing/evidence.js';

const tpm: SoftTpm = softTpm();
const NONCE = Buffer.alloc(32, 9);

interface Clock {
  clock: bigint;
  resetCount: number;
  restartCount: number;
  safe?: 0 | 1;
  fw?: number;
}
/** A quote by `tpm` with this TPMS_CLOCK_INFO (restartCount and safe written into the bytes). */
function quote(c: Clock, by: SoftTpm = tpm): { attest: Buffer; signature: Buffer } {
  const fw = Buffer.alloc(8);
  fw.writeBigUInt64BE(BigInt(c.fw ?? 0x0102));
  const attest = quoteAttest({
    qualifiedName: by.qualifiedName,
    extraData: NONCE,
    pcrs: [],
    pcrDigest: createHash('sha256').digest(),
    clock: c.clock,
    resetCount: c.resetCount,
    firmwareVersion: fw,
  });
  const at = 6 + 2 + by.qualifiedName.length + 2 + NONCE.length + 8 + 4; // restartCount
  attest.writeUInt32BE(c.restartCount, at);
  attest[at + 4] = c.safe ?? 1;
  return { attest, signature: signQuote(attest, by.priv) };
}
const clockOf = (current: Clock, previous?: Clock | Buffer) => {
  const q = quote(current);
  const r = verifyTpmEvidence({
    attest: q.attest,
    signature: q.signature,
    ak: { public: tpm.akPublic },
    akParentQualifiedName: ENDORSEMENT_QN,
    nonce: NONCE,
    ...(previous ? { previousAttest: Buffer.isBuffer(previous) ? previous : quote(previous).attest } : {}),
  });
  return { r, c: r.checks.find((x) => x.id === 'tpm.clock') as CheckResult };
};

describe('tpm.clock: rollback across quotes', () => {
  const P: Clock = { clock: 50_000n, resetCount: 7, restartCount: 3 };

  it('no previous quote: not-applicable with the clock info stated', () => {
    const { c, r } = clockOf(P);
    expect(c).toMatchObject({ status: 'not-applicable', reason_code: 'NO_PREVIOUS_QUOTE' });
    expect(c.detail).toMatch(/clock 50000 ms, resetCount 7, restartCount 3, safe 1/);
    expect(r.verdict).toBe('hardware-unanchored');
  });

  it('forward: same reset and restart with a later clock, a restart, a reset — each passes', () => {
    for (const now of [
      { ...P, clock: 50_001n },
      { ...P, clock: 50_000n },
      { ...P, restartCount: 4, clock: 10n },
      { resetCount: 8, restartCount: 0, clock: 1n },
    ]) {
      const { c, r } = clockOf(now, P);
      expect(
        c.status,
        JSON.stringify(now, (_, v) => (typeof v === 'bigint' ? String(v) : v)),
      ).toBe('pass');
      expect(r.checks.filter((x) => x.status === 'fail')).toEqual([]);
    }
  });

  it('rollback: lower resetCount, lower restartCount in one reset, lower clock in one reset/restart → TPM_CLOCK_ROLLBACK', () => {
    for (const [now, why] of [
      [{ ...P, resetCount: 6, restartCount: 9, clock: 99_999n }, /resetCount went back/],
      [{ ...P, restartCount: 2, clock: 99_999n }, /restartCount went back within one reset/],
      [{ ...P, clock: 49_999n }, /clock went back within one reset and restart/],
    ] as const) {
      const { c, r } = clockOf(now, P);
      expect(c).toMatchObject({ status: 'fail', reason_code: 'TPM_CLOCK_ROLLBACK' });
      expect(c.detail).toMatch(why);
      expect(r.verdict).toBe('invalid');
    }
  });

  it('safe = 0 and a changed firmwareVersion are reported in the notes, not refused', () => {
    const { c, r } = clockOf({ ...P, clock: 60_000n, safe: 0, fw: 0x0103 }, P);
    expect(c.status).toBe('pass');
    expect(r.notes.join('\n')).toMatch(/TPMS_CLOCK_INFO\.safe = 0/);
    expect(r.notes.join('\n')).toMatch(/firmwareVersion changed since the previous quote: 0x102 → 0x103/);
    expect(clockOf(P).r.notes.join('\n')).not.toMatch(/safe = 0|firmwareVersion/);
  });

  it('a previous quote that does not parse, or is by another key, fails the check (the comparison would mean nothing)', () => {
    const cut = quote(P).attest.subarray(0, 20);
    expect(clockOf(P, cut).c.reason_code).toBe('PREVIOUS_QUOTE_MALFORMED');
    const other = quote(P, softTpm()).attest;
    expect(clockOf({ ...P, clock: 60_000n }, other).c.reason_code).toBe('PREVIOUS_QUOTE_OTHER_SIGNER');
  });
});

describe('verify-evidence --previous-quote', () => {
  const dir = mkdtempSync(join(tmpdir(), 'cmcp-clock-'));
  afterAll(() => rmSync(dir, { recursive: true, force: true }));
  const put = (name: string, b: Buffer) => {
    const p = join(dir, name);
    writeFileSync(p, b);
    return p;
  };
  const run = async (opts: VerifyEvidenceCliOptions) => {
    let out = '';
    let err = '';
    const code = await runVerifyEvidence(
      { require: 'hardware-unanchored', json: true, ...opts },
      { stdout: (t) => (out += t), stderr: (t) => (err += t) },
    );
    return { code, err, out };
  };

  it('a later quote passes, an earlier one is refused (exit 1); a file that is not a quote is a usage error', async () => {
    const prev = quote({ clock: 1000n, resetCount: 3, restartCount: 0 });
    const base = (c: Clock): VerifyEvidenceCliOptions => {
      const q = quote(c);
      return {
        tpmQuote: put(`q${c.clock}.msg`, q.attest),
        tpmSig: put(`q${c.clock}.sig`, q.signature),
        ak: put('ak.tpmt', tpm.akPublic),
        akParentName: '4000000b',
        nonce: NONCE.toString('hex'),
        previousQuote: put('prev.msg', prev.attest),
      };
    };
    const ok = await run(base({ clock: 2000n, resetCount: 3, restartCount: 0 }));
    expect(ok.err).toBe('');
    expect(ok.code).toBe(0);
    const back = await run(base({ clock: 999n, resetCount: 3, restartCount: 0 }));
    expect(back.code).toBe(1);
    expect(back.out).toContain('TPM_CLOCK_ROLLBACK');
    const wrong = await run({
      ...base({ clock: 2000n, resetCount: 3, restartCount: 0 }),
      previousQuote: put('sig', prev.signature),
    });
    expect(wrong.code).toBe(2);
    expect(wrong.err).toMatch(
      /--previous-quote .*TPM_FILE_LAYOUT_MISMATCH: the --previous-quote file is a TPMT_SIGNATURE/,
    );
  });
});

describe('verify --previous-claim: the previous claim’s TPM quote', () => {
  let pki: AkPki;
  let pki2: AkPki;
  beforeAll(async () => {
    pki = await makeAkPki();
    pki2 = await makeAkPki();
  });
  it('tpm.clock compares with the previous claim’s quote; a previous claim with a later resetCount is not a rollback (its session may have opened later)', () => {
    const claim = claimWithAkChain(pki, []);
    const same = verifyClaim(claim, { previousClaim: claim });
    expect(same.checks.find((c) => c.id === 'tpm.clock')?.status).toBe('pass');
    const attest = Buffer.from(claim.evidence.tpm?.attest ?? '', 'base64url');
    const later = Buffer.from(attest);
    const at = 6 + 2 + attest.readUInt16BE(6) + 2 + attest.readUInt16BE(8 + attest.readUInt16BE(6)) + 8;
    later.writeUInt32BE(later.readUInt32BE(at) + 1, at); // resetCount + 1
    const prev = {
      ...claim,
      evidence: { ...claim.evidence, tpm: { ...claim.evidence.tpm, attest: b64u(later) } },
    };
    const r = verifyClaim(claim, { previousClaim: prev });
    expect(r.checks.find((c) => c.id === 'tpm.clock')).toMatchObject({
      status: 'not-applicable',
      reason_code: 'QUOTE_ORDER_UNKNOWN',
    });
    expect(r.checks.filter((c) => c.status === 'fail' && c.id !== 'claim.sequence')).toEqual([]);
    // the same quote presented as earlier by the relying party's word is a rollback
    const raw = verifyTpmEvidence({
      attest,
      signature: Buffer.from(claim.evidence.tpm?.signature ?? '', 'base64url'),
      ak: { public: Buffer.from(claim.evidence.tpm?.ak_public ?? '', 'base64url') },
      previousAttest: later,
    });
    expect(raw.checks.find((c) => c.id === 'tpm.clock')?.reason_code).toBe('TPM_CLOCK_ROLLBACK');
    // a previous claim quoted by another AK (another replica's TPM): nothing to compare, not a failure
    const other = claimWithAkChain(pki2, []);
    const o = verifyClaim(claim, { previousClaim: other }).checks.find((c) => c.id === 'tpm.clock');
    expect(o).toMatchObject({ status: 'not-applicable', reason_code: 'PREVIOUS_QUOTE_OTHER_SIGNER' });
    // without a previous claim there is no clock check
    expect(verifyClaim(claim).checks.find((c) => c.id === 'tpm.clock')).toBeUndefined();
  });
});
