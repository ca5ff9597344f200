/**
 * Property test: 10 000 random mutations per format (TPM attest+signature, SEV-SNP report,
 * TDX quote) of real evidence; no mutation is accepted and none crashes the verifier.
 *
 * The PRNG is seeded (mulberry32); set CMCP_PROPERTY_SEED to reproduce a failure — the failing
 * iteration's seed and mutation are in the assertion message. The verifiers are called directly
 * (not through the guarded raw-evidence wrappers), so an exception fails the test.
 *
 * "Accepted" = no check fails. For TDX, bytes after the declared signature data are outside the
 * quote (nothing signs them; see the vector's PROVENANCE): a mutation confined to them is
 * expected to be accepted and is counted separately.
 */
import { createPublicKey } from 'node:crypto';
import { readFileSync } from 'node:fs';
import type { CheckResult } from '@cmcp/verify/result';
import { verifySnpReport } from '@cmcp/verify/snp/index';
import { parseTdxQuote, verifyTdxQuote } from '@cmcp/verify/tdx/index';
import {
  type PcrValue,
  parseSerializedPcrs,
  parseTpmsAttest,
  splitPcrValues,
  TPM_ALG,
  verifyTpmQuote,
} from '@cmcp/verify/tpm/index';
import { parseReferenceValues } from '@cmcp/verify/trust';
import { loadTrustStore } from '@cmcp/verify/trust-files';
import { describe, expect, it } from 'vitest';
import { hasVectors, vectorPath } from './harness/vectors.js';

const N = Number(process.env.CMCP_PROPERTY_N ?? 10_000);
const SEED = Number(process.env.CMCP_PROPERTY_SEED ?? 0x5eed1234);

