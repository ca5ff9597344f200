/**
 * SEV-SNP verification against test/vectors/snp (go-sev-guest-milan, amd-roots) and case
 * C-SNP-1. Every expectation in the two PROVENANCE.md files is a test here; names follow the
 * vector folder and the expectation. Fixed clock: 2026-11-30 (all certificates valid).
 */
import { readFileSync } from 'node:fs';
import type { CheckResult, VerificationReport } from '@cmcp/verify';
import { loadTrustStore, parseReferenceValues, type TrustStore, verifySnpEvidence } from '@cmcp/verify';
import { describe, expect, it } from 'vitest';
import {
  decodeSnpTcb,
  parseSnpReport,
  productFromCpuid,
  productFromName,
  SNP_REPORT_SIZE,
  type SnpInput,
  verifySnpReport,
} from '../packages/verify/src/snp/index.js';
import { certsFromBytes, issuedBy, validateChain } from '../packages/verify/src/x509.js';
import { hasVectors, vectorPath } from './harness/vectors.js';

const AT = new Date('2026-11-30T00:00:00Z');
const MILAN = 'go-sev-guest-milan';
const ROOTS = 'amd-roots';
const read = (...p: string[]) => readFileSync(vectorPath('snp', ...p));
const get = (checks: readonly CheckResult[], id: string): CheckResult => {
  const c = checks.find((x) => x.id === id);
  if (!c) throw new Error(`no check ${id}`);
  return c;
};
const fails = (r: { checks: CheckResult[] }) => r.checks.filter((c) => c.status === 'fail').map((c) => c.id);
const trust = (): TrustStore =>
  loadTrustStore(new URL('../attestation/trust-store.yaml', import.meta.url).pathname);
const allowDebug = parseReferenceValues('version: 1\nsev_snp:\n  allow_debug: true\n');

