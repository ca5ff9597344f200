/**
 * The Azure CVM chain end to end on evidence built and signed under test roots
 * (testing/azure-cvm.ts): HCL report → REPORT_DATA[0:32] = SHA-256(runtime data) → HCLAkPub →
 * vTPM quote with the relying party's nonce, the hardware report under a test VCEK chain
 * (SEV-SNP) or in a v4 TD quote under a test PCK chain (TDX). Each broken link is refused with
 * its own check and code; the CLI runs the same chain; a mutation property run over the HCL
 * report finds no accepted change outside the header fields nothing signs.
 */
import { randomBytes } from 'node:crypto';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import type { CheckResult, VerificationReport } from '@cmcp/verify';
import {
  parseReferenceValues,
  parseTrustStore,
  type RawAzureEvidence,
  verifyAzureCvmEvidence,
} from '@cmcp/verify';
import { runVerifyEvidence } from '@cmcp/verify/cli';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import {
  hclAk,
  hclReport,
  hclReportData,
  rsassaQuoteSignature,
  runtimeDataJson,
  type SnpTestChain,
  snpReport,
  snpTestChain,
  type TdxTestChain,
  tdReport,
  tdxQuote,
  tdxTestChain,
} from '../testing/azure-cvm.js';
import { quoteAttest } from '../testing/evidence.js';

const get = (r: VerificationReport, id: string): CheckResult => {
  const c = r.checks.find((x) => x.id === id);
  if (!c) throw new Error(`no check ${id} in ${r.checks.map((x) => x.id).join(', ')}`);
  return c;
};
const fails = (r: VerificationReport) =>
  r.checks.filter((c) => c.status === 'fail').map((c) => `${c.id}:${c.reason_code}`);
const flip = (b: Buffer, off: number) => {
  const c = Buffer.from(b);
  c.writeUInt8((c[off] as number) ^ 0x01, off);
  return c;
};
const NOW = new Date('2026-12-01T12:00:00Z');

let snp: SnpTestChain;
let tdx: TdxTestChain;
const ak = hclAk();
const other = hclAk();
const rt = runtimeDataJson(ak.publicKey);
const nonce = randomBytes(32);
const attest = quoteAttest({
  qualifiedName: Buffer.alloc(34, 1),
  extraData: nonce,
  pcrs: [0, 1, 2, 3, 4, 5, 6, 7],
  pcrDigest: randomBytes(32),
});
const signature = rsassaQuoteSignature(attest, ak.privateKey);
const td = {
  mrTd: Buffer.alloc(48, 0x11),
  rtmr: [0, 1, 2, 3].map((i) => Buffer.alloc(48, 0x20 + i)) as [Buffer, Buffer, Buffer, Buffer],
};

let snpHcl: Buffer;
let tdReportBytes: Buffer;
let tdxHcl: Buffer;
let tdQuote: Buffer;

beforeAll(async () => {
  snp = await snpTestChain();
  tdx = await tdxTestChain();
  snpHcl = hclReport({
    kind: 'sev-snp',
    hwReport: snpReport(snp, hclReportData(rt)),
    runtimeData: rt,
    nvSize: 2048,
  });
  tdReportBytes = tdReport(hclReportData(rt), td);
  tdxHcl = hclReport({ kind: 'tdx', hwReport: tdReportBytes, runtimeData: rt, nvSize: 2600 });
  tdQuote = tdxQuote(tdx, tdReportBytes);
});

const snpInput = (over: Partial<RawAzureEvidence> = {}): RawAzureEvidence => ({
  hclReport: snpHcl,
  attest,
  signature,
  nonce,
  snpCerts: [snp.vcek, snp.ask, snp.ark],
  trustStore: parseTrustStore(snp.trustStoreYaml),
  now: NOW,
  ...over,
});
const tdxInput = (over: Partial<RawAzureEvidence> = {}): RawAzureEvidence => ({
  hclReport: tdxHcl,
  attest,
  signature,
  nonce,
  tdxQuote: tdQuote,
  trustStore: parseTrustStore(tdx.trustStoreYaml),
  now: NOW,
  ...over,
});

