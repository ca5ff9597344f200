/**
 * Azure confidential VM evidence (docs/spec/evidence-azure.md): the HCL report layout
 * (abi/azure) on the real SEV-SNP and TDX reports of test/vectors/azure-hcl, the REPORT_DATA →
 * runtime data → HCLAkPub link, and the negative cases its PROVENANCE lists. What the vectors
 * cannot prove (the report signatures; a quote under the report's own HCLAkPub) is tested on
 * a chain built and signed under a test root in test/verify-azure-chain.test.ts.
 */
import { createHash, createPublicKey } from 'node:crypto';
import { readFileSync } from 'node:fs';
import type { CheckResult } from '@cmcp/verify';
import { EMPTY_TRUST_STORE } from '@cmcp/verify';
import { AbiError, parseTdReportStruct } from '@cmcp/verify/abi';
import { describe, expect, it } from 'vitest';
import {
  parseHclChecks,
  parseHclReport,
  parseHclRuntimeData,
  verifyAzureHcl,
} from '../packages/verify/src/azure/index.js';
import { TPM_ALG, verifyTpmQuote } from '../packages/verify/src/tpm/index.js';
import { hasVectors, vectorPath } from './harness/vectors.js';

const read = (f: string) => readFileSync(vectorPath('azure-hcl', f));
const snpHcl = () => read('hcl-report-snp.bin');
const tdxHcl = () => read('hcl-report-tdx.bin');
const get = (checks: readonly CheckResult[], id: string): CheckResult => {
  const c = checks.find((x) => x.id === id);
  if (!c) throw new Error(`no check ${id} in ${checks.map((x) => x.id).join(', ')}`);
  return c;
};
const abiCode = (fn: () => unknown): string => {
  try {
    fn();
  } catch (err) {
    expect(err).toBeInstanceOf(AbiError);
    return (err as AbiError).code;
  }
  throw new Error('did not throw');
};
/** The vector quote: bincode Vec<u8> signature, Vec<u8> message, then PCRs. */
function vectorQuote(): { attest: Buffer; signature: Buffer } {
  const d = read('quote.bin');
  const sigLen = Number(d.readBigUInt64LE(0));
  const sig = d.subarray(8, 8 + sigLen);
  const msgLen = Number(d.readBigUInt64LE(8 + sigLen));
  const attest = d.subarray(16 + sigLen, 16 + sigLen + msgLen);
  // TPMT_SIGNATURE: RSASSA, SHA-256, TPM2B signature (TPM 2.0 Part 2 §11.3.4)
  const head = Buffer.alloc(6);
  head.writeUInt16BE(TPM_ALG.RSASSA, 0);
  head.writeUInt16BE(TPM_ALG.SHA256, 2);
  head.writeUInt16BE(sig.length, 4);
  return { attest: Buffer.from(attest), signature: Buffer.concat([head, sig]) };
}