describe.skipIf(!hasVectors())('snp/go-sev-guest-milan', () => {
  const report = () => read(MILAN, 'attestation.bin');
  const certs = () => [read(MILAN, 'vcek.testcer'), read(MILAN, 'ask_ark_milan.pem')];
  const input = (over: Partial<SnpInput> = {}): SnpInput => ({
    report: report(),
    certs: certs(),
    trustStore: trust(),
    at: AT,
    ...over,
  });
  const expected = () =>
    JSON.parse(read(MILAN, 'expected.json').toString('utf8')) as { report: Record<string, string | number> };

  it('report fields parse to the stated values (v2, little-endian)', () => {
    const r = parseSnpReport(report());
    const e = expected().report;
    expect(report().length).toBe(1184);
    expect(r.version).toBe(2);
    expect(r.guestSvn).toBe(0);
    expect(r.policy).toBe(0xb0000n);
    expect(r.familyId.equals(Buffer.alloc(16))).toBe(true);
    expect(r.imageId.equals(Buffer.alloc(16))).toBe(true);
    expect(r.vmpl).toBe(0);
    expect(r.signatureAlgo).toBe(1);
    expect(r.currentTcb.toString('hex')).toBe('0200000000000544');
    expect(r.platformInfo).toBe(1n);
    expect(r.signerInfo).toEqual({ authorKeyEn: false, maskChipKey: false, signingKey: 0 });
    expect(r.reportData.toString('hex')).toBe(e.report_data);
    expect(r.measurement.toString('hex')).toBe(
      'b07af9620f3b839b47996422ddec6058338951d984e312115131ea82705eaf5b6bdf8a9ece31a5a608eb0cf2e4872b01',
    );
    expect(r.hostData.equals(Buffer.alloc(32))).toBe(true);
    expect(r.idKeyDigest.equals(Buffer.alloc(48))).toBe(true);
    expect(r.authorKeyDigest.equals(Buffer.alloc(48))).toBe(true);
    expect(r.reportId.toString('hex')).toBe(
      '8edc638e1857c555d21f6b11bda3c8b1b5a09dba4852b4c8ee7aa2f16f22cc0a',
    );
    expect(r.reportIdMa.equals(Buffer.alloc(32, 0xff))).toBe(true);
    expect(r.reportedTcb.toString('hex')).toBe('0200000000000544');
    expect(r.cpuid).toBeUndefined(); // v2: CPUID is not a field; never read
    expect(r.chipId.toString('hex')).toBe(e.chip_id);
    expect(r.committedTcb.toString('hex')).toBe('0200000000000544');
    expect(r.launchTcb.toString('hex')).toBe('0200000000000544');
    expect(r.signature.r.toString('hex')).toBe(String(e.sig_r).slice(2));
    expect(r.signature.s.toString('hex')).toBe(String(e.sig_s).slice(2));
  });

  it('REPORTED_TCB in the Milan layout: bootloader 2, TEE 0, SNP 5, microcode 68', () => {
    expect(decodeSnpTcb(parseSnpReport(report()).reportedTcb, 'Milan')).toEqual({
      bootloader: 2,
      tee: 0,
      snp: 5,
      microcode: 68,
    });
  });

  it('signature valid (ECDSA P-384 over [0x000, 0x2A0), r/s little-endian); VCEK ← ASK ← ARK-Milan anchored; hwID = CHIP_ID; SPLs = REPORTED_TCB', () => {
    const r = verifySnpReport(input());
    for (const id of [
      'snp.report_parse',
      'snp.signature_algo',
      'snp.signing_key',
      'snp.certs_parse',
      'snp.product',
      'evidence.signature',
      'evidence.anchor',
      'snp.signer',
      'snp.hwid',
      'snp.tcb',
    ]) {
      expect(get(r.checks, id).status, id).toBe('pass');
    }
    expect(r.product).toBe('Milan');
    expect(get(r.checks, 'snp.product').detail).toContain('VCEK productName "Milan-B0"');
    expect(r.anchors).toEqual([
      {
        name: 'AMD ARK-Milan',
        sha256_fingerprint:
          '69:D0:63:B4:53:44:D2:6A:2E:94:E1:F4:21:0D:E4:9E:F5:55:30:82:87:D4:C1:74:44:5C:95:63:9A:54:0B:CD',
        used_for: 'sev-snp-vcek',
      },
    ]);
  });

  it('with a policy that allows debug (and no nonce) the raw report is hardware-attested', () => {
    const r = verifySnpEvidence({
      report: report(),
      certs: certs(),
      trustStore: trust(),
      now: AT,
      referenceValues: allowDebug,
    });
    expect(fails(r)).toEqual([]);
    expect(r.verdict).toBe('hardware-attested');
    expect(r.anchors_used[0]?.sha256_fingerprint).toMatch(/^69:D0:63:B4/);
  });

  it('negative: POLICY has DEBUG set, so a no-debug policy (the default) rejects it', () => {
    const r = verifySnpEvidence({ report: report(), certs: certs(), trustStore: trust(), now: AT });
    expect(get(r.checks, 'snp.debug').reason_code).toBe('SNP_DEBUG_ENABLED');
    expect(r.verdict).toBe('invalid');
  });

  it('negative: flip byte 0x50 (REPORT_DATA[0]) → signature invalid', () => {
    const b = report();
    b[0x50] = (b[0x50] ?? 0) ^ 0x01;
    expect(get(verifySnpReport(input({ report: b })).checks, 'evidence.signature').reason_code).toBe(
      'SNP_SIGNATURE_INVALID',
    );
  });

  it('negative: flip byte 0x2A0 (low byte of R) → signature invalid', () => {
    const b = report();
    b[0x2a0] = (b[0x2a0] ?? 0) ^ 0x01;
    expect(get(verifySnpReport(input({ report: b })).checks, 'evidence.signature').status).toBe('fail');
  });

  it('expected REPORT_DATA = 0102030405…00 binds; any other value → EVIDENCE_BINDING_MISMATCH', () => {
    const want = Buffer.alloc(64);
    want.set([1, 2, 3, 4, 5]);
    expect(get(verifySnpReport(input({ expectedReportData: want })).checks, 'evidence.binding').status).toBe(
      'pass',
    );
    const other = Buffer.from(want);
    other[5] = 1;
    expect(
      get(verifySnpReport(input({ expectedReportData: other })).checks, 'evidence.binding').reason_code,
    ).toBe('EVIDENCE_BINDING_MISMATCH');
    // exact length: the 5 meaningful bytes alone do not match
    expect(
      get(verifySnpReport(input({ expectedReportData: want.subarray(0, 5) })).checks, 'evidence.binding')
        .status,
    ).toBe('fail');
  });

  it('negative: VCEK checked directly against the ARK (no ASK) → no chain', () => {
    const ark = certsFromBytes(read(MILAN, 'ask_ark_milan.pem'))[1];
    if (!ark) throw new Error('no ARK');
    const r = verifySnpReport(input({ certs: [read(MILAN, 'vcek.testcer'), ark.der] }));
    expect(get(r.checks, 'evidence.anchor')).toMatchObject({
      status: 'fail',
      reason_code: 'CHAIN_INCOMPLETE',
    });
  });

  it('negative: this ASK checked against the Genoa ARK → invalid (wrong product root)', () => {
    const ask = certsFromBytes(read(MILAN, 'ask_ark_milan.pem'))[0];
    const genoaArk = certsFromBytes(read(ROOTS, 'ask_ark_genoa.pem'))[1];
    if (!ask || !genoaArk) throw new Error('missing certs');
    expect(issuedBy(ask, genoaArk)).toBe(false);
    const r = verifySnpReport(input({ certs: [read(MILAN, 'vcek.testcer'), ask.der, genoaArk.der] }));
    expect(get(r.checks, 'evidence.anchor').status).toBe('fail');
    expect(r.anchors).toEqual([]);
  });

  it('negative: the product is never inferred from the zero CPUID of a v2 report; configuration that disagrees with the VCEK fails', () => {
    const r = verifySnpReport(input({ product: 'Genoa' }));
    expect(get(r.checks, 'snp.product').reason_code).toBe('SNP_PRODUCT_MISMATCH');
    expect(get(r.checks, 'evidence.anchor').status).toBe('fail');
    // without the VCEK and without configuration, the product is unknown (not defaulted)
    const none = verifySnpReport(input({ certs: [] }));
    expect(get(none.checks, 'snp.product').reason_code).toBe('SNP_PRODUCT_UNKNOWN');
    expect(get(none.checks, 'evidence.signature').status).toBe('fail');
  });

  it('reference values: VMPL, minimum TCB per product, expected measurement', () => {
    const ok = parseReferenceValues(
      [
        'version: 1',
        'sev_snp:',
        '  allow_debug: true',
        '  vmpl: [0]',
        '  minimum_tcb: { Milan: { bootloader: 2, tee: 0, snp: 5, microcode: 68 } }',
        '  measurements: [b07af9620f3b839b47996422ddec6058338951d984e312115131ea82705eaf5b6bdf8a9ece31a5a608eb0cf2e4872b01]',
      ].join('\n'),
    );
    const r = verifySnpEvidence({
      report: report(),
      certs: certs(),
      trustStore: trust(),
      now: AT,
      referenceValues: ok,
    });
    expect(fails(r)).toEqual([]);
    for (const id of ['snp.vmpl', 'snp.minimum_tcb', 'snp.measurement'])
      expect(get(r.checks, id).status, id).toBe('pass');
    const bad = parseReferenceValues(
      [
        'version: 1',
        'sev_snp:',
        '  allow_debug: true',
        '  vmpl: [1, 2]',
        '  minimum_tcb: { Milan: { snp: 6 } }',
        `  measurements: ["${'00'.repeat(48)}"]`,
      ].join('\n'),
    );
    const r2 = verifySnpEvidence({
      report: report(),
      certs: certs(),
      trustStore: trust(),
      now: AT,
      referenceValues: bad,
    });
    expect(get(r2.checks, 'snp.vmpl').reason_code).toBe('SNP_VMPL_NOT_ALLOWED');
    expect(get(r2.checks, 'snp.minimum_tcb').reason_code).toBe('SNP_TCB_TOO_LOW');
    expect(get(r2.checks, 'snp.measurement').reason_code).toBe('MEASUREMENT_NOT_ALLOWED');
    // a Turin minimum does not apply to this Milan report
    const turinOnly = parseReferenceValues(
      'version: 1\nsev_snp:\n  allow_debug: true\n  minimum_tcb: { Turin: { snp: 99 } }\n',
    );
    const r3 = verifySnpEvidence({
      report: report(),
      certs: certs(),
      trustStore: trust(),
      now: AT,
      referenceValues: turinOnly,
    });
    expect(get(r3.checks, 'snp.minimum_tcb').status).toBe('not-applicable');
  });

  it('a root that is valid but not pinned → evidence.anchor absent (hardware-unanchored at best)', () => {
    const r = verifySnpEvidence({
      report: report(),
      certs: certs(),
      trustStore: { version: 1, roots: [] },
      now: AT,
      referenceValues: allowDebug,
    });
    expect(get(r.checks, 'evidence.anchor')).toMatchObject({
      status: 'absent',
      reason_code: 'ROOT_NOT_PINNED',
    });
    expect(r.verdict).toBe('hardware-unanchored');
    expect(r.anchors_used).toEqual([]);
  });

  it('the VCEK expires 2029-09-24: a chain check after that fails', () => {
    const r = verifySnpReport(input({ at: new Date('2029-09-25T00:00:00Z') }));
    expect(get(r.checks, 'evidence.anchor').reason_code).toBe('CERT_NOT_VALID_AT_TIME');
  });

  it('mutation: flipping any single byte of the 1184-byte report is rejected (all positions)', () => {
    const base = report();
    const c = certs();
    const ts = trust();
    for (let i = 0; i < base.length; i++) {
      const b = Buffer.from(base);
      b[i] = (b[i] ?? 0) ^ 0xff;
      const r = verifySnpReport({ report: b, certs: c, trustStore: ts, at: AT, referenceValues: allowDebug });
      const bad = r.checks.filter((x) => x.status === 'fail');
      expect(bad.length, `byte 0x${i.toString(16)}`).toBeGreaterThan(0);
      if (i < 0x2a0 && b.readUInt32LE(0) === 2) {
        expect(get(r.checks, 'evidence.signature').status, `byte 0x${i.toString(16)}`).toBe('fail');
      }
    }
  });
});

