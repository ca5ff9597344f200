/**
 * Property test: random mutations of real evidence (10 000 of the TPM attest+signature, 2 500 of
 * the SEV-SNP report and of the TDX quote); no mutation is accepted and none crashes the verifier.
 * Then a deterministic sweep of every signed region of every shipped vector (test/vectors/):
 * bit flips across each region (every bit, or one bit of every byte or every n-th byte, rotating)
 * and cuts at every length (every 8th beyond 1200 bytes, and each structure boundary); it prints
 * the number of mutations tried and of false accepts, and fails on any accept.
 *
 * The PRNG is seeded (mulberry32); set CMCP_PROPERTY_SEED to reproduce a failure — the failing
 * iteration's seed and mutation are in the assertion message. The verifiers are called directly
 * (not through the guarded raw-evidence wrappers), so an exception fails the test.
 *
 * "Accepted" = no check fails. For TDX, bytes after the declared signature data are outside the
 * quote (nothing signs them; see the vector's PROVENANCE): a mutation confined to them is
 * expected to be accepted and is counted separately.
 */
import { createPublicKey, X509Certificate } from 'node:crypto';
import { readFileSync } from 'node:fs';
import type { CheckResult } from '@cmcp/verify';
import { EMPTY_TRUST_STORE, loadTrustStore, parseReferenceValues } from '@cmcp/verify';
import { describe, expect, it } from 'vitest';
import { parseHclReport, verifyAzureHcl } from '../packages/verify/src/azure/index.js';
import { verifySnpReport } from '../packages/verify/src/snp/index.js';
import { type TdxCollateral, verifyTdxCollateral } from '../packages/verify/src/tdx/collateral.js';
import { checkCrl, parseCrl } from '../packages/verify/src/tdx/crl.js';
import { parseTdxQuote, verifyTdxQuote } from '../packages/verify/src/tdx/index.js';
import {
  type PcrValue,
  parseSerializedPcrs,
  parseTpmsAttest,
  splitPcrValues,
  TPM_ALG,
  verifyTpmQuote,
} from '../packages/verify/src/tpm/index.js';
import {
  type Cert,
  certsFromBytes,
  issuedBy,
  parseCert,
  pemBlocks,
  validateChain,
} from '../packages/verify/src/x509.js';
import { hasVectors, vectorPath } from './harness/vectors.js';

const N = Number(process.env.CMCP_PROPERTY_N ?? 10_000);
const SEED = Number(process.env.CMCP_PROPERTY_SEED ?? 0x5eed1234);
/** SEV-SNP and TDX checks cost ~0.5 ms; the sweep below flips every byte of both, so fewer random ones. */
const N_SWEPT = Math.ceil(N / 4);

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
  `property: ${N} random mutations (SEV-SNP, TDX: ${N_SWEPT}; seed 0x${SEED.toString(16)})`,
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
      for (let i = 0; i < N_SWEPT; i++) {
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
      for (let i = 0; i < N_SWEPT; i++) {
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
      expect(trailingOnly).toBeLessThan(N_SWEPT * 0.2);
    });
  },
);

/** One signed input of a shipped vector, and what "accepted" means for it. */
interface SignedRegion {
  /** Vector folder and file (and the part of it). */
  name: string;
  base: Buffer;
  /**
   * [lo, hi) byte ranges to flip: `bits` 8 = every bit of every byte; 1 = one bit of every
   * `stride`-th byte (default 1), the bit rotating so each bit position is hit across the range;
   * `bitMask` limits the bits tried.
   */
  flips: { lo: number; hi: number; bits: 1 | 8; stride?: number; bitMask?: number }[];
  /** Lengths to cut the input to. */
  cuts: number[];
  /** True when the verifier takes these bytes as it takes the original. */
  accepted: (b: Buffer) => boolean;
}

/** Every length below `n` up to 1200 bytes; beyond, every 8th length and each of `bounds`. */
function cutsOf(n: number, bounds: readonly number[] = []): number[] {
  const step = n <= 1200 ? 1 : 8;
  const out = new Set<number>(bounds.filter((b) => b >= 0 && b < n));
  for (let i = 0; i < n; i += step) out.add(i);
  return [...out].sort((a, b) => a - b);
}

