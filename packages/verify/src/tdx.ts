/**
 * Intel TDX DCAP quote verification (Intel "TDX DCAP Quoting Library API", Appendix A:
 * quote format v4 and v5).
 *
 * Dispatch is on the declared version and body type, never by trial:
 * - v4: header (48) ‖ body chosen by TEE type (0x81 ⇒ TD report 1.0, 584 bytes); signed
 *   region = header ‖ body.
 * - v5: header (48) ‖ body type u16 ‖ body size u32 ‖ body (type 2 ⇒ TD report 1.0, 584
 *   bytes; type 3 ⇒ TD report 1.5, 648 bytes); signed region = header ‖ type ‖ size ‖ body.
 * Then the signature data length L (u32) and L bytes: ECDSA P-256 signature (r‖s), the
 * attestation key (X‖Y), and certification data of type 6 (QE report, its signature by the
 * PCK, QE authentication data and, nested, type 5: the PCK chain as PEM). Every size is
 * honoured exactly; bytes after 4 + L are reported (and refused if the policy says so).
 */
import { createHash, createPublicKey, verify as cryptoVerify, type KeyObject } from 'node:crypto';
import * as asn1js from 'asn1js';
import {
  type AnchorUsed,
  type CheckResult,
  check,
  fail,
  HARDWARE_ANCHOR_CHECK,
  HARDWARE_BINDING_CHECK,
  HARDWARE_SIGNATURE_CHECK,
  pass,
  type ReasonCode,
} from './result.js';
import { type TdxCollateral, verifyTdxCollateral } from './tdx-collateral.js';
import { type ReferenceValues, rootsFor, type TrustStore } from './trust.js';
import { type Cert, CertError, extensionValue, parseCert, pemBlocks, validateChain } from './x509.js';

/** TEE type of TDX in the quote header. */
export const TDX_TEE_TYPE = 0x81;
/** Intel's QE vendor id. */
export const INTEL_QE_VENDOR_ID = '939a7233f79c4ca9940a0db3957f0607';
const TD10_SIZE = 584;
const TD15_SIZE = 648;
const QE_REPORT_SIZE = 384;

/** A quote that cannot be used; `code` is a stable reason. */
export class TdxParseError extends Error {
  constructor(
    readonly code: ReasonCode,
    message: string,
  ) {
    super(message);
    this.name = 'TdxParseError';
  }
}

/** TD report body (TDX 1.0 fields, plus the 1.5 fields for body type 3). */
export interface TdReport {
  teeTcbSvn: Buffer;
  mrSeam: Buffer;
  mrSignerSeam: Buffer;
  seamAttributes: Buffer;
  tdAttributes: Buffer;
  xfam: Buffer;
  mrTd: Buffer;
  mrConfigId: Buffer;
  mrOwner: Buffer;
  mrOwnerConfig: Buffer;
  rtmr: [Buffer, Buffer, Buffer, Buffer];
  reportData: Buffer;
  teeTcbSvn2?: Buffer;
  mrServiceTd?: Buffer;
}

/** SGX enclave report of the Quoting Enclave (384 bytes). */
export interface QeReport {
  cpuSvn: Buffer;
  miscSelect: number;
  attributes: Buffer;
  mrEnclave: Buffer;
  mrSigner: Buffer;
  isvProdId: number;
  isvSvn: number;
  reportData: Buffer;
  /** The 384 signed bytes. */
  raw: Buffer;
}

/** A parsed TDX quote. */
export interface TdxQuote {
  version: 4 | 5;
  attKeyType: number;
  teeType: number;
  qeSvn: number;
  pceSvn: number;
  qeVendorId: Buffer;
  userData: Buffer;
  /** 2 (TD report 1.0) or 3 (TD report 1.5). */
  bodyType: 2 | 3;
  body: TdReport;
  /** The bytes the attestation key signed. */
  signedRegion: Buffer;
  signature: Buffer;
  attestationKey: Buffer;
  qeReport: QeReport;
  qeReportSignature: Buffer;
  qeAuthData: Buffer;
  /** PEM text of the PCK chain (certification data type 5). */
  pckChainPem: string;
  /** Offset just past the declared signature data. */
  end: number;
  /** Bytes after `end`. */
  trailing: number;
}

