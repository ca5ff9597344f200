/**
 * TDX certification data as Intel's generators write it (issue 13 item 1): the type-5 PCK chain
 * size may count one NUL terminator after the last PEM block. Built from the real SPR E4 quote
 * (v4: its signatures are untouched, the PCK chain is not signed by the quote) and as a v5 quote
 * re-signed by a fresh attestation key around the same certification data.
 */
import { generateKeyPairSync, sign } from 'node:crypto';
import { readFileSync } from 'node:fs';
import type { CheckResult, TrustStore } from '@cmcp/verify';
import { loadTrustStore, verifySnpEvidence, verifyTdxEvidence } from '@cmcp/verify';
import { parseTdxQuote } from '@cmcp/verify/abi';
import { describe, expect, it } from 'vitest';
import { hasVectors, vectorPath } from './harness/vectors.js';

const AT = new Date('2023-07-01T01:00:00Z');
const quote = () => readFileSync(vectorPath('tdx', 'go-tdx-guest-spr-e4', 'tdx_prod_quote_SPR_E4.dat'));
const trust = (): TrustStore =>
  loadTrustStore(new URL('../packages/verify/attestation/trust-store.yaml', import.meta.url).pathname);
const get = (checks: readonly CheckResult[], id: string): CheckResult => {
  const c = checks.find((x) => x.id === id);
  if (!c) throw new Error(`no check ${id}`);
  return c;
};
const failed = (checks: readonly CheckResult[]) => checks.filter((c) => c.status === 'fail').map((c) => c.id);
const le32 = (n: number) => {
  const b = Buffer.alloc(4);
  b.writeUInt32LE(n);
  return b;
};
const le16 = (n: number) => {
  const b = Buffer.alloc(2);
  b.writeUInt16LE(n);
  return b;
};

/** Re-marshals a parsed quote's signature data with `tail` appended to the PCK chain PEM. */
function withPemTail(
  raw: Buffer,
  tail: Buffer,
  resign?: (signed: Buffer) => { signed: Buffer; sig: Buffer; key: Buffer },
): Buffer {
  const q = parseTdxQuote(raw);
  const pem = Buffer.concat([Buffer.from(q.pckChainPem, 'latin1'), tail]);
  const inner = Buffer.concat([le16(5), le32(pem.length), pem]);
  const qe = Buffer.concat([
    q.qeReport.raw,
    q.qeReportSignature,
    le16(q.qeAuthData.length),
    q.qeAuthData,
    inner,
  ]);
  const s = resign
    ? resign(q.signedRegion)
    : { signed: q.signedRegion, sig: q.signature, key: q.attestationKey };
  const sigData = Buffer.concat([s.sig, s.key, le16(6), le32(qe.length), qe]);
  return Buffer.concat([s.signed, le32(sigData.length), sigData]);
}

/** v4 header ‖ body → v5 header ‖ type 2 ‖ size 584 ‖ body, signed by a fresh P-256 key. */
function asV5(signed: Buffer) {
  const { privateKey, publicKey } = generateKeyPairSync('ec', { namedCurve: 'P-256' });
  const jwk = publicKey.export({ format: 'jwk' }) as { x: string; y: string };
  const header = Buffer.from(signed.subarray(0, 48));
  header.writeUInt16LE(5, 0);
  const v5 = Buffer.concat([header, le16(2), le32(584), signed.subarray(48)]);
  return {
    signed: v5,
    sig: sign('sha256', v5, { key: privateKey, dsaEncoding: 'ieee-p1363' }),
    key: Buffer.concat([Buffer.from(jwk.x, 'base64url'), Buffer.from(jwk.y, 'base64url')]),
  };
}

const run = (b: Buffer) => verifyTdxEvidence({ quote: b, trustStore: trust(), now: AT });