/** A certificate (DER) as its issuer signed it: accepted when it parses and `issuer` signed it. */
function certRegion(name: string, der: Buffer, issuer: Cert, stride = 1): SignedRegion {
  return {
    name,
    base: der,
    flips: [{ lo: 0, hi: der.length, bits: 1, stride }],
    cuts: cutsOf(der.length),
    accepted: (b) => {
      try {
        return issuedBy(parseCert(b), issuer);
      } catch {
        return false;
      }
    },
  };
}

/** Accepted = no check fails that does not fail on the original. */
function noNewFailure(verify: (b: Buffer) => readonly CheckResult[], base: Buffer): (b: Buffer) => boolean {
  const before = new Set(
    verify(base)
      .filter((c) => c.status === 'fail')
      .map((c) => c.id),
  );
  return (b) => verify(b).every((c) => c.status !== 'fail' || before.has(c.id));
}

/** AMD certificates are RSA-4096 RSASSA-PSS (about 1 ms a check): every third byte is flipped. */
const AMD_STRIDE = 3;

function signedRegions(): SignedRegion[] {
  const out: SignedRegion[] = [];
  const v = (...p: string[]) => readFileSync(vectorPath(...p));
  const whole = (n: number, bits: 1 | 8 = 8) => [{ lo: 0, hi: n, bits }];
  const ts = trust();

  // tpm/azure-vtpm-2026-07-27: the quote (TPMS_ATTEST) and its signature, the AK certificate chain
  {
    const az = (f: string) => v('tpm', 'azure-vtpm-2026-07-27', f);
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
    out.push(
      {
        name: 'tpm/azure-vtpm quote.msg',
        base: attest,
        flips: whole(attest.length),
        cuts: cutsOf(attest.length),
        accepted: (b) => !anyFail(verify(b, sig)),
      },
      {
        name: 'tpm/azure-vtpm quote.sig (as TPMT_SIGNATURE)',
        base: sig,
        flips: whole(sig.length),
        cuts: cutsOf(sig.length),
        accepted: (b) => !anyFail(verify(attest, b)),
      },
    );
    const leaf = parseCert(az('akcert_0x01C101D0.der'));
    const [ca03] = certsFromBytes(az('issuer-certs/global-virtual-tpm-ca-03.pem'));
    const [root] = certsFromBytes(az('issuer-certs/azure-virtual-tpm-root-ca-2023.pem'));
    if (!ca03 || !root) throw new Error('azure issuer certs');
    out.push(
      certRegion('tpm/azure-vtpm akcert_0x01C101D0.der', leaf.der, ca03, 2),
      certRegion('tpm/azure-vtpm global-virtual-tpm-ca-03', ca03.der, root, 2),
      certRegion('tpm/azure-vtpm azure-virtual-tpm-root-ca-2023', root.der, root, 2),
    );
  }

  // tpm/ms-tpm-20-ref-v183: four quotes, their TPMT_SIGNATUREs, the synthetic AK chains
  for (const s of ['rsassa-sha256', 'rsapss-sha256', 'rsassa-sha384', 'ecdsa-sha384']) {
    const ms = (f: string) => v('tpm', 'ms-tpm-20-ref-v183', f);
    const attest = ms(`${s}-attest.bin`);
    const sig = ms(`${s}-tpmt-signature.bin`);
    const [leaf] = certsFromBytes(ms(`${s}-ak-chain.pem`));
    const [root] = certsFromBytes(ms(`${s}-root.pem`));
    if (!leaf || !root) throw new Error(`${s} chain`);
    const nonce = Buffer.from(ms('nonce.hex').toString('utf8').trim(), 'hex');
    const sel = [{ hashAlg: TPM_ALG.SHA256, pcrs: [0, 1, 2] }];
    const verify = (a: Buffer, g: Buffer) =>
      verifyTpmQuote({
        attest: a,
        signature: g,
        ak: { key: new X509Certificate(leaf.der).publicKey },
        expectedExtraData: nonce,
        pcrValues: [0, 1, 2].map((index) => ({ hashAlg: TPM_ALG.SHA256, index, value: Buffer.alloc(32) })),
        declaredSelection: sel,
        requiredSelection: sel,
      }).checks;
    out.push(
      {
        name: `tpm/ms-tpm-20-ref ${s}-attest.bin`,
        base: attest,
        flips: whole(attest.length),
        cuts: cutsOf(attest.length),
        accepted: (b) => !anyFail(verify(b, sig)),
      },
      {
        name: `tpm/ms-tpm-20-ref ${s}-tpmt-signature.bin`,
        base: sig,
        flips: whole(sig.length),
        cuts: cutsOf(sig.length),
        accepted: (b) => !anyFail(verify(attest, b)),
      },
      certRegion(`tpm/ms-tpm-20-ref ${s}-ak-chain.pem leaf`, leaf.der, root),
      certRegion(`tpm/ms-tpm-20-ref ${s}-root.pem`, root.der, root),
    );
  }

  // snp/go-sev-guest-milan: the report (signed part and signature), VCEK ← ASK ← ARK
  {
    const snp = (f: string) => v('snp', 'go-sev-guest-milan', f);
    const report = snp('attestation.bin');
    const certs = [snp('vcek.testcer'), snp('ask_ark_milan.pem')];
    const rv = parseReferenceValues('version: 1\nsev_snp:\n  allow_debug: true\n');
    const at = new Date('2026-11-30T00:00:00Z');
    const rd = Buffer.alloc(64);
    rd.set([1, 2, 3, 4, 5]);
    const verify = (b: Buffer) =>
      verifySnpReport({ report: b, certs, trustStore: ts, at, referenceValues: rv, expectedReportData: rd })
        .checks;
    // 0x000–0x29F signed by the VCEK (every bit); 0x2A0–0x49F the signature (r, s, reserved)
    out.push({
      name: 'snp/go-sev-guest-milan attestation.bin',
      base: report,
      flips: [
        { lo: 0, hi: 0x2a0, bits: 8 },
        { lo: 0x2a0, hi: report.length, bits: 1 },
      ],
      cuts: cutsOf(report.length, [0x2a0, 0x2e8, 0x330]),
      accepted: (b) => !anyFail(verify(b)),
    });
    const vcek = parseCert(snp('vcek.testcer'));
    const [ask, ark] = certsFromBytes(snp('ask_ark_milan.pem'));
    if (!ask || !ark) throw new Error('milan chain');
    out.push(
      certRegion('snp/go-sev-guest-milan vcek.testcer', vcek.der, ask, AMD_STRIDE),
      certRegion('snp/go-sev-guest-milan ASK', ask.der, ark, AMD_STRIDE),
      certRegion('snp/go-sev-guest-milan ARK', ark.der, ark, AMD_STRIDE),
    );
  }
  // snp/amd-roots and azure-hcl/certs.pem: each intermediate under its ARK, each ARK self-signed
  for (const [dir, f] of [
    ['amd-roots', 'ask_ark_genoa.pem'],
    ['amd-roots', 'ask_ark_turin_vcek.pem'],
    ['amd-roots', 'ask_ark_turin_vlek.pem'],
  ] as const) {
    const [ask, ark] = certsFromBytes(v('snp', dir, f));
    if (!ask || !ark) throw new Error(f);
    out.push(
      certRegion(`snp/${dir} ${f} ASK`, ask.der, ark, AMD_STRIDE),
      certRegion(`snp/${dir} ${f} ARK`, ark.der, ark, AMD_STRIDE),
    );
  }
  {
    const [vcek, ask] = certsFromBytes(v('azure-hcl', 'certs.pem'));
    if (!vcek || !ask) throw new Error('azure-hcl certs');
    out.push(certRegion('azure-hcl certs.pem VCEK', vcek.der, ask, AMD_STRIDE));
  }

  // tdx/go-tdx-guest-spr-e4: the quote up to its end (header and body, signature, attestation
  // key, QE report and its signature, QE auth data, PCK chain); the trailing bytes are unsigned
  {
    const quote = v('tdx', 'go-tdx-guest-spr-e4', 'tdx_prod_quote_SPR_E4.dat');
    const parsed = parseTdxQuote(quote);
    const end = parsed.end;
    const at = new Date('2023-07-01T01:00:00Z');
    const verify = (b: Buffer) =>
      verifyTdxQuote({ quote: b, trustStore: ts, at, expectedReportData: parsed.body.reportData }).checks;
    const pem = quote.indexOf('-----BEGIN');
    out.push({
      name: 'tdx/go-tdx-guest-spr-e4 quote',
      base: quote,
      // every bit of the header and TD report body (what the attestation key signs); one bit of
      // every byte after: signature, attestation key, QE report and signature, auth data, PCK chain
      flips: [
        { lo: 0, hi: 48 + 584, bits: 8 },
        { lo: 48 + 584, hi: end, bits: 1 },
      ],
      cuts: cutsOf(end, [48, 48 + 584, 48 + 584 + 4, pem]),
      accepted: (b) => !anyFail(verify(b)),
    });
    // tdx/collateral: the signed JSON, both CRLs, the issuer chains
    const col = (f: string) => v('tdx', 'collateral', f);
    const collateral = (): TdxCollateral => ({
      tcbInfo: col('sample_tcbInfo_response'),
      qeIdentity: col('sample_qeIdentity_response'),
      tcbSigningChain: col('tcb-signing-issuer-chain.pem'),
      pckCrl: col('pckcrl'),
      rootCrl: col('rootcrl.der'),
    });
    const chain = validateChain({
      certs: pemBlocks(parsed.pckChainPem).map(parseCert),
      roots: ts.roots.filter((x) => x.purpose === 'intel-sgx-root'),
      at,
      what: 'PCK',
      usedFor: 'tdx-pck',
    });
    if (chain.status !== 'anchored') throw new Error('pck chain');
    const [pck, pckIssuer, pckRoot] = chain.path;
    const runCollateral = (c: TdxCollateral) =>
      verifyTdxCollateral({ quote: parsed, pck, pckIssuer, pckRoot, collateral: c, trustStore: ts, at })
        .checks;
    // The signed JSON: the member bytes, the signature's hex digits (read case-insensitively, so
    // a letter's case bit, 0x20, leaves the same signature: only bits 0–3 are flipped there), and
    // the framing around them; cuts up to the last non-blank byte (a trailing newline is outside).
    for (const [k, f] of [
      ['tcbInfo', 'sample_tcbInfo_response'],
      ['qeIdentity', 'sample_qeIdentity_response'],
    ] as const) {
      const base = col(f);
      const sigLo = base.indexOf('"signature":"') + '"signature":"'.length;
      const sigHi = base.indexOf('"', sigLo);
      const last = base.toString('latin1').trimEnd().length;
      out.push({
        name: `tdx/collateral ${f}`,
        base,
        flips: [
          { lo: 0, hi: sigLo, bits: 1 },
          { lo: sigLo, hi: sigHi, bits: 1, bitMask: 0x0f },
          { lo: sigHi, hi: last, bits: 1 },
        ],
        cuts: cutsOf(last),
        accepted: noNewFailure((b) => runCollateral({ ...collateral(), [k]: b }), base),
      });
    }
    // The CRLs under their issuers (RFC 5280 §5): PCK CRL ← Platform CA, Root CA CRL ← Intel root.
    const [platformCa, intelRoot] = certsFromBytes(col('pck-crl-issuer-chain.pem'));
    if (!platformCa || !intelRoot) throw new Error('pck-crl-issuer-chain.pem');
    for (const [f, issuer, stride] of [
      ['pckcrl', platformCa, 8],
      ['rootcrl.der', intelRoot, 1],
    ] as const) {
      const base = col(f);
      out.push({
        name: `tdx/collateral ${f}`,
        base,
        flips: [{ lo: 0, hi: base.length, bits: 1, stride }],
        cuts: cutsOf(base.length),
        accepted: (b) => {
          try {
            checkCrl(parseCrl(b), issuer, at, f);
            return true;
          } catch {
            return false;
          }
        },
      });
    }
    for (const f of ['tcb-signing-issuer-chain.pem', 'pck-crl-issuer-chain.pem']) {
      const [c, r] = certsFromBytes(col(f));
      if (!c || !r) throw new Error(f);
      out.push(certRegion(`tdx/collateral ${f} [0]`, c.der, r));
      if (f.startsWith('tcb')) out.push(certRegion('tdx/collateral Intel SGX Root CA', r.der, r));
    }
  }

  // azure-hcl: the vTPM quote under akpub.pem; the HCL runtime data REPORT_DATA binds
  {
    const az = (f: string) => v('azure-hcl', f);
    const d = az('quote.bin');
    const sigLen = Number(d.readBigUInt64LE(0));
    const msgLen = Number(d.readBigUInt64LE(8 + sigLen));
    const attest = Buffer.from(d.subarray(16 + sigLen, 16 + sigLen + msgLen));
    const head = Buffer.alloc(6);
    head.writeUInt16BE(TPM_ALG.RSASSA, 0);
    head.writeUInt16BE(TPM_ALG.SHA256, 2);
    head.writeUInt16BE(sigLen, 4);
    const sig = Buffer.concat([head, d.subarray(8, 8 + sigLen)]);
    const key = createPublicKey(az('akpub.pem'));
    const verify = (a: Buffer, s: Buffer) =>
      verifyTpmQuote({ attest: a, signature: s, ak: { key }, expectedExtraData: Buffer.from('challenge') })
        .checks;
    out.push(
      {
        name: 'azure-hcl quote.bin TPMS_ATTEST',
        base: attest,
        flips: whole(attest.length),
        cuts: cutsOf(attest.length),
        accepted: noNewFailure((b) => verify(b, sig), attest),
      },
      {
        name: 'azure-hcl quote.bin signature',
        base: sig,
        flips: whole(sig.length),
        cuts: cutsOf(sig.length),
        accepted: noNewFailure((b) => verify(attest, b), sig),
      },
    );
    for (const f of ['hcl-report-snp.bin', 'hcl-report-tdx.bin']) {
      const hcl = az(f);
      const rt = parseHclReport(hcl).runtimeData;
      const lo = hcl.indexOf(rt);
      const ctx = { trustStore: EMPTY_TRUST_STORE, at: new Date('2026-12-01T00:00:00Z') };
      const reportData = (b: Buffer) =>
        verifyAzureHcl(
          { hclReport: b, attest, signature: sig, expectedExtraData: Buffer.from('challenge') },
          ctx,
        ).checks.find((c) => c.id === 'azure.report_data')?.status === 'pass';
      if (!reportData(hcl)) throw new Error(`${f}: azure.report_data does not pass`);
      out.push({
        name: `azure-hcl ${f} runtime data (bound by REPORT_DATA)`,
        base: hcl,
        flips: [{ lo, hi: lo + rt.length, bits: 1 }],
        cuts: cutsOf(lo + rt.length, [lo]).filter((n) => n >= lo),
        accepted: reportData,
      });
    }
  }
  return out;
}