function mulberry32(seed: number): () => number {
  let a = seed >>> 0;
  return () => {
    a = (a + 0x6d2b79f5) >>> 0;
    let t = a;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}

interface Mutation {
  bytes: Buffer;
  /** Lowest and highest changed offset (length changes count from the cut point). */
  lo: number;
  hi: number;
  what: string;
}

/** 1–4 byte replacements (90%), a truncation (5%) or an appended tail (5%). */
function mutate(base: Buffer, rnd: () => number): Mutation {
  const r = rnd();
  const int = (n: number) => Math.floor(rnd() * n);
  if (r < 0.05) {
    const cut = int(base.length);
    return {
      bytes: Buffer.from(base.subarray(0, cut)),
      lo: cut,
      hi: base.length,
      what: `truncate to ${cut}`,
    };
  }
  if (r < 0.1) {
    const extra = Buffer.from(Array.from({ length: 1 + int(8) }, () => int(256)));
    return {
      bytes: Buffer.concat([base, extra]),
      lo: base.length,
      hi: base.length,
      what: `append ${extra.length}`,
    };
  }
  const b = Buffer.from(base);
  const k = 1 + int(4);
  let lo = Number.POSITIVE_INFINITY;
  let hi = -1;
  const at: string[] = [];
  for (let i = 0; i < k; i++) {
    const pos = int(b.length);
    b[pos] = (b[pos] ?? 0) ^ (1 + int(255));
    lo = Math.min(lo, pos);
    hi = Math.max(hi, pos);
    at.push(String(pos));
  }
  if (b.equals(base)) {
    const pos = int(b.length);
    b[pos] = (b[pos] ?? 0) ^ 0x01;
    lo = Math.min(lo, pos);
    hi = Math.max(hi, pos);
  }
  return { bytes: b, lo, hi, what: `flip at ${at.join(',')}` };
}

const anyFail = (checks: readonly CheckResult[]) => checks.some((c) => c.status === 'fail');
const trust = () => loadTrustStore(new URL('../attestation/trust-store.yaml', import.meta.url).pathname);

describe.skipIf(!hasVectors())(
  `property: ${N} random mutations per format (seed 0x${SEED.toString(16)})`,
  () => {
    it('TPM (Azure quote.msg ‖ TPMT_SIGNATURE): no false accept, no crash', () => {
      const az = (f: string) => readFileSync(vectorPath('tpm', 'azure-vtpm-2026-07-27', f));
      const attest = az('quote.msg');
      const sig = Buffer.concat([Buffer.from('0014000b0100', 'hex'), az('quote.sig')]);
      const key = createPublicKey(az('ak.pub'));
      const nonce = Buffer.from(az('nonce.hex').toString('utf8').trim(), 'hex');
      const e = JSON.parse(az('expected.json').toString('utf8')) as {
        pcrs_bin: { sha256_bank: Record<string, string> };
      };
      const pcrValues: PcrValue[] = Object.entries(e.pcrs_bin.sha256_bank).map(([i, h]) => ({
        hashAlg: TPM_ALG.SHA256,
        index: Number(i),
        value: Buffer.from(h, 'hex'),
      }));
      const verify = (a: Buffer, s: Buffer) =>
        verifyTpmQuote({ attest: a, signature: s, ak: { key }, expectedExtraData: nonce, pcrValues }).checks;
      expect(anyFail(verify(attest, sig))).toBe(false);
      const joined = Buffer.concat([attest, sig]);
      const rnd = mulberry32(SEED);
      for (let i = 0; i < N; i++) {
        const m = mutate(joined, rnd);
        // split at the original boundary; a truncation inside the attest leaves an empty signature
        const a = m.bytes.subarray(0, Math.min(attest.length, m.bytes.length));
        const s = m.bytes.subarray(Math.min(attest.length, m.bytes.length));
        let checks: CheckResult[];
        try {
          checks = verify(Buffer.from(a), Buffer.from(s));
        } catch (err) {
          throw new Error(`TPM iteration ${i} (${m.what}) crashed: ${(err as Error).message}`);
        }
        expect(anyFail(checks), `TPM iteration ${i}: ${m.what} accepted`).toBe(true);
      }
    });

    it('TPM (Azure pcrs.bin, tpm2-tools -F serialized, and its -F values form): the parser takes the real file; no mutation is accepted, none crashes', () => {
      const az = (f: string) => readFileSync(vectorPath('tpm', 'azure-vtpm-2026-07-27', f));
      const attest = az('quote.msg');
      const sig = Buffer.concat([Buffer.from('0014000b0100', 'hex'), az('quote.sig')]);
      const key = createPublicKey(az('ak.pub'));
      const pcrsBin = az('pcrs.bin');
      const e = JSON.parse(az('expected.json').toString('utf8')) as {
        pcrs_bin: { sha256_bank: Record<string, string> };
      };
      const parsed = parseSerializedPcrs(pcrsBin);
      expect(
        Object.fromEntries(parsed.values.map((v) => [String(v.index), v.value.toString('hex')])),
      ).toEqual(e.pcrs_bin.sha256_bank);
      const selection = parseTpmsAttest(attest).pcrSelect;
      const flat = Buffer.concat(parsed.values.map((v) => v.value));
      const verify = (values: PcrValue[]) =>
        verifyTpmQuote({ attest, signature: sig, ak: { key }, expectedExtraData: null, pcrValues: values })
          .checks;
      expect(anyFail(verify(parsed.values))).toBe(false);
      const rnd = mulberry32(SEED ^ 0x9c5);
      for (const [what, base, read] of [
        ['serialized', pcrsBin, (b: Buffer) => parseSerializedPcrs(b).values],
        ['values', flat, (b: Buffer) => splitPcrValues(b, selection)],
      ] as const) {
        for (let i = 0; i < N / 4; i++) {
          const m = mutate(base, rnd);
          let values: PcrValue[];
          try {
            values = read(m.bytes);
          } catch (err) {
            expect((err as { code?: string }).code, `${what} ${i}: ${m.what}`).toBe('PCR_FILE_MALFORMED');
            continue;
          }
          expect(anyFail(verify(values)), `${what} iteration ${i}: ${m.what} accepted`).toBe(true);
        }
      }
    });

    it('SEV-SNP (Milan report): no false accept, no crash', () => {
      const snp = (f: string) => readFileSync(vectorPath('snp', 'go-sev-guest-milan', f));
      const report = snp('attestation.bin');
      const certs = [snp('vcek.testcer'), snp('ask_ark_milan.pem')];
      const ts = trust();
      const rv = parseReferenceValues('version: 1\nsev_snp:\n  allow_debug: true\n');
      const at = new Date('2026-11-30T00:00:00Z');
      const rd = Buffer.alloc(64);
      rd.set([1, 2, 3, 4, 5]);
      const verify = (b: Buffer) =>
        verifySnpReport({ report: b, certs, trustStore: ts, at, referenceValues: rv, expectedReportData: rd })
          .checks;
      expect(anyFail(verify(report))).toBe(false);
      const rnd = mulberry32(SEED ^ 0x51);
      for (let i = 0; i < N; i++) {
        const m = mutate(report, rnd);
        let checks: CheckResult[];
        try {
          checks = verify(m.bytes);
        } catch (err) {
          throw new Error(`SNP iteration ${i} (${m.what}) crashed: ${(err as Error).message}`);
        }
        expect(anyFail(checks), `SNP iteration ${i}: ${m.what} accepted`).toBe(true);
      }
    });

    it('TDX (SPR E4 quote): no false accept of a changed quote, no crash; changes confined to the unsigned trailing bytes are tolerated', () => {
      const quote = readFileSync(vectorPath('tdx', 'go-tdx-guest-spr-e4', 'tdx_prod_quote_SPR_E4.dat'));
      const end = parseTdxQuote(quote).end;
      const ts = trust();
      const at = new Date('2023-07-01T01:00:00Z');
      const rd = parseTdxQuote(quote).body.reportData;
      const verify = (b: Buffer) =>
        verifyTdxQuote({ quote: b, trustStore: ts, at, expectedReportData: rd }).checks;
      expect(anyFail(verify(quote))).toBe(false);
      const rnd = mulberry32(SEED ^ 0x7d);
      let trailingOnly = 0;
      for (let i = 0; i < N; i++) {
        const m = mutate(quote, rnd);
        let checks: CheckResult[];
        try {
          checks = verify(m.bytes);
        } catch (err) {
          throw new Error(`TDX iteration ${i} (${m.what}) crashed: ${(err as Error).message}`);
        }
        const quoteChanged = m.lo < end;
        if (quoteChanged) expect(anyFail(checks), `TDX iteration ${i}: ${m.what} accepted`).toBe(true);
        else trailingOnly++;
      }
      // about 1% of the bytes are trailing junk; most mutations hit the quote itself
      expect(trailingOnly).toBeLessThan(N * 0.2);
    });
  },
);