describe.skipIf(!hasVectors())('C-SNP-1 what is signed', () => {
  const base = () => readFileSync(vectorPath('snp', MILAN, 'attestation.bin'));
  const run = (b: Buffer): VerificationReport =>
    verifySnpEvidence({
      report: b,
      certs: [
        readFileSync(vectorPath('snp', MILAN, 'vcek.testcer')),
        readFileSync(vectorPath('snp', MILAN, 'ask_ark_milan.pem')),
      ],
      trustStore: trust(),
      now: AT,
      referenceValues: allowDebug,
    });

  it('the genuine report verifies (baseline)', () => {
    expect(run(base()).verdict).toBe('hardware-attested');
  });

  it('a report whose signed body has one byte flipped is rejected; the ECDSA result is checked', () => {
    const b = base();
    b[0x100] = (b[0x100] ?? 0) ^ 0x80;
    const r = run(b);
    expect(r.verdict).toBe('invalid');
    expect(get(r.checks, 'evidence.signature').reason_code).toBe('SNP_SIGNATURE_INVALID');
  });

  it('the same signature stored big-endian instead of little-endian is rejected', () => {
    const b = base();
    const r = Buffer.from(b.subarray(0x2a0, 0x2a0 + 48)).reverse();
    const s = Buffer.from(b.subarray(0x2e8, 0x2e8 + 48)).reverse();
    r.copy(b, 0x2a0);
    s.copy(b, 0x2e8);
    const rep = run(b);
    expect(rep.verdict).toBe('invalid');
    expect(get(rep.checks, 'evidence.signature').status).toBe('fail');
  });

  it('a signature algorithm field other than 1 is rejected (0, 2, 0xffffffff)', () => {
    for (const v of [0, 2, 0xffffffff]) {
      const b = base();
      b.writeUInt32LE(v, 0x34);
      const r = run(b);
      expect(r.verdict, String(v)).toBe('invalid');
      expect(get(r.checks, 'snp.signature_algo').reason_code).toBe('SNP_SIGNATURE_ALGO_UNSUPPORTED');
      expect(get(r.checks, 'evidence.signature').status).toBe('fail');
    }
  });
});