class LeReader {
  off: number;
  constructor(
    private readonly b: Buffer,
    start = 0,
    private readonly limit = b.length,
  ) {
    this.off = start;
  }
  need(n: number, what: string): void {
    if (this.off + n > this.limit) {
      throw new TdxParseError('TDX_QUOTE_TRUNCATED', `${what} needs ${n} bytes at offset ${this.off}`);
    }
  }
  u16(what: string): number {
    this.need(2, what);
    const v = this.b.readUInt16LE(this.off);
    this.off += 2;
    return v;
  }
  u32(what: string): number {
    this.need(4, what);
    const v = this.b.readUInt32LE(this.off);
    this.off += 4;
    return v;
  }
  bytes(n: number, what: string): Buffer {
    this.need(n, what);
    const v = Buffer.from(this.b.subarray(this.off, this.off + n));
    this.off += n;
    return v;
  }
}

function parseTdReport(b: Buffer, type: 2 | 3): TdReport {
  const f = (off: number, n: number) => Buffer.from(b.subarray(off, off + n));
  const body: TdReport = {
    teeTcbSvn: f(0, 16),
    mrSeam: f(16, 48),
    mrSignerSeam: f(64, 48),
    seamAttributes: f(112, 8),
    tdAttributes: f(120, 8),
    xfam: f(128, 8),
    mrTd: f(136, 48),
    mrConfigId: f(184, 48),
    mrOwner: f(232, 48),
    mrOwnerConfig: f(280, 48),
    rtmr: [f(328, 48), f(376, 48), f(424, 48), f(472, 48)],
    reportData: f(520, 64),
  };
  if (type === 3) {
    body.teeTcbSvn2 = f(584, 16);
    body.mrServiceTd = f(600, 48);
  }
  return body;
}

function parseQeReport(raw: Buffer): QeReport {
  return {
    cpuSvn: Buffer.from(raw.subarray(0, 16)),
    miscSelect: raw.readUInt32LE(16),
    attributes: Buffer.from(raw.subarray(48, 64)),
    mrEnclave: Buffer.from(raw.subarray(64, 96)),
    mrSigner: Buffer.from(raw.subarray(128, 160)),
    isvProdId: raw.readUInt16LE(256),
    isvSvn: raw.readUInt16LE(258),
    reportData: Buffer.from(raw.subarray(320, 384)),
    raw,
  };
}

/**
 * Parses a TDX quote v4 or v5 exactly (see the module comment).
 * @throws TdxParseError TDX_VERSION_UNSUPPORTED, TDX_BODY_TYPE_UNSUPPORTED,
 *   TDX_ATT_KEY_TYPE_UNSUPPORTED, TDX_CERT_DATA_UNSUPPORTED, TDX_QUOTE_TRUNCATED, TDX_QUOTE_MALFORMED
 */
