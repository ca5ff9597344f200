/**
 * TDX quote and collateral verification against test/vectors/tdx (go-tdx-guest-spr-e4,
 * collateral). Every expectation in the two PROVENANCE.md files is a test here. Fixed clock:
 * 2023-07-01T01:00:00Z (go-tdx-guest's test time; collateral and PCK chain all valid).
 */
import { verify as cryptoVerify, generateKeyPairSync, sign } from 'node:crypto';
import { readFileSync } from 'node:fs';
import type { CheckResult } from '@cmcp/verify';
import { loadTrustStore, parseReferenceValues, type TrustStore, verifyTdxEvidence } from '@cmcp/verify';
import { describe, expect, it } from 'vitest';
import {
  type TdxCollateral,
  topLevelMembers,
  verifyTdxCollateral,
} from '../packages/verify/src/tdx/collateral.js';
import {
  parseTdxQuote,
  pckExtension,
  type TdxInput,
  verifyTdxQuote,
} from '../packages/verify/src/tdx/index.js';
import { certsFromBytes, parseCert, pemBlocks, validateChain } from '../packages/verify/src/x509.js';
import { hasVectors, vectorPath } from './harness/vectors.js';

const AT = new Date('2023-07-01T01:00:00Z');
const Q = 'go-tdx-guest-spr-e4';
const C = 'collateral';
const read = (...p: string[]) => readFileSync(vectorPath('tdx', ...p));
const get = (checks: readonly CheckResult[], id: string): CheckResult => {
  const c = checks.find((x) => x.id === id);
  if (!c) throw new Error(`no check ${id}`);
  return c;
};
const failed = (checks: readonly CheckResult[]) => checks.filter((c) => c.status === 'fail').map((c) => c.id);
const trust = (): TrustStore =>
  loadTrustStore(new URL('../attestation/trust-store.yaml', import.meta.url).pathname);
const quote = () => read(Q, 'tdx_prod_quote_SPR_E4.dat');
const collateral = (): TdxCollateral => ({
  tcbInfo: read(C, 'sample_tcbInfo_response'),
  qeIdentity: read(C, 'sample_qeIdentity_response'),
  tcbSigningChain: read(C, 'tcb-signing-issuer-chain.pem'),
  pckCrl: read(C, 'pckcrl'),
  rootCrl: read(C, 'rootcrl.der'),
});
const input = (over: Partial<TdxInput> = {}): TdxInput => ({
  quote: quote(),
  trustStore: trust(),
  at: AT,
  ...over,
});
const REPORTDATA =
  '6c62dec1b8191749a31dab490be532a35944dea47caef1f980863993d9899545eb7406a38d1eed313b987a467dacead6f0c87a6d766c66f6f29f8acb281f1113';