describe('Azure CVM chain, SEV-SNP variant (test ARK → ASK → VCEK)', () => {
  it('the whole chain verifies: hardware-attested, each link passing', () => {
    const r = verifyAzureCvmEvidence(snpInput());
    expect(fails(r)).toEqual([]);
    expect(r.verdict).toBe('hardware-attested');
    for (const id of [
      'azure.hcl_parse',
      'azure.runtime_data',
      'azure.report_data',
      'evidence.signature',
      'evidence.anchor',
      'snp.hwid',
      'snp.tcb',
      'azure.quote_signature',
      'evidence.binding',
      'azure.ak_match',
    ])
      expect(get(r, id).status, id).toBe('pass');
    expect(r.anchors_used.map((a) => a.used_for)).toEqual(['sev-snp-vcek']);
  });

  it('each broken link is refused with its own check and code', () => {
    const cases: [string, Partial<RawAzureEvidence>, string][] = [
      [
        'SNP report byte (MEASUREMENT) flipped',
        { hclReport: flip(snpHcl, 32 + 0x90) },
        'evidence.signature:SNP_SIGNATURE_INVALID',
      ],
      [
        'SNP signature byte flipped',
        { hclReport: flip(snpHcl, 32 + 0x2a0) },
        'evidence.signature:SNP_SIGNATURE_INVALID',
      ],
      [
        'runtime data byte flipped',
        { hclReport: flip(snpHcl, 1236 + 40) },
        'azure.report_data:HCL_REPORT_DATA_MISMATCH',
      ],
      [
        'quote TPMS_ATTEST byte flipped',
        { attest: flip(attest, 40) },
        'azure.quote_signature:QUOTE_SIGNATURE_INVALID',
      ],
      [
        'quote signature byte flipped',
        { signature: flip(signature, 100) },
        'azure.quote_signature:QUOTE_SIGNATURE_INVALID',
      ],
      [
        'quote under a key other than HCLAkPub',
        { signature: rsassaQuoteSignature(attest, other.privateKey) },
        'azure.quote_signature:QUOTE_SIGNATURE_INVALID',
      ],
      ['another nonce', { nonce: randomBytes(32) }, 'evidence.binding:QUOTE_NONCE_MISMATCH'],
      ['TD quote given for an SNP report', { tdxQuote: tdQuote }, 'azure.hardware:HCL_EVIDENCE_MISMATCH'],
      [
        'truncated HCL report',
        { hclReport: snpHcl.subarray(0, 1500) },
        'azure.hcl_parse:HCL_REPORT_TRUNCATED',
      ],
      [
        'an SNP report given as the HCL report',
        { hclReport: snpHcl.subarray(32, 32 + 1184) },
        'azure.hcl_parse:HCL_REPORT_MALFORMED',
      ],
    ];
    for (const [what, over, want] of cases) {
      const r = verifyAzureCvmEvidence(snpInput(over));
      expect(r.verdict, what).toBe('invalid');
      expect(fails(r), what).toContain(want);
    }
  });

  it('a report signed for another HCLAkPub does not vouch for this quote', () => {
    const rt2 = runtimeDataJson(other.publicKey);
    const hcl2 = hclReport({
      kind: 'sev-snp',
      hwReport: snpReport(snp, hclReportData(rt2)),
      runtimeData: rt2,
    });
    const r = verifyAzureCvmEvidence(snpInput({ hclReport: hcl2 }));
    expect(get(r, 'azure.report_data').status).toBe('pass');
    expect(get(r, 'evidence.signature').status).toBe('pass');
    expect(fails(r)).toEqual(['azure.quote_signature:QUOTE_SIGNATURE_INVALID']);
  });

  it('the VCEK chain matters: unpinned ARK → unanchored, no certificates → invalid, reference values apply', () => {
    const unpinned = verifyAzureCvmEvidence(
      snpInput({ trustStore: parseTrustStore('version: 1\nroots: []\n') }),
    );
    expect(unpinned.verdict).toBe('hardware-unanchored');
    expect(verifyAzureCvmEvidence(snpInput({ snpCerts: [] })).verdict).toBe('invalid');
    const rv = parseReferenceValues(
      `version: 1\nallowed_tee_types: [azure-cvm]\nsev_snp:\n  measurements: ["${'00'.repeat(48)}"]\n`,
    );
    expect(fails(verifyAzureCvmEvidence(snpInput({ referenceValues: rv })))).toEqual([
      'snp.measurement:MEASUREMENT_NOT_ALLOWED',
    ]);
    const tee = parseReferenceValues('version: 1\nallowed_tee_types: [tpm]\n');
    expect(fails(verifyAzureCvmEvidence(snpInput({ referenceValues: tee })))).toEqual([
      'policy.tee_type:TEE_TYPE_NOT_ALLOWED',
    ]);
  });
});