export function parseTdxQuote(bytes: Uint8Array): TdxQuote {
  const b = Buffer.from(bytes);
  const r = new LeReader(b);
  const version = r.u16('header.version');
  if (version !== 4 && version !== 5) {
    throw new TdxParseError('TDX_VERSION_UNSUPPORTED', `quote version ${version} is not 4 or 5`);
  }
  const attKeyType = r.u16('header.att_key_type');
  if (attKeyType !== 2) {
    throw new TdxParseError(
      'TDX_ATT_KEY_TYPE_UNSUPPORTED',
      `attestation key type ${attKeyType} is not 2 (ECDSA P-256)`,
    );
  }
  const teeType = r.u32('header.tee_type');
  if (teeType !== TDX_TEE_TYPE) {
    throw new TdxParseError(
      'TDX_BODY_TYPE_UNSUPPORTED',
      `TEE type 0x${teeType.toString(16)} is not TDX (0x81)`,
    );
  }
  const qeSvn = r.u16('header.qe_svn');
  const pceSvn = r.u16('header.pce_svn');
  const qeVendorId = r.bytes(16, 'header.qe_vendor_id');
  const userData = r.bytes(20, 'header.user_data');
  let bodyType: 2 | 3;
  let bodySize: number;
  if (version === 4) {
    bodyType = 2;
    bodySize = TD10_SIZE;
  } else {
    const t = r.u16('body.type');
    const size = r.u32('body.size');
    if (t !== 2 && t !== 3)
      throw new TdxParseError('TDX_BODY_TYPE_UNSUPPORTED', `v5 body type ${t} is not a TD report (2, 3)`);
    bodyType = t;
    bodySize = t === 2 ? TD10_SIZE : TD15_SIZE;
    if (size !== bodySize) {
      throw new TdxParseError(
        'TDX_QUOTE_MALFORMED',
        `v5 body type ${t} has size ${size}, expected ${bodySize}`,
      );
    }
  }
  const body = parseTdReport(r.bytes(bodySize, 'body'), bodyType);
  const signedRegion = Buffer.from(b.subarray(0, r.off));
  const sigLen = r.u32('signature_data_len');
  const end = r.off + sigLen;
  if (end > b.length) {
    throw new TdxParseError(
      'TDX_QUOTE_TRUNCATED',
      `signature data of ${sigLen} bytes runs past the ${b.length}-byte quote`,
    );
  }
  const s = new LeReader(b, r.off, end);
  const signature = s.bytes(64, 'signature');
  const attestationKey = s.bytes(64, 'attestation_key');
  const certType = s.u16('certification_data.type');
  const certSize = s.u32('certification_data.size');
  if (certType !== 6) {
    throw new TdxParseError(
      'TDX_CERT_DATA_UNSUPPORTED',
      `certification data type ${certType} is not 6 (QE report)`,
    );
  }
  if (s.off + certSize !== end) {
    throw new TdxParseError(
      'TDX_QUOTE_MALFORMED',
      `certification data size ${certSize} does not fill the signature data exactly`,
    );
  }
  const q = new LeReader(b, s.off, end);
  const qeRaw = q.bytes(QE_REPORT_SIZE, 'qe_report');
  const qeReportSignature = q.bytes(64, 'qe_report_signature');
  const authSize = q.u16('qe_auth_data.size');
  const qeAuthData = q.bytes(authSize, 'qe_auth_data');
  const innerType = q.u16('qe_certification_data.type');
  const innerSize = q.u32('qe_certification_data.size');
  if (innerType !== 5) {
    throw new TdxParseError(
      'TDX_CERT_DATA_UNSUPPORTED',
      `QE certification data type ${innerType} is not 5 (PCK chain)`,
    );
  }
  if (q.off + innerSize !== end) {
    throw new TdxParseError(
      'TDX_QUOTE_MALFORMED',
      `PCK chain size ${innerSize} does not fill the certification data exactly`,
    );
  }
  const pem = q.bytes(innerSize, 'pck_chain');
  return {
    version,
    attKeyType,
    teeType,
    qeSvn,
    pceSvn,
    qeVendorId,
    userData,
    bodyType,
    body,
    signedRegion,
    signature,
    attestationKey,
    qeReport: parseQeReport(qeRaw),
    qeReportSignature,
    qeAuthData,
    pckChainPem: pem.toString('latin1'),
    end,
    trailing: b.length - end,
  };
}

/** The attestation key as a node P-256 key. @throws TdxParseError TDX_ATTESTATION_KEY_INVALID */
export function attestationKeyObject(xy: Uint8Array): KeyObject {
  try {
    return createPublicKey({
      key: {
        kty: 'EC',
        crv: 'P-256',
        x: Buffer.from(xy.subarray(0, 32)).toString('base64url'),
        y: Buffer.from(xy.subarray(32, 64)).toString('base64url'),
      },
      format: 'jwk',
    });
  } catch {
    throw new TdxParseError('TDX_ATTESTATION_KEY_INVALID', 'the attestation key is not a point on P-256');
  }
}

/** Intel SGX PCK certificate extension (OID 1.2.840.113741.1.13.1). */
export interface PckExtension {
  fmspc: Buffer;
  pceId: Buffer;
  /** SGX TCB component SVNs 1..16. */
  tcbComponents: number[];
  pceSvn: number;
  cpuSvn: Buffer;
}