describe.skipIf(!hasVectors())('HCL report layout on the real Azure reports', () => {
  it('SEV-SNP: header, SNP report, IGVM request data; REPORT_DATA[0:32] = SHA-256(runtime data)', () => {
    const h = parseHclReport(snpHcl());
    expect([h.version, h.reportSize, h.requestType, h.kind, h.reportType, h.hash]).toEqual([
      1,
      1819,
      2,
      'sev-snp',
      2,
      'sha256',
    ]);
    expect(h.hwReport).toHaveLength(1184);
    expect(h.runtimeData).toHaveLength(583);
    // the expected values come from PROVENANCE (python3 + openssl), not from this code
    expect(createHash('sha256').update(h.runtimeData).digest('hex')).toBe(
      '1d0a466a9eed975e88f889f7aed4abc1c97e87c4f43e5e3478c9a4a5853cbd7d',
    );
    expect(h.reportData.subarray(0, 32).toString('hex')).toBe(
      '1d0a466a9eed975e88f889f7aed4abc1c97e87c4f43e5e3478c9a4a5853cbd7d',
    );
    expect(h.hwReport.subarray(0x90, 0xc0).toString('hex')).toBe(
      '5a71e4ba7e0b83e44c8e853130a65557db0a7782cdb2d906c54b0bf5878202805ab159bfe0cf7d5749aa6f62b7094508',
    );
    const rt = parseHclRuntimeData(h.runtimeData);
    expect(rt.akPub.kty).toBe('RSA');
    expect(rt.akPub.n?.startsWith('tYVBpgABBOedWd2S')).toBe(true);
    expect(rt.vmConfiguration?.['secure-boot']).toBe(true);
    const p = parseHclChecks(snpHcl());
    expect(p.checks.map((c) => c.status)).toEqual(['pass', 'pass']);
    expect(p.akKey?.asymmetricKeyType).toBe('rsa');
  });

  it('TDX: header v2, a TD report (type 0x81) padded to the area, report type 4', () => {
    const h = parseHclReport(tdxHcl());
    expect([h.version, h.reportSize, h.kind, h.reportType, h.hwReport.length]).toEqual([
      2,
      2438,
      'tdx',
      4,
      1024,
    ]);
    expect(h.tdReport?.type).toBe(0x81);
    expect(h.reportData.subarray(0, 32).equals(createHash('sha256').update(h.runtimeData).digest())).toBe(
      true,
    );
    expect(parseHclRuntimeData(h.runtimeData).akPub.kty).toBe('RSA');
  });

  it('refuses each broken layout with its own code', () => {
    const b = snpHcl();
    const at = (off: number, v: number) => {
      const c = Buffer.from(b);
      c[off] = v;
      return c;
    };
    expect(abiCode(() => parseHclReport(b.subarray(0, 1000)))).toBe('HCL_REPORT_TRUNCATED');
    expect(abiCode(() => parseHclReport(b.subarray(0, 1818)))).toBe('HCL_REPORT_TRUNCATED');
    expect(abiCode(() => parseHclReport(at(0, 0x47)))).toBe('HCL_REPORT_MALFORMED'); // not 'HCLA'
    expect(abiCode(() => parseHclReport(at(4, 3)))).toBe('HCL_REPORT_MALFORMED'); // header version
    // variable_data_size (offset 1232) past the buffer, with data_size kept consistent
    const big = Buffer.from(b);
    big.writeUInt32LE(5000, 1232);
    big.writeUInt32LE(5020, 1216);
    expect(abiCode(() => parseHclReport(big))).toBe('HCL_REPORT_TRUNCATED');
    expect(abiCode(() => parseHclReport(at(1216, 0x5c)))).toBe('HCL_REPORT_MALFORMED'); // data_size ≠ 20 + n
    expect(abiCode(() => parseHclReport(at(2047, 1)))).toBe('HCL_REPORT_MALFORMED'); // fill not zero
    expect(abiCode(() => parseHclReport(at(1224, 4)))).toBe('HCL_REPORT_TYPE_MISMATCH'); // SNP area, says TDX
    expect(abiCode(() => parseHclReport(at(1224, 3)))).toBe('HCL_REPORT_TYPE_UNSUPPORTED');
    expect(abiCode(() => parseHclReport(at(1228, 9)))).toBe('HCL_HASH_TYPE_UNSUPPORTED');
    const t = Buffer.from(tdxHcl());
    t[1224] = 2; // a TD report area said to be SNP
    expect(abiCode(() => parseHclReport(t))).toBe('HCL_REPORT_TYPE_MISMATCH');
    // the wrong flag's file: an SNP report or a TPM quote given as an HCL report
    expect(abiCode(() => parseHclReport(b.subarray(32, 32 + 1184)))).toBe('HCL_REPORT_MALFORMED');
    expect(abiCode(() => parseHclReport(read('quote.bin')))).toBe('HCL_REPORT_MALFORMED');
  });

  it('runtime data: exactly one HCLAkPub with usable key members', () => {
    const j = (o: unknown) => Buffer.from(JSON.stringify(o));
    const ak = { kid: 'HCLAkPub', kty: 'RSA', e: 'AQAB', n: 'tYVB' };
    expect(parseHclRuntimeData(j({ keys: [ak] })).akPub.n).toBe('tYVB');
    for (const bad of [
      Buffer.from('{"keys":'),
      Buffer.from([0xff, 0xfe]),
      j([ak]),
      j({ keys: {} }),
      j({ keys: [] }),
      j({ keys: [ak, ak] }),
      j({ keys: [{ ...ak, kid: 'HCLEkPub' }] }),
      j({ keys: [{ ...ak, n: 'not base64url!' }] }),
      j({ keys: [{ ...ak, kty: 'oct' }] }),
    ])
      expect(abiCode(() => parseHclRuntimeData(bad))).toBe('HCL_RUNTIME_DATA_MALFORMED');
  });

  it('a flipped runtime data byte breaks REPORT_DATA; the vector quote does not chain to this report', () => {
    const q = vectorQuote();
    // the vector quote verifies on its own under akpub.pem …
    const alone = verifyTpmQuote({
      ...q,
      ak: { key: createPublicKey(read('akpub.pem')) },
      expectedExtraData: Buffer.from('challenge'),
    });
    expect(get(alone.checks, 'evidence.signature').status).toBe('pass');
    expect(get(alone.checks, 'evidence.binding').status).toBe('pass');
    const ctx = { trustStore: EMPTY_TRUST_STORE, at: new Date('2026-12-01T00:00:00Z') };
    // … but not under the report's HCLAkPub (another VM): the chain is refused
    const r = verifyAzureHcl({ hclReport: snpHcl(), ...q, expectedExtraData: Buffer.from('challenge') }, ctx);
    expect(get(r.checks, 'azure.report_data').status).toBe('pass');
    expect(get(r.checks, 'azure.quote_signature')).toMatchObject({
      status: 'fail',
      reason_code: 'QUOTE_SIGNATURE_INVALID',
    });
    // the report signature cannot be checked with the vector's VCEK (another chip): no certs → fails
    expect(get(r.checks, 'evidence.signature').status).toBe('fail');
    const flipped = Buffer.from(snpHcl());
    flipped.writeUInt8((flipped[1336] as number) ^ 0x01, 1336); // inside the JWK n, still valid JSON
    const f = verifyAzureHcl({ hclReport: flipped, ...q }, ctx);
    expect(get(f.checks, 'azure.report_data')).toMatchObject({
      status: 'fail',
      reason_code: 'HCL_REPORT_DATA_MISMATCH',
    });
    const tdx = verifyAzureHcl({ hclReport: tdxHcl(), ...q }, ctx);
    expect(get(tdx.checks, 'azure.report_data').status).toBe('pass');
    expect(get(tdx.checks, 'evidence.signature')).toMatchObject({
      status: 'absent',
      reason_code: 'NOT_SUPPLIED',
    });
  });
});

describe.skipIf(!hasVectors())('TDREPORT_STRUCT (abi/tdx/tdreport.ts)', () => {
  const td = () => Buffer.from(tdxHcl().subarray(32, 32 + 1024));
  it('parses the real TD report; refuses a short, long or non-TDX one', () => {
    const t = parseTdReportStruct(td());
    expect(t.type).toBe(0x81);
    expect(t.reportData.equals(parseHclReport(tdxHcl()).reportData)).toBe(true);
    expect(t.teeTcbInfo).toHaveLength(239);
    expect(abiCode(() => parseTdReportStruct(td().subarray(0, 1000)))).toBe('TDX_QUOTE_TRUNCATED');
    expect(abiCode(() => parseTdReportStruct(Buffer.concat([td(), Buffer.alloc(1)])))).toBe(
      'TDX_QUOTE_MALFORMED',
    );
    const other = td();
    other[0] = 0x00;
    expect(abiCode(() => parseTdReportStruct(other))).toBe('TDX_BODY_TYPE_UNSUPPORTED');
  });
});