describe.skipIf(!hasVectors())('tdx/go-tdx-guest-spr-e4', () => {
  const expected = () =>
    JSON.parse(read(Q, 'expected.json').toString('utf8')) as {
      quote: Record<string, unknown> & { rtmr: string[]; qe_report: Record<string, string | number> };
      verification: { pck_chain: { sha256: string }[] };
      pck_extensions: {
        fmspc: string;
        pceid: string;
        sgx_tcb_comp_svns: number[];
        pcesvn: number;
        cpusvn: string;
      };
    };

  it('header, TD report body and signature section parse to the stated values (L = 4299, 39 trailing bytes)', () => {
    const q = parseTdxQuote(quote());
    const e = expected().quote;
    expect(quote().length).toBe(4974);
    expect(q.version).toBe(4);
    expect(q.attKeyType).toBe(2);
    expect(q.teeType).toBe(0x81);
    expect([q.qeSvn, q.pceSvn]).toEqual([0, 0]);
    expect(q.qeVendorId.toString('hex')).toBe(e.qe_vendor_id);
    expect(q.userData.toString('hex')).toBe(e.user_data);
    const b = q.body;
    expect(b.teeTcbSvn.toString('hex')).toBe(e.tee_tcb_svn);
    expect(b.mrSeam.toString('hex')).toBe(e.mrseam);
    expect(b.mrSignerSeam.toString('hex')).toBe(e.mrsignerseam);
    expect(b.seamAttributes.toString('hex')).toBe(e.seam_attributes);
    expect(b.tdAttributes.toString('hex')).toBe('0000004000000000');
    expect(b.xfam.toString('hex')).toBe(e.xfam);
    expect(b.mrTd.toString('hex')).toBe(
      '6363b8043668a3ad953278e10389574d326c6749fb78aa810ecd9336923db86f22fc00b8dcd404bc10d5e119d7215cbb',
    );
    expect(
      quote()
        .subarray(0xb8, 0xb8 + 48)
        .equals(b.mrTd),
    ).toBe(true);
    expect(b.mrConfigId.toString('hex')).toBe(e.mrconfigid);
    expect(b.mrOwner.toString('hex')).toBe(e.mrowner);
    expect(b.mrOwnerConfig.toString('hex')).toBe(e.mrownerconfig);
    expect(b.rtmr.map((x) => x.toString('hex'))).toEqual(e.rtmr);
    expect(b.reportData.toString('hex')).toBe(REPORTDATA);
    expect(
      quote()
        .subarray(0x238, 0x238 + 64)
        .equals(b.reportData),
    ).toBe(true);
    expect(q.signedRegion.length).toBe(632);
    expect(q.end - 632 - 4).toBe(4299);
    expect(q.trailing).toBe(39);
    expect(quote().subarray(q.end).toString('latin1')).toBe('\nextra bytes(only for testing purpose)\n');
    expect(q.attestationKey.toString('hex')).toBe(e.attestation_key_xy);
    expect(q.qeAuthData.toString('hex')).toBe(e.qe_auth_data);
    const qe = q.qeReport;
    const eq = e.qe_report;
    expect(qe.cpuSvn.toString('hex')).toBe(eq.cpusvn);
    expect(qe.miscSelect).toBe(0);
    expect(qe.attributes.toString('hex')).toBe(eq.attributes);
    expect(qe.mrEnclave.toString('hex')).toBe(eq.mrenclave);
    expect(qe.mrSigner.toString('hex')).toBe(eq.mrsigner);
    expect(qe.isvProdId).toBe(2);
    expect(qe.isvSvn).toBe(4);
    expect(qe.reportData.toString('hex')).toBe(eq.report_data);
    expect(q.pckChainPem.length).toBe(3677);
    expect(pemBlocks(q.pckChainPem, 'CERTIFICATE', true)).toHaveLength(3);
  });

  it('checks 1–4: quote signature; QE REPORTDATA = SHA-256(att key ‖ auth) ‖ zeros; QE report signed by the PCK; PCK ← Platform CA ← Intel Root (pinned)', () => {
    const r = verifyTdxQuote(input());
    for (const id of [
      'tdx.quote_parse',
      'tdx.header',
      'tdx.attestation_key',
      'evidence.signature',
      'tdx.pck_certs_parse',
      'tdx.qe_report_signature',
      'tdx.qe_report_data',
      'evidence.anchor',
      'tdx.debug',
      'tdx.trailing_data',
    ]) {
      expect(get(r.checks, id).status, id).toBe('pass');
    }
    expect(r.anchors).toEqual([
      {
        name: 'Intel SGX Root CA',
        sha256_fingerprint:
          '44:A0:19:6B:2B:99:F8:89:B8:E1:49:E9:5B:80:7A:35:0E:74:24:96:43:99:E8:85:A7:CB:B8:CC:FA:B6:74:D3',
        used_for: 'tdx-pck',
      },
    ]);
    const certs = pemBlocks(parseTdxQuote(quote()).pckChainPem, 'CERTIFICATE', true).map(parseCert);
    expect(certs.map((c) => c.sha256)).toEqual(expected().verification.pck_chain.map((c) => c.sha256));
  });

  it('without collateral: hardware-attested, the QE identity checked against the trust store, the TCB status stated as not appraised', () => {
    const r = verifyTdxEvidence({
      quote: quote(),
      trustStore: trust(),
      now: AT,
      expectedReportData: Buffer.from(REPORTDATA, 'hex'),
    });
    expect(failed(r.checks)).toEqual([]);
    expect(r.verdict).toBe('hardware-attested');
    for (const id of ['tdx.tcb_info', 'tdx.crl', 'tdx.tcb_status']) {
      expect(get(r.checks, id)).toMatchObject({ status: 'absent', reason_code: 'COLLATERAL_NOT_SUPPLIED' });
    }
    expect(get(r.checks, 'tdx.qe_identity').status).toBe('pass');
    expect(get(r.checks, 'tdx.qe_identity').detail).toMatch(
      /Intel QE identity; ISVSVN and TCB status not appraised/,
    );
    expect(get(r.checks, 'tdx.tcb_status').detail).toMatch(/TCB status not appraised/);
    expect(r.notes.join(' ')).toMatch(/TCB status not appraised/);
    expect(r.notes.join(' ')).toMatch(/TCB status and revocation of the platform are unknown/);
    expect(r.notes.join(' ')).toMatch(/39 byte\(s\) after its declared signature data/);
  });

  it('PCK SGX extension: FMSPC 50806f000000, PCEID 0000, comps 3,3,2,2,2,1,0,2,0…, PCESVN 11, CPUSVN', () => {
    const pck = parseCert(pemBlocks(parseTdxQuote(quote()).pckChainPem)[0] as Buffer);
    const x = pckExtension(pck);
    const e = expected().pck_extensions;
    expect(x.fmspc.toString('hex')).toBe(e.fmspc);
    expect(x.pceId.toString('hex')).toBe(e.pceid);
    expect(x.tcbComponents).toEqual(e.sgx_tcb_comp_svns);
    expect(x.pceSvn).toBe(e.pcesvn);
    expect(x.cpuSvn.toString('hex')).toBe(e.cpusvn);
  });

  it('TD attributes: DEBUG (bit 0) off — only bit 30 is set', () => {
    const r = verifyTdxQuote(input());
    expect(get(r.checks, 'tdx.debug').status).toBe('pass');
    const b = quote();
    b[48 + 120] = (b[48 + 120] ?? 0) | 1;
    const d = verifyTdxQuote(input({ quote: b }));
    expect(get(d.checks, 'tdx.debug').reason_code).toBe('TDX_DEBUG_ENABLED');
    expect(get(d.checks, 'evidence.signature').status).toBe('fail');
  });

  it('negative: flip byte 0x238 (REPORTDATA[0]) → quote signature invalid', () => {
    const b = quote();
    b[0x238] = (b[0x238] ?? 0) ^ 0x01;
    expect(get(verifyTdxQuote(input({ quote: b })).checks, 'evidence.signature').reason_code).toBe(
      'TDX_QUOTE_SIGNATURE_INVALID',
    );
  });

  it('negative: flip byte 870 (inside the QE report at 770) → QE report signature invalid, although the quote signature still verifies', () => {
    const b = quote();
    b[870] = (b[870] ?? 0) ^ 0x01;
    const r = verifyTdxQuote(input({ quote: b }));
    expect(get(r.checks, 'evidence.signature').status).toBe('pass');
    expect(get(r.checks, 'tdx.qe_report_signature').reason_code).toBe('TDX_QE_REPORT_SIGNATURE_INVALID');
    expect(verifyTdxEvidence({ quote: b, trustStore: trust(), now: AT }).verdict).toBe('invalid');
  });

  it('negative: flip byte 705 (attestation key at 700) → not a P-256 point: rejected; the QE REPORTDATA binding fails too', () => {
    const b = quote();
    b[705] = (b[705] ?? 0) ^ 0x01;
    const r = verifyTdxQuote(input({ quote: b }));
    expect(get(r.checks, 'tdx.attestation_key').reason_code).toBe('TDX_ATTESTATION_KEY_INVALID');
    expect(get(r.checks, 'evidence.signature').status).toBe('fail');
    expect(get(r.checks, 'tdx.qe_report_data').reason_code).toBe('TDX_QE_REPORT_DATA_MISMATCH');
  });

  it('negative: expected REPORTDATA ≠ the value above → binding mismatch', () => {
    const other = Buffer.from(REPORTDATA, 'hex');
    other[63] = (other[63] ?? 0) ^ 1;
    const r = verifyTdxQuote(input({ expectedReportData: other }));
    expect(get(r.checks, 'evidence.binding').reason_code).toBe('EVIDENCE_BINDING_MISMATCH');
    expect(
      get(
        verifyTdxQuote(input({ expectedReportData: Buffer.from(REPORTDATA, 'hex') })).checks,
        'evidence.binding',
      ).status,
    ).toBe('pass');
  });

  it('negative: PCK chain checked at 2029-09-21 or later → leaf expired', () => {
    const r = verifyTdxQuote(input({ at: new Date('2029-09-21T00:00:00Z') }));
    expect(get(r.checks, 'evidence.anchor').reason_code).toBe('CERT_NOT_VALID_AT_TIME');
    expect(
      get(verifyTdxQuote(input({ at: new Date('2026-11-30T00:00:00Z') })).checks, 'evidence.anchor').status,
    ).toBe('pass');
  });

  it('negative: any trust anchor other than Intel SGX Root CA 44:A0:19:6B…74:D3 → rejected (not anchored)', () => {
    const others = trust().roots.filter((r) => r.purpose !== 'intel-sgx-root');
    const r = verifyTdxEvidence({ quote: quote(), trustStore: { version: 1, roots: others }, now: AT });
    expect(get(r.checks, 'evidence.anchor')).toMatchObject({
      status: 'absent',
      reason_code: 'ROOT_NOT_PINNED',
    });
    expect(r.verdict).toBe('hardware-unanchored');
    // the Intel root pinned under another purpose does not anchor a PCK
    const intel = trust().roots.find((r) => r.purpose === 'intel-sgx-root');
    if (!intel) throw new Error('no intel root');
    const wrong = verifyTdxQuote(
      input({ trustStore: { version: 1, roots: [{ ...intel, purpose: 'cloud-vtpm' }] } }),
    );
    expect(get(wrong.checks, 'evidence.anchor').reason_code).toBe('ANCHOR_PURPOSE_MISMATCH');
  });

  it('negative: honour L, not the file length — the 39 trailing bytes are outside the quote; refusing them is a policy choice', () => {
    const strict = parseReferenceValues('version: 1\ntdx:\n  reject_trailing_bytes: true\n');
    const r = verifyTdxQuote(input({ referenceValues: strict }));
    expect(get(r.checks, 'tdx.trailing_data').reason_code).toBe('TDX_TRAILING_BYTES');
    expect(get(r.checks, 'evidence.signature').status).toBe('pass');
    // the quote cut to its declared length verifies with no trailing-data note
    const q = parseTdxQuote(quote());
    const exact = verifyTdxEvidence({
      quote: quote().subarray(0, q.end),
      trustStore: trust(),
      now: AT,
      referenceValues: strict,
    });
    expect(failed(exact.checks)).toEqual([]);
    // a declared L larger than the data is truncation
    const b = quote().subarray(0, q.end - 1);
    expect(get(verifyTdxQuote(input({ quote: b })).checks, 'tdx.quote_parse').reason_code).toBe(
      'TDX_QUOTE_TRUNCATED',
    );
  });

  it('negative: reading the QE report without skipping the type-6 header (6 bytes early) fails the QE signature on this genuine quote', () => {
    const b = quote();
    const qeAt = 636 + 64 + 64 + 6; // 770
    const pck = parseCert(pemBlocks(parseTdxQuote(b).pckChainPem)[0] as Buffer);
    const sig = b.subarray(qeAt + 384, qeAt + 448);
    const verify = (at: number) =>
      cryptoVerify(
        'sha256',
        b.subarray(at, at + 384),
        { key: pck.node.publicKey, dsaEncoding: 'ieee-p1363' },
        sig,
      );
    expect(verify(qeAt)).toBe(true);
    expect(verify(qeAt - 6)).toBe(false);
  });

  it('reference values: MRTD / RTMR / MRCONFIGID pins pass with the quote values and fail otherwise', () => {
    const rv = parseReferenceValues(
      readFileSync(new URL('../attestation/reference-values.example.yaml', import.meta.url), 'utf8'),
    );
    const r = verifyTdxQuote(input({ referenceValues: rv }));
    for (const id of ['tdx.mrtd', 'tdx.rtmr', 'tdx.mrconfigid'])
      expect(get(r.checks, id).status, id).toBe('pass');
    const bad = parseReferenceValues(
      `version: 1\ntdx:\n  mrtd: ["${'11'.repeat(48)}"]\n  rtmr: { "1": ["${'22'.repeat(48)}"] }\n  mrconfigid: ["${'33'.repeat(48)}"]\n`,
    );
    const r2 = verifyTdxQuote(input({ referenceValues: bad }));
    for (const id of ['tdx.mrtd', 'tdx.rtmr', 'tdx.mrconfigid']) {
      expect(get(r2.checks, id).reason_code, id).toBe('MEASUREMENT_NOT_ALLOWED');
    }
    const none = verifyTdxQuote(input());
    for (const id of ['tdx.mrtd', 'tdx.rtmr', 'tdx.mrconfigid'])
      expect(get(none.checks, id).status).toBe('not-applicable');
  });

  it('mutation: flipping any single byte of the declared quote [0, 4935) is rejected (all positions); the 39 unsigned trailing bytes are not part of it', () => {
    const base = quote();
    const q = parseTdxQuote(base);
    const ts = trust();
    for (let i = 0; i < q.end; i++) {
      const b = Buffer.from(base);
      b[i] = (b[i] ?? 0) ^ 0xff;
      const r = verifyTdxQuote({ quote: b, trustStore: ts, at: AT });
      expect(failed(r.checks).length, `byte ${i}`).toBeGreaterThan(0);
    }
    for (let i = q.end; i < base.length; i++) {
      const b = Buffer.from(base);
      b[i] = (b[i] ?? 0) ^ 0xff;
      expect(
        failed(verifyTdxQuote({ quote: b, trustStore: ts, at: AT }).checks),
        `trailing byte ${i}`,
      ).toEqual([]);
    }
  });
});