describe.skipIf(!hasVectors())('SEV-SNP report versions and layouts', () => {
  const base = () => readFileSync(vectorPath('snp', MILAN, 'attestation.bin'));

  it('versions outside the allow-list (0, 1, 4, 6, 0x10002) are refused before any version-dependent field', () => {
    for (const v of [0, 1, 4, 6, 0x10002]) {
      const b = base();
      b.writeUInt32LE(v, 0);
      expect(() => parseSnpReport(b)).toThrow(expect.objectContaining({ code: 'SNP_VERSION_UNSUPPORTED' }));
      const r = verifySnpReport({
        report: b,
        certs: [],
        trustStore: trust(),
        at: AT,
        expectedReportData: Buffer.alloc(64),
      });
      expect(get(r.checks, 'snp.report_parse').reason_code).toBe('SNP_VERSION_UNSUPPORTED');
      for (const id of ['evidence.signature', 'evidence.binding', 'snp.debug', 'snp.tcb']) {
        expect(get(r.checks, id).status, id).toBe('fail'); // never skipped
      }
    }
  });

  it('v3 reads CPUID (family/model/stepping); v5 also reads the mitigation vectors; v2 reads neither', () => {
    const b = base();
    b.writeUInt32LE(3, 0);
    b.set([0x19, 0x11, 0x01], 0x188);
    expect(parseSnpReport(b).cpuid).toEqual({ family: 0x19, model: 0x11, stepping: 1 });
    expect(parseSnpReport(b).launchMitVector).toBeUndefined();
    b.writeUInt32LE(5, 0);
    b.writeBigUInt64LE(7n, 0x1f8);
    expect(parseSnpReport(b).launchMitVector).toBe(7n);
    expect(productFromCpuid({ family: 0x19, model: 0x01 })).toBe('Milan');
    expect(productFromCpuid({ family: 0x19, model: 0x11 })).toBe('Genoa');
    expect(productFromCpuid({ family: 0x1a, model: 0x02 })).toBe('Turin');
    expect(productFromCpuid({ family: 0x17, model: 0x31 })).toBeNull();
  });

  it('a v3 report whose CPUID says Genoa disagrees with a Milan VCEK → SNP_PRODUCT_MISMATCH', () => {
    const b = base();
    b.writeUInt32LE(3, 0);
    b.set([0x19, 0x11, 0x01], 0x188);
    const r = verifySnpReport({
      report: b,
      certs: [
        readFileSync(vectorPath('snp', MILAN, 'vcek.testcer')),
        readFileSync(vectorPath('snp', MILAN, 'ask_ark_milan.pem')),
      ],
      trustStore: trust(),
      at: AT,
    });
    expect(get(r.checks, 'snp.product').reason_code).toBe('SNP_PRODUCT_MISMATCH');
  });

  it('a report of the wrong length, non-zero signature padding or non-zero reserved tail is refused', () => {
    expect(() => parseSnpReport(base().subarray(0, SNP_REPORT_SIZE - 1))).toThrow(
      expect.objectContaining({ code: 'SNP_REPORT_MALFORMED' }),
    );
    expect(() => parseSnpReport(Buffer.concat([base(), Buffer.alloc(1)]))).toThrow(
      expect.objectContaining({ code: 'SNP_REPORT_MALFORMED' }),
    );
    const pad = base();
    pad[0x2a0 + 50] = 1;
    expect(() => parseSnpReport(pad)).toThrow(expect.objectContaining({ code: 'SNP_SIGNATURE_MALFORMED' }));
    const tail = base();
    tail[0x400] = 1;
    expect(() => parseSnpReport(tail)).toThrow(expect.objectContaining({ code: 'SNP_REPORT_MALFORMED' }));
  });

  it('negative (amd-roots): a Turin report read with the Milan/Genoa layout gives a wrong SPL comparison; Turin is [0] FMC, [1] BL, [2] TEE, [3] SNP, [7] ucode', () => {
    const tcb = Buffer.from([1, 2, 3, 4, 0, 0, 0, 9]);
    expect(decodeSnpTcb(tcb, 'Turin')).toEqual({ fmc: 1, bootloader: 2, tee: 3, snp: 4, microcode: 9 });
    expect(decodeSnpTcb(tcb, 'Milan')).toEqual({ bootloader: 1, tee: 2, snp: 0, microcode: 9 });
    expect(decodeSnpTcb(tcb, 'Genoa')).not.toEqual(decodeSnpTcb(tcb, 'Turin'));
  });

  it('productName maps to the product family; unknown names are not guessed', () => {
    expect(productFromName('Milan-B0')).toBe('Milan');
    expect(productFromName('Genoa')).toBe('Genoa');
    expect(productFromName('Turin-C1')).toBe('Turin');
    expect(productFromName('Rome-B0')).toBeNull();
  });
});