describe.skipIf(!hasVectors())('TDX PCK chain (certification data type 5) with a NUL terminator', () => {
  it('v4: the real quote with its type-5 size counting one trailing NUL verifies as hardware-attested', () => {
    const b = withPemTail(quote(), Buffer.from([0]));
    const q = parseTdxQuote(b);
    expect(q.pckChainNulTerminated).toBe(true);
    expect(q.pckChainPem).toBe(parseTdxQuote(quote()).pckChainPem);
    const r = run(b);
    expect(failed(r.checks)).toEqual([]);
    expect(r.verdict).toBe('hardware-attested');
    expect(get(r.checks, 'tdx.pck_certs_parse').detail).toMatch(/NUL-terminated/);
    // without the NUL the same re-marshalled quote verifies too, and says nothing of a NUL
    const plain = run(withPemTail(quote(), Buffer.alloc(0)));
    expect(plain.verdict).toBe('hardware-attested');
    expect(get(plain.checks, 'tdx.pck_certs_parse').detail).not.toMatch(/NUL/);
  });

  it('v4: anything else after the last PEM block is still refused (two NULs, a byte, NUL then text, a NUL inside)', () => {
    for (const tail of [Buffer.from([0, 0]), Buffer.from('x'), Buffer.from('\0x'), Buffer.from(' \0')]) {
      const r = run(withPemTail(quote(), tail));
      expect(get(r.checks, 'tdx.pck_certs_parse').reason_code, JSON.stringify(tail.toString())).toBe(
        'CERT_MALFORMED',
      );
      expect(r.verdict).toBe('invalid');
    }
  });

  it('v5: a v5 quote carrying the NUL-terminated chain parses it and anchors the PCK (fresh attestation key)', () => {
    const b = withPemTail(quote(), Buffer.from([0]), asV5);
    const q = parseTdxQuote(b);
    expect(q.version).toBe(5);
    expect(q.pckChainNulTerminated).toBe(true);
    const r = run(b);
    expect(get(r.checks, 'evidence.signature').status).toBe('pass');
    expect(get(r.checks, 'tdx.pck_certs_parse').status).toBe('pass');
    expect(get(r.checks, 'tdx.qe_report_signature').status).toBe('pass');
    expect(get(r.checks, 'evidence.anchor').status).toBe('pass');
    // the QE vouched for the real attestation key, not the fresh one
    expect(get(r.checks, 'tdx.qe_report_data').reason_code).toBe('TDX_QE_REPORT_DATA_MISMATCH');
    const bad = run(withPemTail(quote(), Buffer.from([0, 0]), asV5));
    expect(get(bad.checks, 'tdx.pck_certs_parse').reason_code).toBe('CERT_MALFORMED');
  });

  it("the last PEM block's '=' padding replaced by a base64 character (DER + one trailing byte) is CERT_MALFORMED, not an unpinned root", () => {
    const good = withPemTail(quote(), Buffer.from([0]));
    const at = good.lastIndexOf(Buffer.from('=\n-----END CERTIFICATE-----'));
    expect(at).toBeGreaterThan(0);
    for (const c of 'AQz09+/') {
      const b = Buffer.from(good);
      b[at] = c.charCodeAt(0);
      const r = run(b);
      expect(get(r.checks, 'tdx.pck_certs_parse').reason_code, c).toBe('CERT_MALFORMED');
      expect(r.verdict).toBe('invalid');
    }
  });

  it('the NUL-terminated quote truncated, with a flipped byte in each signed region (header, TD report, QE report), or given as another kind of evidence is refused', () => {
    const good = withPemTail(quote(), Buffer.from([0]));
    expect(get(run(good.subarray(0, good.length - 1)).checks, 'tdx.quote_parse').reason_code).toBe(
      'TDX_QUOTE_TRUNCATED',
    );
    const q = parseTdxQuote(good);
    for (const [what, at, id] of [
      ['header', 10, 'evidence.signature'],
      ['TD report', 48 + 300, 'evidence.signature'],
      ['QE report', 770 + 200, 'tdx.qe_report_signature'],
    ] as const) {
      const b = Buffer.from(good);
      b[at] = (b[at] ?? 0) ^ 1;
      expect(get(run(b).checks, id).status, what).toBe('fail');
    }
    expect(q.signedRegion.length).toBe(48 + 584);
    const asSnp = verifySnpEvidence({ report: good, certs: [], now: AT });
    expect(get(asSnp.checks, 'snp.report_parse').reason_code).toBe('SNP_REPORT_MALFORMED');
  });

  it('mutation: every byte of the certification data tail (last 400 bytes, NUL included) and 1500 random positions of the NUL-terminated quote, flipped, are rejected', () => {
    const good = withPemTail(quote(), Buffer.from([0]));
    const positions = new Set<number>();
    for (let i = good.length - 400; i < good.length; i++) positions.add(i);
    let seed = 0x51ee7;
    const rnd = () => {
      seed = (Math.imul(seed, 1103515245) + 12345) >>> 0;
      return seed / 2 ** 32;
    };
    while (positions.size < 1900) positions.add(Math.floor(rnd() * good.length));
    for (const at of positions) {
      const b = Buffer.from(good);
      b[at] = (b[at] ?? 0) ^ (1 + Math.floor(rnd() * 255));
      const r = run(b);
      expect(failed(r.checks).length, `byte ${at}`).toBeGreaterThan(0);
    }
  });
});