describe('TDX quote v4/v5 dispatch (synthetic quotes)', () => {
  /** Builds a quote signed by a fresh attestation key; the certification data is a stub. */
  const build = (o: {
    version: number;
    teeType?: number;
    bodyType?: number;
    bodySize?: number;
    attKeyType?: number;
  }) => {
    const { privateKey, publicKey } = generateKeyPairSync('ec', { namedCurve: 'P-256' });
    const jwk = publicKey.export({ format: 'jwk' }) as { x: string; y: string };
    const header = Buffer.alloc(48);
    header.writeUInt16LE(o.version, 0);
    header.writeUInt16LE(o.attKeyType ?? 2, 2);
    header.writeUInt32LE(o.teeType ?? 0x81, 4);
    Buffer.from('939a7233f79c4ca9940a0db3957f0607', 'hex').copy(header, 12);
    const size = o.bodySize ?? (o.bodyType === 3 ? 648 : 584);
    const body = Buffer.alloc(size, 0x11);
    const desc = Buffer.alloc(6);
    desc.writeUInt16LE(o.bodyType ?? 2, 0);
    desc.writeUInt32LE(size, 2);
    const signed = o.version === 5 ? Buffer.concat([header, desc, body]) : Buffer.concat([header, body]);
    const sig = sign('sha256', signed, { key: privateKey, dsaEncoding: 'ieee-p1363' });
    const key = Buffer.concat([Buffer.from(jwk.x, 'base64url'), Buffer.from(jwk.y, 'base64url')]);
    const pem = Buffer.from('-----BEGIN CERTIFICATE-----\nAAAA\n-----END CERTIFICATE-----\n');
    const inner = Buffer.alloc(6);
    inner.writeUInt16LE(5, 0);
    inner.writeUInt32LE(pem.length, 2);
    const qe = Buffer.concat([Buffer.alloc(384), Buffer.alloc(64), Buffer.from([0, 0]), inner, pem]);
    const cert = Buffer.alloc(6);
    cert.writeUInt16LE(6, 0);
    cert.writeUInt32LE(qe.length, 2);
    const sigData = Buffer.concat([sig, key, cert, qe]);
    const len = Buffer.alloc(4);
    len.writeUInt32LE(sigData.length);
    return Buffer.concat([signed, len, sigData]);
  };
  const run = (b: Buffer) => verifyTdxQuote({ quote: b, trustStore: { version: 1, roots: [] }, at: AT });

  it('v4 with TEE type 0x81 → TD report 1.0; the quote signature covers header ‖ body', () => {
    const r = run(build({ version: 4 }));
    expect(get(r.checks, 'tdx.quote_parse').detail).toMatch(/v4, TD report 1\.0/);
    expect(get(r.checks, 'evidence.signature').status).toBe('pass');
  });

  it('v5 body type 2 (584) and 3 (648) → TD report 1.0 / 1.5; the signature covers header ‖ type ‖ size ‖ body', () => {
    const r2 = run(build({ version: 5, bodyType: 2 }));
    expect(get(r2.checks, 'tdx.quote_parse').detail).toMatch(/v5, TD report 1\.0/);
    expect(get(r2.checks, 'evidence.signature').status).toBe('pass');
    const r3 = run(build({ version: 5, bodyType: 3 }));
    expect(get(r3.checks, 'tdx.quote_parse').detail).toMatch(/v5, TD report 1\.5/);
    expect(get(r3.checks, 'evidence.signature').status).toBe('pass');
    const q = parseTdxQuote(build({ version: 5, bodyType: 3 }));
    expect(q.body.mrServiceTd?.length).toBe(48);
    expect(q.signedRegion.length).toBe(48 + 6 + 648);
  });

  it('unknown versions, body types, sizes, TEE types and key types are refused by declaration, not tried', () => {
    const code = (b: Buffer) => get(run(b).checks, 'tdx.quote_parse').reason_code;
    expect(code(build({ version: 3 }))).toBe('TDX_VERSION_UNSUPPORTED');
    expect(code(build({ version: 6 }))).toBe('TDX_VERSION_UNSUPPORTED');
    expect(code(build({ version: 5, bodyType: 1, bodySize: 384 }))).toBe('TDX_BODY_TYPE_UNSUPPORTED');
    expect(code(build({ version: 5, bodyType: 2, bodySize: 648 }))).toBe('TDX_QUOTE_MALFORMED');
    expect(code(build({ version: 4, teeType: 0 }))).toBe('TDX_BODY_TYPE_UNSUPPORTED');
    expect(code(build({ version: 4, attKeyType: 3 }))).toBe('TDX_ATT_KEY_TYPE_UNSUPPORTED');
    // a v5 quote relabelled as v4 is not re-parsed as v5
    const v5 = build({ version: 5, bodyType: 2 });
    v5.writeUInt16LE(4, 0);
    expect(get(run(v5).checks, 'evidence.signature').status).toBe('fail');
  });

  it('every check is reported (failed, never skipped) when the quote does not parse', () => {
    const r = run(Buffer.from([4, 0, 2, 0]));
    expect(get(r.checks, 'tdx.quote_parse').reason_code).toBe('TDX_QUOTE_TRUNCATED');
    for (const id of [
      'evidence.signature',
      'evidence.anchor',
      'tdx.qe_report_signature',
      'tdx.debug',
      'tdx.mrtd',
    ]) {
      expect(get(r.checks, id).status, id).toBe('fail');
    }
  });
});