describe.skipIf(!hasVectors())('snp/amd-roots', () => {
  const bundle = (f: string) => certsFromBytes(readFileSync(vectorPath('snp', ROOTS, f)));
  const FILES = {
    Milan: 'ask_ark_milan.pem',
    Genoa: 'ask_ark_genoa.pem',
    Turin: 'ask_ark_turin_vcek.pem',
    TurinVlek: 'ask_ark_turin_vlek.pem',
  } as const;
  const expected = JSON.parse(readFileSync(vectorPath('snp', ROOTS, 'expected.json'), 'utf8')) as {
    bundles: Record<
      string,
      { intermediate: { cn: string; sha256: string }; root: { cn: string; sha256: string } }
    >;
  };

  for (const [product, file] of Object.entries(FILES)) {
    it(`${file}: intermediate first, signed by its ARK; the ARK is self-signed; fingerprints as stated`, () => {
      const [inter, root, ...rest] = bundle(file);
      if (!inter || !root) throw new Error('bundle');
      expect(rest).toEqual([]);
      const e = expected.bundles[file];
      expect(inter.sha256).toBe(e?.intermediate.sha256);
      expect(root.sha256).toBe(e?.root.sha256);
      expect(issuedBy(inter, root)).toBe(true);
      expect(issuedBy(root, root)).toBe(true);
      // the repo trust store pins this ARK (and only the ARK) for the product
      const pinned = trust().roots.filter((r) => r.sha256 === root.sha256);
      expect(pinned.map((r) => [r.purpose, r.product])).toEqual([['amd-ark', product.replace('Vlek', '')]]);
      expect(trust().roots.some((r) => r.sha256 === inter.sha256)).toBe(false);
    });
  }

  it('ARK fingerprints equal the trust store (Milan 69:D0…, Genoa 4C:65…, Turin 1F:08…); VCEK and VLEK bundles share ARK-Turin', () => {
    const ark = (f: string) => bundle(f)[1]?.sha256;
    expect(ark(FILES.Milan)).toBe('69d063b45344d26a2e94e1f4210de49ef555308287d4c174445c95639a540bcd');
    expect(ark(FILES.Genoa)).toBe('4c6598d19c18719c5dfd4a7d335f674e5bfe1d8f800cea2cf270c10d103db2f1');
    expect(ark(FILES.Turin)).toBe('1f084161a44bb6d93778a904877d4819cafa5d05ef4193b2ded9dd9c73dd3f6a');
    expect(ark(FILES.TurinVlek)).toBe(ark(FILES.Turin));
  });

  it('negative: cross-product checks are invalid (Milan ASK vs Genoa ARK, Genoa ASK vs Milan ARK, Turin ASK vs Milan ARK)', () => {
    const [milanAsk, milanArk] = bundle(FILES.Milan);
    const [genoaAsk, genoaArk] = bundle(FILES.Genoa);
    const [turinAsk] = bundle(FILES.Turin);
    if (!milanAsk || !milanArk || !genoaAsk || !genoaArk || !turinAsk) throw new Error('bundle');
    expect(issuedBy(milanAsk, genoaArk)).toBe(false);
    expect(issuedBy(genoaAsk, milanArk)).toBe(false);
    expect(issuedBy(turinAsk, milanArk)).toBe(false);
  });

  it('negative: the Milan VCEK checked against SEV-Genoa → invalid', () => {
    const vcek = certsFromBytes(readFileSync(vectorPath('snp', MILAN, 'vcek.testcer')))[0];
    const [genoaAsk] = bundle(FILES.Genoa);
    if (!vcek || !genoaAsk) throw new Error('certs');
    expect(issuedBy(vcek, genoaAsk)).toBe(false);
  });

  it('negative: pinning "the cert_chain file" as the root is wrong — the chain is anchored at the ARK, and an ASK pin is never the anchor', () => {
    const [ask, ark] = bundle(FILES.Milan);
    const vcek = certsFromBytes(readFileSync(vectorPath('snp', MILAN, 'vcek.testcer')))[0];
    if (!ask || !ark || !vcek) throw new Error('certs');
    const r = validateChain({
      certs: [vcek, ask, ark],
      roots: trust().roots.filter((x) => x.purpose === 'amd-ark' && x.product === 'Milan'),
      at: AT,
      what: 'VCEK',
      usedFor: 'sev-snp-vcek',
    });
    expect(r.status).toBe('anchored');
    expect(r.path.map((c) => c.sha256)).toEqual([vcek.sha256, ask.sha256, ark.sha256]);
  });

  it('negative: a VCEK presented under the VLEK bundle (ASVK) does not chain; SIGNER_INFO names the kind', () => {
    const vcek = readFileSync(vectorPath('snp', MILAN, 'vcek.testcer'));
    const r = verifySnpReport({
      report: readFileSync(vectorPath('snp', MILAN, 'attestation.bin')),
      certs: [vcek, readFileSync(vectorPath('snp', ROOTS, FILES.TurinVlek))],
      product: 'Milan',
      trustStore: trust(),
      at: AT,
    });
    expect(get(r.checks, 'evidence.anchor').status).toBe('fail');
    // the report says VCEK (SIGNING_KEY 0); claiming VLEK breaks both the signature and the signer check
    const b = readFileSync(vectorPath('snp', MILAN, 'attestation.bin'));
    b.writeUInt32LE(1 << 2, 0x48);
    const r2 = verifySnpReport({
      report: b,
      certs: [vcek, readFileSync(vectorPath('snp', MILAN, 'ask_ark_milan.pem'))],
      trustStore: trust(),
      at: AT,
    });
    expect(get(r2.checks, 'snp.signer').reason_code).toBe('SNP_SIGNER_MISMATCH');
    expect(get(r2.checks, 'evidence.signature').status).toBe('fail');
  });
});