// A CPU-bound sweep of tens of thousands of verifications: on a loaded 2-core machine one family
// takes minutes, not the default minute.
const SWEEP_TIMEOUT_MS = 10 * 60_000;

describe.skipIf(!hasVectors())('sweep: every signed region of every shipped vector, flipped and cut', () => {
  // one test per vector family (each inside the test timeout); the last one prints the totals
  const rows: string[] = [];
  const accepts: string[] = [];
  let tried = 0;
  let inputs = 0;
  let regions: SignedRegion[] = [];
  const family = (r: SignedRegion) => r.name.split(/[/ ]/)[0] as string;

  for (const fam of ['tpm', 'snp', 'tdx', 'azure-hcl']) {
    it(
      `${fam}: every mutation of every signed input is refused, none crashes`,
      () => {
        if (!regions.length) regions = signedRegions();
        for (const r of regions.filter((x) => family(x) === fam)) {
          expect(r.accepted(r.base), `${r.name}: the original is accepted`).toBe(true);
          let n = 0;
          const t0 = performance.now();
          const test = (b: Buffer, what: string) => {
            n++;
            let ok: boolean;
            try {
              ok = r.accepted(b);
            } catch (err) {
              throw new Error(`${r.name} ${what} crashed: ${(err as Error).message}`);
            }
            if (ok) accepts.push(`${r.name}: ${what}`);
          };
          for (const f of r.flips) {
            const stride = f.stride ?? 1;
            const mask = f.bitMask ?? 0xff;
            const allowed = [0, 1, 2, 3, 4, 5, 6, 7].filter((x) => mask & (1 << x));
            for (let i = f.lo, j = 0; i < f.hi; i += stride, j++) {
              for (let k = 0; k < (f.bits === 8 ? allowed.length : 1); k++) {
                const bit = (f.bits === 8 ? allowed[k] : allowed[j % allowed.length]) as number;
                const b = Buffer.from(r.base);
                b[i] = (b[i] as number) ^ (1 << bit);
                test(b, `bit ${bit} of byte ${i}`);
              }
            }
          }
          for (const c of r.cuts) test(Buffer.from(r.base.subarray(0, c)), `cut to ${c}`);
          tried += n;
          inputs++;
          rows.push(`  ${r.name}: ${n} (${Math.round(performance.now() - t0)} ms)`);
        }
        expect(accepts.slice(0, 20)).toEqual([]);
      },
      SWEEP_TIMEOUT_MS,
    );
  }

  it('totals: mutations tried and false accepts (0)', () => {
    console.log(
      `mutation sweep: ${inputs} signed inputs, ${tried} mutations, ${accepts.length} false accepts\n${rows.join('\n')}`,
    );
    expect(inputs).toBe(regions.length);
    expect(accepts).toEqual([]);
    expect(tried).toBeGreaterThan(50_000);
  });
});