const SGX_EXT = '1.2.840.113741.1.13.1';

function asSeq(x: asn1js.AsnType | undefined, what: string): asn1js.AsnType[] {
  if (!(x instanceof asn1js.Sequence)) throw new CertError('CERT_MALFORMED', `${what} is not a SEQUENCE`);
  return x.valueBlock.value as asn1js.AsnType[];
}

/** Reads the SGX extension of a PCK certificate. @throws CertError CERT_MALFORMED */
export function pckExtension(pck: Cert): PckExtension {
  const v = extensionValue(pck, SGX_EXT);
  if (!v) throw new CertError('CERT_MALFORMED', 'the PCK certificate has no SGX extension');
  const parsed = asn1js.fromBER(new Uint8Array(v));
  if (parsed.offset !== v.length) throw new CertError('CERT_MALFORMED', 'SGX extension is not DER');
  const items = new Map<string, asn1js.AsnType>();
  for (const item of asSeq(parsed.result, 'SGX extension')) {
    const [oid, val] = asSeq(item, 'SGX extension item');
    if (!(oid instanceof asn1js.ObjectIdentifier) || !val)
      throw new CertError('CERT_MALFORMED', 'SGX extension item');
    items.set(oid.valueBlock.toString(), val);
  }
  const octets = (oid: string, n: number): Buffer => {
    const x = items.get(oid);
    if (!(x instanceof asn1js.OctetString))
      throw new CertError('CERT_MALFORMED', `SGX ${oid} is not an OCTET STRING`);
    const buf = Buffer.from(x.valueBlock.valueHexView);
    if (buf.length !== n) throw new CertError('CERT_MALFORMED', `SGX ${oid} is not ${n} bytes`);
    return buf;
  };
  const tcb = new Map<string, asn1js.AsnType>();
  for (const item of asSeq(items.get(`${SGX_EXT}.2`), 'SGX TCB')) {
    const [oid, val] = asSeq(item, 'SGX TCB item');
    if (!(oid instanceof asn1js.ObjectIdentifier) || !val)
      throw new CertError('CERT_MALFORMED', 'SGX TCB item');
    tcb.set(oid.valueBlock.toString(), val);
  }
  const int = (oid: string): number => {
    const x = tcb.get(oid);
    if (!(x instanceof asn1js.Integer)) throw new CertError('CERT_MALFORMED', `SGX ${oid} is not an INTEGER`);
    return x.valueBlock.valueDec;
  };
  const comps: number[] = [];
  for (let i = 1; i <= 16; i++) comps.push(int(`${SGX_EXT}.2.${i}`));
  const cpu = tcb.get(`${SGX_EXT}.2.18`);
  if (!(cpu instanceof asn1js.OctetString)) throw new CertError('CERT_MALFORMED', 'SGX CPUSVN');
  return {
    fmspc: octets(`${SGX_EXT}.4`, 6),
    pceId: octets(`${SGX_EXT}.3`, 2),
    tcbComponents: comps,
    pceSvn: int(`${SGX_EXT}.2.17`),
    cpuSvn: Buffer.from(cpu.valueBlock.valueHexView),
  };
}

/** PCK end-entity profile: CN "Intel SGX PCK Certificate" and an SGX extension. */
function pckLeafProblem(leaf: Cert): string | null {
  if (!/CN=Intel SGX PCK Certificate(\n|,|$)/.test(leaf.node.subject))
    return 'the PCK leaf is not an Intel SGX PCK Certificate';
  if (!extensionValue(leaf, SGX_EXT)) return 'the PCK leaf has no SGX extension';
  return null;
}

/** Input of {@link verifyTdxQuote}. */
export interface TdxInput {
  quote: Uint8Array;
  /** Expected REPORTDATA (64 bytes), compared exactly; null/undefined ⇒ not-applicable. */
  expectedReportData?: Uint8Array | null;
  referenceValues?: ReferenceValues;
  trustStore: TrustStore;
  at: Date;
  /** Intel PCS collateral; undefined ⇒ the collateral checks are `absent`. */
  collateral?: TdxCollateral;
}