describe('Azure CVM chain, TDX variant (TD report in a v4 quote under a test PCK chain)', () => {
  it('the whole chain verifies', () => {
    const r = verifyAzureCvmEvidence(tdxInput());
    expect(fails(r)).toEqual([]);
    expect(r.verdict).toBe('hardware-attested');
    for (const id of [
      'azure.report_data',
      'evidence.signature',
      'evidence.anchor',
      'azure.td_quote_report_data',
      'azure.td_report',
      'azure.quote_signature',
      'evidence.binding',
    ])
      expect(get(r, id).status, id).toBe('pass');
  });

  it('each broken link is refused', () => {
    const otherTd = tdReport(hclReportData(rt), {
      ...td,
      rtmr: [td.rtmr[0], td.rtmr[1], Buffer.alloc(48, 0x77), td.rtmr[3]],
    });
    const cases: [string, Partial<RawAzureEvidence>, string][] = [
      [
        'TD quote body byte flipped (MRTD)',
        { tdxQuote: flip(tdQuote, 48 + 136) },
        'evidence.signature:TDX_QUOTE_SIGNATURE_INVALID',
      ],
      [
        'the quote is of another TD report',
        { tdxQuote: tdxQuote(tdx, otherTd) },
        'azure.td_report:HCL_TD_REPORT_MISMATCH',
      ],
      [
        'the HCL TD report RTMR differs from the quote',
        { hclReport: flip(tdxHcl, 32 + 720) },
        'azure.td_report:HCL_TD_REPORT_MISMATCH',
      ],
      [
        'runtime data byte flipped',
        { hclReport: flip(tdxHcl, 1236 + 40) },
        'azure.report_data:HCL_REPORT_DATA_MISMATCH',
      ],
      [
        'SNP certificates given for a TDX report',
        { snpCerts: [snp.vcek] },
        'azure.hardware:HCL_EVIDENCE_MISMATCH',
      ],
      [
        'quote under another key',
        { signature: rsassaQuoteSignature(attest, other.privateKey) },
        'azure.quote_signature:QUOTE_SIGNATURE_INVALID',
      ],
    ];
    for (const [what, over, want] of cases) {
      const r = verifyAzureCvmEvidence(tdxInput(over));
      expect(r.verdict, what).toBe('invalid');
      expect(fails(r), what).toContain(want);
    }
    // REPORTDATA of a TD quote made of a TD report with other runtime data
    const rd = tdReport(hclReportData(runtimeDataJson(other.publicKey)), td);
    expect(fails(verifyAzureCvmEvidence(tdxInput({ tdxQuote: tdxQuote(tdx, rd) })))).toContain(
      'azure.td_quote_report_data:EVIDENCE_BINDING_MISMATCH',
    );
  });

  it('without the TD quote the TD report is not signed: signed-only, never attested', () => {
    const { tdxQuote: _q, ...rest } = tdxInput();
    const r = verifyAzureCvmEvidence(rest);
    expect(get(r, 'evidence.signature')).toMatchObject({ status: 'absent', reason_code: 'NOT_SUPPLIED' });
    expect(r.verdict).toBe('signed-only');
  });
});

describe('verify-evidence --azure-hcl-report', () => {
  const dir = mkdtempSync(join(tmpdir(), 'cmcp-azure-cli-'));
  afterAll(() => rmSync(dir, { recursive: true, force: true }));
  const file = (name: string, data: Buffer | string) => {
    const p = join(dir, name);
    writeFileSync(p, data);
    return p;
  };
  const run = async (opts: Parameters<typeof runVerifyEvidence>[0]) => {
    let out = '';
    let err = '';
    const code = await runVerifyEvidence(opts, { stdout: (t) => (out += t), stderr: (t) => (err += t) });
    return { code, out, err };
  };

  it('runs the whole chain (SNP and TDX); a broken link exits 1, a wrong flag 2', async () => {
    const base = {
      azureHclReport: file('hcl-snp.bin', snpHcl),
      tpmQuote: file('attest.bin', attest),
      tpmSig: file('sig.bin', signature),
      nonce: nonce.toString('hex'),
      certs: [file('vcek.der', snp.vcek), file('ask.der', snp.ask), file('ark.der', snp.ark)],
      trustStore: file('ts-snp.yaml', snp.trustStoreYaml),
      at: NOW.toISOString(),
      json: true,
    };
    const ok = await run(base);
    expect(ok.err).toBe('');
    expect(ok.code).toBe(0);
    expect(JSON.parse(ok.out).verdict).toBe('hardware-attested');
    const bad = await run({ ...base, nonce: randomBytes(32).toString('hex') });
    expect(bad.code).toBe(1);
    const tdxRun = await run({
      ...base,
      certs: undefined,
      azureHclReport: file('hcl-tdx.bin', tdxHcl),
      tdxQuote: file('td-quote.bin', tdQuote),
      trustStore: file('ts-tdx.yaml', tdx.trustStoreYaml),
    });
    expect(JSON.parse(tdxRun.out).verdict).toBe('hardware-attested');
    for (const wrong of [
      { ak: file('ak.pem', ak.publicKey.export({ type: 'spki', format: 'pem' }) as string) },
      { snpReport: base.azureHclReport },
      { tpmSig: undefined },
      { eventLog: base.tpmQuote },
      { reportData: '00'.repeat(64) },
      { akCert: [base.tpmSig] },
    ]) {
      const r = await run({ ...base, ...wrong });
      expect(r.code, JSON.stringify(wrong)).toBe(2);
      expect(r.err).toMatch(/azure-hcl-report/);
    }
    // the files swapped: the quote given as the HCL report
    const swapped = await run({ ...base, azureHclReport: base.tpmQuote });
    expect(swapped.code).toBe(1);
    expect(JSON.parse(swapped.out).checks[1]).toMatchObject({
      id: 'azure.hcl_parse',
      reason_code: 'HCL_REPORT_MALFORMED',
    });
  });
});