describe.skipIf(!hasVectors())('tdx/collateral', () => {
  const pckPath = () => {
    const certs = pemBlocks(parseTdxQuote(quote()).pckChainPem).map(parseCert);
    const r = validateChain({
      certs,
      roots: trust().roots.filter((x) => x.purpose === 'intel-sgx-root'),
      at: AT,
      what: 'PCK',
      usedFor: 'tdx-pck',
    });
    if (r.status !== 'anchored') throw new Error('pck chain');
    return r.path;
  };
  const runCollateral = (col: TdxCollateral, at = AT, rvText?: string) => {
    const path = pckPath();
    return verifyTdxCollateral({
      quote: parseTdxQuote(quote()),
      pck: path[0],
      pckIssuer: path[1],
      pckRoot: path[2],
      collateral: col,
      trustStore: trust(),
      at,
      ...(rvText ? { referenceValues: parseReferenceValues(rvText) } : {}),
    });
  };

  it('issuer chains: TCB Signing (ec37d981…, to 2025-05-21) ← Root; PCK CRL issuer chain = Platform CA ← Root', () => {
    const tcb = certsFromBytes(read(C, 'tcb-signing-issuer-chain.pem'));
    expect(tcb.map((c) => c.sha256)).toEqual([
      'ec37d98107bfb7dab6ff8de4d4dda6fde30a6f50b0d7b03eefb5652f1e652969',
      '44a0196b2b99f889b8e149e95b807a350e7424964399e885a7cbb8ccfab674d3',
    ]);
    expect(tcb[0]?.notAfter.toISOString()).toBe('2025-05-21T10:50:10.000Z');
    const crlChain = certsFromBytes(read(C, 'pck-crl-issuer-chain.pem'));
    expect(crlChain.map((c) => c.sha256)).toEqual([
      '22eb770dca215b607b5ccfc21a672b1da5cc660b1ad0365020567979edcaa0e1',
      '44a0196b2b99f889b8e149e95b807a350e7424964399e885a7cbb8ccfab674d3',
    ]);
  });

  it('the signed JSON members are the exact body bytes: tcbInfo at 11..2256 (2245 B), enclaveIdentity at 19..480 (461 B)', () => {
    const tcb = read(C, 'sample_tcbInfo_response');
    const m = topLevelMembers(tcb);
    expect(m.get('tcbInfo')?.equals(tcb.subarray(11, 2256))).toBe(true);
    const qe = read(C, 'sample_qeIdentity_response');
    expect(topLevelMembers(qe).get('enclaveIdentity')?.equals(qe.subarray(19, 480))).toBe(true);
  });

  it('JSON signatures valid over the raw member bytes; CRL signatures valid; PCK not revoked; QE identity → UpToDate; FMSPC/PCEID/module match', () => {
    const r = runCollateral(collateral());
    for (const id of ['tdx.collateral_signer', 'tdx.tcb_info', 'tdx.qe_identity', 'tdx.crl']) {
      expect(get(r.checks, id).status, `${id}: ${get(r.checks, id).detail}`).toBe('pass');
    }
    expect(get(r.checks, 'tdx.qe_identity').detail).toMatch(/ISVSVN 4 → UpToDate/);
    expect(get(r.checks, 'tdx.crl').detail).toMatch(
      /PCK CRL valid \(44 entries\); PCK not revoked; Root CA CRL valid \(0 entries\)/,
    );
    expect(get(r.checks, 'tdx.tcb_info').detail).toMatch(/FMSPC 50806f000000, 2 levels/);
    expect(r.anchors.map((a) => a.used_for)).toEqual(['tdx-collateral']);
  });

  it('negative: TCB level for the SPR E4 quote → no matching level (never falls back to UpToDate or OutOfDate)', () => {
    const r = runCollateral(collateral());
    expect(get(r.checks, 'tdx.tcb_status')).toMatchObject({
      status: 'fail',
      reason_code: 'TCB_LEVEL_NOT_FOUND',
    });
    expect(r.tcbStatus).toBeUndefined();
    // even accepting every status, there is no level to accept
    const all = runCollateral(
      collateral(),
      AT,
      'version: 1\ntdx:\n  accepted_tcb_status: [UpToDate, OutOfDate]\n',
    );
    expect(get(all.checks, 'tdx.tcb_status').reason_code).toBe('TCB_LEVEL_NOT_FOUND');
    const e = verifyTdxEvidence({ quote: quote(), trustStore: trust(), now: AT, collateral: collateral() });
    expect(e.verdict).toBe('invalid');
  });

  it('negative: a byte change inside the signed tcbInfo (UpToDate → UpTodate) → signature invalid', () => {
    const t = Buffer.from(
      read(C, 'sample_tcbInfo_response').toString('latin1').replace('UpToDate', 'UpTodate'),
      'latin1',
    );
    const r = runCollateral({ ...collateral(), tcbInfo: t });
    expect(get(r.checks, 'tdx.tcb_info').reason_code).toBe('COLLATERAL_SIGNATURE_INVALID');
  });

  it('negative: parsing and re-serialising the JSON before verifying breaks the signature (sign and verify raw bytes)', () => {
    const t = read(C, 'sample_tcbInfo_response');
    const reserialised = Buffer.from(JSON.stringify(JSON.parse(t.toString('utf8')), null, 1));
    const r = runCollateral({ ...collateral(), tcbInfo: reserialised });
    expect(get(r.checks, 'tdx.tcb_info').reason_code).toBe('COLLATERAL_SIGNATURE_INVALID');
  });

  it('negative: verification at wall-clock time (2026) fails: TCB Signing certificate expired 2025-05-21, collateral stale', () => {
    const r = runCollateral(collateral(), new Date('2026-11-30T00:00:00Z'));
    expect(get(r.checks, 'tdx.collateral_signer').reason_code).toBe('CERT_NOT_VALID_AT_TIME');
    expect(get(r.checks, 'tdx.crl').reason_code).toBe('COLLATERAL_EXPIRED');
  });

  it('negative: at 2023-07-19 or later the TCB info has expired (nextUpdate 2023-07-18T08:42:58Z)', () => {
    const r = runCollateral(collateral(), new Date('2023-07-19T00:00:00Z'));
    expect(get(r.checks, 'tdx.tcb_info').reason_code).toBe('COLLATERAL_EXPIRED');
  });

  it('negative: a CRL whose unsigned outer signatureAlgorithm is altered (tag 0x30→0xB0, length 10→8) is malformed, though tbsCertList and its signature are intact', () => {
    const root = Buffer.from(read(C, 'rootcrl.der'));
    expect(root.subarray(207, 211).toString('hex')).toBe('300a0608'); // signatureAlgorithm SEQUENCE
    root[207] = 0xb0;
    const pck = Buffer.from(read(C, 'pckcrl'));
    expect(pck.subarray(2576, 2580).toString('hex')).toBe('300a0608');
    pck[2577] = 0x08;
    for (const [k, b] of [
      ['rootCrl', root],
      ['pckCrl', pck],
    ] as const) {
      const r = runCollateral({ ...collateral(), [k]: b });
      expect(get(r.checks, 'tdx.crl'), k).toMatchObject({
        status: 'fail',
        reason_code: 'COLLATERAL_MALFORMED',
      });
    }
  });

  it('negative: the PCK CRL verified under the Root CA instead of the Platform CA → invalid', () => {
    const r = runCollateral({ rootCrl: read(C, 'pckcrl') });
    expect(get(r.checks, 'tdx.crl').reason_code).toBe('COLLATERAL_SIGNATURE_INVALID');
  });

  it('negative: TCB info or QE identity without the TCB signing chain cannot be verified', () => {
    const { tcbSigningChain: _omit, ...rest } = collateral();
    const r = runCollateral(rest);
    expect(get(r.checks, 'tdx.collateral_signer').reason_code).toBe('CHAIN_NOT_SUPPLIED');
    expect(get(r.checks, 'tdx.tcb_info').status).toBe('fail');
  });

  it('mutation: flipping any byte of the signed tcbInfo member (2245 positions) or enclaveIdentity member (461) is rejected', () => {
    const path = pckPath();
    const parsed = parseTdxQuote(quote());
    const ts = trust();
    const signer = read(C, 'tcb-signing-issuer-chain.pem');
    const run = (col: TdxCollateral) =>
      verifyTdxCollateral({
        quote: parsed,
        pck: path[0],
        pckIssuer: path[1],
        pckRoot: path[2],
        collateral: col,
        trustStore: ts,
        at: AT,
      });
    const t = read(C, 'sample_tcbInfo_response');
    expect(get(run({ tcbInfo: t, tcbSigningChain: signer }).checks, 'tdx.tcb_info').status).toBe('pass');
    for (let i = 11; i < 2256; i++) {
      const b = Buffer.from(t);
      b[i] = (b[i] ?? 0) ^ 0x01;
      expect(
        get(run({ tcbInfo: b, tcbSigningChain: signer }).checks, 'tdx.tcb_info').status,
        `tcbInfo byte ${i}`,
      ).toBe('fail');
    }
    const q = read(C, 'sample_qeIdentity_response');
    expect(get(run({ qeIdentity: q, tcbSigningChain: signer }).checks, 'tdx.qe_identity').status).toBe(
      'pass',
    );
    for (let i = 19; i < 480; i++) {
      const b = Buffer.from(q);
      b[i] = (b[i] ?? 0) ^ 0x01;
      expect(
        get(run({ qeIdentity: b, tcbSigningChain: signer }).checks, 'tdx.qe_identity').status,
        `qe byte ${i}`,
      ).toBe('fail');
    }
  });
});