/** Result of {@link verifyTdxQuote}. */
export interface TdxResult {
  checks: CheckResult[];
  anchors: AnchorUsed[];
  notes: string[];
  quote?: TdxQuote;
  tcbStatus?: string;
}

function errInfo(err: unknown, fallback: ReasonCode): { code: ReasonCode; detail: string } {
  if (err instanceof TdxParseError || err instanceof CertError)
    return { code: err.code, detail: err.message };
  return { code: fallback, detail: (err instanceof Error ? err.message : String(err)).slice(0, 120) };
}

/**
 * Verifies a TDX quote and returns one check per property, in this order (ids stable):
 * `tdx.quote_parse`, `tdx.header`, `tdx.attestation_key`, `evidence.signature`,
 * `tdx.pck_certs_parse`, `tdx.qe_report_signature`, `tdx.qe_report_data`, `evidence.anchor`,
 * `evidence.binding`, `tdx.debug`, `tdx.mrtd`, `tdx.rtmr`, `tdx.mrconfigid`, `tdx.trailing_data`,
 * then the collateral checks of {@link verifyTdxCollateral} (`tdx.collateral_signer`,
 * `tdx.tcb_info`, `tdx.qe_identity`, `tdx.crl`, `tdx.tcb_status`).
 */
export function verifyTdxQuote(input: TdxInput): TdxResult {
  const checks: CheckResult[] = [];
  const out: TdxResult = { checks, anchors: [], notes: [] };
  const rv = input.referenceValues?.tdx;
  const dep = (id: string, what = 'the quote did not parse') => fail(id, 'DEPENDENCY_FAILED', what);

  let q: TdxQuote | undefined;
  try {
    q = parseTdxQuote(input.quote);
    out.quote = q;
    checks.push(
      pass(
        'tdx.quote_parse',
        `quote v${q.version}, TD report ${q.bodyType === 2 ? '1.0' : '1.5'}, signature data ${q.end - q.signedRegion.length - 4} bytes`,
      ),
    );
  } catch (err) {
    const e = errInfo(err, 'TDX_QUOTE_MALFORMED');
    checks.push(fail('tdx.quote_parse', e.code, e.detail));
  }
  if (!q) {
    for (const id of [
      'tdx.header',
      'tdx.attestation_key',
      HARDWARE_SIGNATURE_CHECK,
      'tdx.pck_certs_parse',
      'tdx.qe_report_signature',
      'tdx.qe_report_data',
      HARDWARE_ANCHOR_CHECK,
      HARDWARE_BINDING_CHECK,
      'tdx.debug',
      'tdx.mrtd',
      'tdx.rtmr',
      'tdx.mrconfigid',
      'tdx.trailing_data',
      'tdx.collateral_signer',
      'tdx.tcb_info',
      'tdx.qe_identity',
      'tdx.crl',
      'tdx.tcb_status',
    ]) {
      checks.push(
        input.collateral === undefined &&
          ['tdx.collateral_signer', 'tdx.tcb_info', 'tdx.qe_identity', 'tdx.crl', 'tdx.tcb_status'].includes(
            id,
          )
          ? check(id, 'absent', 'COLLATERAL_NOT_SUPPLIED', 'no collateral supplied')
          : dep(id),
      );
    }
    return out;
  }
  const vendor = q.qeVendorId.toString('hex');
  checks.push(
    vendor === INTEL_QE_VENDOR_ID
      ? pass(
          'tdx.header',
          `TDX (0x81), ECDSA P-256 attestation key, Intel QE, QE SVN ${q.qeSvn}, PCE SVN ${q.pceSvn}`,
        )
      : fail('tdx.header', 'TDX_QUOTE_MALFORMED', `QE vendor id ${vendor} is not Intel's`),
  );

  // attestation key and quote signature
  let attKey: KeyObject | undefined;
  try {
    attKey = attestationKeyObject(q.attestationKey);
    checks.push(pass('tdx.attestation_key', 'the attestation key is a P-256 point'));
  } catch (err) {
    const e = errInfo(err, 'TDX_ATTESTATION_KEY_INVALID');
    checks.push(fail('tdx.attestation_key', e.code, e.detail));
  }
  if (!attKey) checks.push(dep(HARDWARE_SIGNATURE_CHECK, 'the attestation key is invalid'));
  else {
    const ok = cryptoVerify(
      'sha256',
      q.signedRegion,
      { key: attKey, dsaEncoding: 'ieee-p1363' },
      q.signature,
    );
    checks.push(
      ok
        ? pass(
            HARDWARE_SIGNATURE_CHECK,
            `ECDSA P-256 quote signature over bytes [0, ${q.signedRegion.length}) verifies under the attestation key`,
          )
        : fail(
            HARDWARE_SIGNATURE_CHECK,
            'TDX_QUOTE_SIGNATURE_INVALID',
            `the quote signature over bytes [0, ${q.signedRegion.length}) does not verify`,
          ),
    );
  }

  // PCK chain, QE report
  let pckCerts: Cert[] | undefined;
  try {
    pckCerts = pemBlocks(q.pckChainPem, 'CERTIFICATE', true).map(parseCert);
    checks.push(pass('tdx.pck_certs_parse', `PCK chain: ${pckCerts.length} certificate(s)`));
  } catch (err) {
    const e = errInfo(err, 'CERT_MALFORMED');
    checks.push(fail('tdx.pck_certs_parse', e.code, e.detail));
  }
  const pck = pckCerts?.[0];
  if (!pck) checks.push(dep('tdx.qe_report_signature', 'the PCK chain did not parse'));
  else {
    let ok = false;
    try {
      ok = cryptoVerify(
        'sha256',
        q.qeReport.raw,
        { key: pck.node.publicKey, dsaEncoding: 'ieee-p1363' },
        q.qeReportSignature,
      );
    } catch {
      ok = false;
    }
    checks.push(
      ok
        ? pass('tdx.qe_report_signature', 'the QE report signature verifies under the PCK certificate key')
        : fail(
            'tdx.qe_report_signature',
            'TDX_QE_REPORT_SIGNATURE_INVALID',
            'the QE report signature does not verify under the PCK key',
          ),
    );
  }
  {
    const h = createHash('sha256').update(q.attestationKey).update(q.qeAuthData).digest();
    const want = Buffer.concat([h, Buffer.alloc(32)]);
    checks.push(
      q.qeReport.reportData.equals(want)
        ? pass(
            'tdx.qe_report_data',
            'QE REPORTDATA = SHA-256(attestation key ‖ QE auth data) ‖ 32 zero bytes',
          )
        : fail(
            'tdx.qe_report_data',
            'TDX_QE_REPORT_DATA_MISMATCH',
            'QE REPORTDATA does not bind this attestation key',
          ),
    );
  }
  let pckPath: Cert[] | undefined;
  if (!pckCerts) checks.push(dep(HARDWARE_ANCHOR_CHECK, 'the PCK chain did not parse'));
  else {
    const roots = rootsFor(input.trustStore, ['intel-sgx-root']);
    const r = validateChain({
      certs: pckCerts,
      roots,
      otherRoots: input.trustStore.roots.filter((x) => !roots.includes(x)),
      at: input.at,
      leafProfile: pckLeafProblem,
      what: 'PCK',
      usedFor: 'tdx-pck',
    });
    if (r.status === 'anchored') {
      out.anchors.push(r.anchor);
      pckPath = r.path;
      checks.push(pass(HARDWARE_ANCHOR_CHECK, `PCK chain ${r.detail}`));
    } else if (r.status === 'unpinned') {
      checks.push(
        r.code === 'ANCHOR_PURPOSE_MISMATCH'
          ? fail(HARDWARE_ANCHOR_CHECK, r.code, `PCK chain ${r.detail}`)
          : check(HARDWARE_ANCHOR_CHECK, 'absent', r.code, `PCK chain ${r.detail}`),
      );
    } else checks.push(fail(HARDWARE_ANCHOR_CHECK, r.code, `PCK chain: ${r.detail}`));
  }

  // binding and TD policy
  if (input.expectedReportData == null) {
    checks.push(
      check(HARDWARE_BINDING_CHECK, 'not-applicable', 'NOT_SUPPLIED', 'no expected REPORTDATA supplied'),
    );
  } else {
    const want = Buffer.from(input.expectedReportData);
    checks.push(
      want.length === 64 && q.body.reportData.equals(want)
        ? pass(HARDWARE_BINDING_CHECK, 'REPORTDATA equals the expected 64 bytes')
        : fail(
            HARDWARE_BINDING_CHECK,
            'EVIDENCE_BINDING_MISMATCH',
            `REPORTDATA is not the expected ${want.length}-byte value`,
          ),
    );
  }
  const debug = ((q.body.tdAttributes[0] ?? 0) & 1) !== 0;
  checks.push(
    !debug
      ? pass('tdx.debug', `TD_ATTRIBUTES ${q.body.tdAttributes.toString('hex')}: DEBUG clear`)
      : rv?.allow_debug
        ? pass('tdx.debug', 'TD_ATTRIBUTES.DEBUG is set; the reference values allow debug')
        : fail(
            'tdx.debug',
            'TDX_DEBUG_ENABLED',
            `TD_ATTRIBUTES ${q.body.tdAttributes.toString('hex')} has DEBUG set`,
          ),
  );
  const pin = (id: string, name: string, value: Buffer, allowed: string[] | undefined): CheckResult => {
    const hex = value.toString('hex');
    if (!allowed) return check(id, 'not-applicable', 'NO_POLICY', `${name} ${hex}; no expected value`);
    return allowed.includes(hex)
      ? pass(id, `${name} ${hex} is expected`)
      : fail(id, 'MEASUREMENT_NOT_ALLOWED', `${name} ${hex} is not an expected value`);
  };
  checks.push(pin('tdx.mrtd', 'MRTD', q.body.mrTd, rv?.mrtd));
  {
    const pins = rv?.rtmr;
    const keys = pins ? (Object.keys(pins) as ('0' | '1' | '2' | '3')[]) : [];
    if (!pins || keys.length === 0)
      checks.push(check('tdx.rtmr', 'not-applicable', 'NO_POLICY', 'no expected RTMR values'));
    else {
      const bad = keys.filter(
        (k) => !(pins[k] ?? []).includes(q.body.rtmr[Number(k)]?.toString('hex') ?? ''),
      );
      checks.push(
        bad.length
          ? fail('tdx.rtmr', 'MEASUREMENT_NOT_ALLOWED', `RTMR ${bad.join(', ')} not an expected value`)
          : pass('tdx.rtmr', `RTMR ${keys.join(', ')} expected`),
      );
    }
  }
  checks.push(pin('tdx.mrconfigid', 'MRCONFIGID', q.body.mrConfigId, rv?.mrconfigid));
  if (q.trailing === 0) checks.push(pass('tdx.trailing_data', 'no bytes after the declared signature data'));
  else if (rv?.reject_trailing_bytes) {
    checks.push(
      fail(
        'tdx.trailing_data',
        'TDX_TRAILING_BYTES',
        `${q.trailing} byte(s) after the declared signature data`,
      ),
    );
  } else {
    checks.push(
      pass(
        'tdx.trailing_data',
        `${q.trailing} unsigned byte(s) after the declared signature data (length ${q.end - q.signedRegion.length - 4}) were ignored`,
      ),
    );
    out.notes.push(
      `The quote has ${q.trailing} byte(s) after its declared signature data; nothing signs them and they were ignored.`,
    );
  }

  // collateral
  const col = verifyTdxCollateral({
    quote: q,
    pck: pckPath?.[0],
    pckIssuer: pckPath?.[1],
    pckRoot: pckPath?.[pckPath.length - 1],
    ...(input.collateral === undefined ? {} : { collateral: input.collateral }),
    ...(input.referenceValues === undefined ? {} : { referenceValues: input.referenceValues }),
    trustStore: input.trustStore,
    at: input.at,
  });
  checks.push(...col.checks);
  out.anchors.push(
    ...col.anchors.filter(
      (a) =>
        !out.anchors.some((b) => b.sha256_fingerprint === a.sha256_fingerprint && b.used_for === a.used_for),
    ),
  );
  out.notes.push(...col.notes);
  if (col.tcbStatus) out.tcbStatus = col.tcbStatus;
  return out;
}