/** Seeded PRNG (mulberry32), as test/verify-property.test.ts. */
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

/**
 * HCL report bytes nothing signs or binds: header version (4–8), request_type, status and
 * reserved (12–32), the IGVM request version (1220–1224); for TDX also the TD report's parts
 * a v4 quote body does not carry (REPORTMACSTRUCT type..hashes and MAC, TEE_TCB_INFO.VALID and
 * its tail, SERVTD_HASH, reserved). Cutting zero fill after report_size is the same report.
 * See docs/spec/evidence-azure.md.
 */
const UNBOUND_SNP: [number, number][] = [
  [4, 8],
  [12, 32],
  [1220, 1224],
];
const UNBOUND_TDX: [number, number][] = [
  ...UNBOUND_SNP,
  [32 + 1, 32 + 128],
  [32 + 192, 32 + 256],
  [32 + 256, 32 + 264],
  [32 + 384, 32 + 512],
  [32 + 912, 32 + 1024],
];

describe('mutation property: HCL reports (SNP and TDX chains)', () => {
  const N = Number(process.env.CMCP_PROPERTY_N ?? 2_000);
  const SEED = Number(process.env.CMCP_PROPERTY_SEED ?? 0x5eed1234);
  const run = (base: () => Buffer, input: (b: Buffer) => RawAzureEvidence, unbound: [number, number][]) => {
    const rnd = mulberry32(SEED);
    const int = (n: number) => Math.floor(rnd() * n);
    let accepted = 0;
    for (let i = 0; i < N; i++) {
      const b = Buffer.from(base());
      let lo: number;
      let hi: number;
      let bytes: Buffer;
      const r = rnd();
      if (r < 0.05) {
        lo = int(b.length);
        hi = b.length;
        bytes = b.subarray(0, lo);
      } else if (r < 0.1) {
        lo = b.length;
        hi = b.length;
        bytes = Buffer.concat([b, Buffer.from([1 + int(255)])]);
      } else {
        const n = 1 + int(4);
        lo = int(b.length);
        hi = lo;
        for (let k = 0; k < n; k++) {
          const off = Math.min(b.length - 1, lo + int(16));
          b[off] = ((b[off] as number) + 1 + int(255)) & 0xff;
          hi = Math.max(hi, off);
        }
        bytes = b;
      }
      const changed =
        bytes.length === b.length ? [...bytes.keys()].filter((k) => bytes[k] !== base()[k]) : [lo];
      if (changed.length === 0) continue;
      const rep = verifyAzureCvmEvidence(input(bytes));
      // the guarded entry turns an exception into a verify.internal check: none may appear
      expect(
        rep.checks.some((c) => c.id === 'verify.internal'),
        `seed ${SEED} iteration ${i}`,
      ).toBe(false);
      if (rep.verdict !== 'invalid') {
        // dropping zero fill after report_size leaves the same report
        const fillCut = bytes.length < b.length && lo >= b.readUInt32LE(8);
        const inside =
          fillCut ||
          (bytes.length === b.length && changed.every((k) => unbound.some(([a, z]) => k >= a && k < z)));
        expect(inside, `seed ${SEED} iteration ${i}: mutation at ${lo}..${hi} accepted`).toBe(true);
        accepted++;
      }
    }
    return accepted;
  };
  it(`${N} mutations of each HCL report: none accepted outside the unbound header fields, none crashes`, () => {
    const a = run(
      () => snpHcl,
      (b) => snpInput({ hclReport: b }),
      UNBOUND_SNP,
    );
    const t = run(
      () => tdxHcl,
      (b) => tdxInput({ hclReport: b }),
      UNBOUND_TDX,
    );
    // mutations that land only in the unbound fields are accepted; they are a small share
    expect(a + t).toBeLessThan(N / 5);
  });
});
