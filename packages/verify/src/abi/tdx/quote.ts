/**
 * Intel TDX DCAP quotes v4 and v5 (Intel "TDX DCAP Quoting Library API", Appendix A "Quote
 * format"; SGX DCAP ECDSA Quote Library API for the QE report and certification data). All
 * integers are little-endian.
 *
 * Dispatch is on the declared version and body type, never by trial:
 * - v4: header (48) ‖ TD report 1.0 body (584); signed region = header ‖ body.
 * - v5: header (48) ‖ body type u16 ‖ body size u32 ‖ body (type 2 ⇒ TD report 1.0, 584 bytes;
 *   type 3 ⇒ TD report 1.5, 648 bytes); signed region = header ‖ type ‖ size ‖ body.
 * Then the signature data length L (u32) and L bytes: ECDSA P-256 signature (r‖s), the
 * attestation key (X‖Y), and certification data of type 6 (QE report, its signature by the
 * PCK, QE authentication data and, nested, type 5: the PCK chain as PEM). Every size is
 * honoured exactly; bytes after 4 + L are reported in `trailing` (policy decides). Intel's
 * quote generators count one NUL terminator after the last PEM block in the type-5 size (the
 * chain is written as a C string); that one byte is taken off here and recorded in
 * `pckChainNulTerminated`, anything else after the last block is the PEM reader's to refuse.
 */
import { ByteReader, type ReaderOptions } from '../reader.js';

/** TEE type of TDX in the quote header. */
export const TDX_TEE_TYPE = 0x81;
/** Size of the quote header. */
export const TDX_HEADER_SIZE = 48;
/** TD report body sizes: TDX 1.0 (body type 2) and TDX 1.5 (body type 3). */
export const TD10_SIZE = 584;
export const TD15_SIZE = 648;
/** Offset of REPORTDATA inside a TD report body. */
export const TD_REPORT_DATA_OFFSET = 520;
/** SGX REPORT body of the Quoting Enclave. */
export const QE_REPORT_SIZE = 384;

/**
 * The TD's measurements as TDINFO_STRUCT lays them out after ATTRIBUTES, in both the quote's TD
 * report body and TDREPORT_STRUCT: XFAM (8), MRTD, MRCONFIGID, MROWNER, MROWNERCONFIG, RTMR0..3
 * (48 each).
 */
export interface TdMeasurements {
  xfam: Buffer;
  mrTd: Buffer;
  mrConfigId: Buffer;
  mrOwner: Buffer;
  mrOwnerConfig: Buffer;
  rtmr: [Buffer, Buffer, Buffer, Buffer];
}

/** TD report body (TDX 1.0 fields, plus the 1.5 fields for body type 3). */
export interface TdReport extends TdMeasurements {
  teeTcbSvn: Buffer;
  mrSeam: Buffer;
  mrSignerSeam: Buffer;
  seamAttributes: Buffer;
  tdAttributes: Buffer;
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

/** Quote header and TD report body. */
export interface TdxQuoteHead {
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
  /** Offset of the body in the quote. */
  bodyOffset: number;
}

/** A parsed TDX quote. */
export interface TdxQuote extends TdxQuoteHead {
  /** The bytes the attestation key signed. */
  signedRegion: Buffer;
  signature: Buffer;
  attestationKey: Buffer;
  qeReport: QeReport;
  qeReportSignature: Buffer;
  qeAuthData: Buffer;
  /** PEM text of the PCK chain (certification data type 5), without a trailing NUL terminator. */
  pckChainPem: string;
  /** True when the type-5 size counted one NUL byte after the PEM text (as Intel's QGS writes it). */
  pckChainNulTerminated: boolean;
  /** Offset just past the declared signature data. */
  end: number;
  /** Bytes after `end`. */
  trailing: number;
}

const CODES: ReaderOptions = {
  structure: 'TDX quote',
  littleEndian: true,
  truncated: 'TDX_QUOTE_TRUNCATED',
  malformed: 'TDX_QUOTE_MALFORMED',
  trailing: 'TDX_QUOTE_MALFORMED',
  truncatedMessage: (field, n, off) => `${field} needs ${n} bytes at offset ${off}`,
};

/** Reads {@link TdMeasurements} (392 bytes) at the reader's position. */
export function readTdMeasurements(r: ByteReader): TdMeasurements {
  return {
    xfam: r.bytes(8, 'XFAM'),
    mrTd: r.bytes(48, 'MRTD'),
    mrConfigId: r.bytes(48, 'MRCONFIGID'),
    mrOwner: r.bytes(48, 'MROWNER'),
    mrOwnerConfig: r.bytes(48, 'MROWNERCONFIG'),
    rtmr: [r.bytes(48, 'RTMR0'), r.bytes(48, 'RTMR1'), r.bytes(48, 'RTMR2'), r.bytes(48, 'RTMR3')],
  };
}

/** Reads a TD report body (TDX Module ABI TDREPORT_STRUCT's TDINFO + SEAM fields, as in the quote). */
function readTdReport(r: ByteReader, type: 2 | 3): TdReport {
  const body: TdReport = {
    teeTcbSvn: r.bytes(16, 'TEE_TCB_SVN'),
    mrSeam: r.bytes(48, 'MRSEAM'),
    mrSignerSeam: r.bytes(48, 'MRSIGNERSEAM'),
    seamAttributes: r.bytes(8, 'SEAMATTRIBUTES'),
    tdAttributes: r.bytes(8, 'TDATTRIBUTES'),
    ...readTdMeasurements(r),
    reportData: r.bytes(64, 'REPORTDATA'),
  };
  if (type === 3) {
    body.teeTcbSvn2 = r.bytes(16, 'TEE_TCB_SVN_2');
    body.mrServiceTd = r.bytes(48, 'MRSERVICETD');
  }
  return body;
}

/** Reads the SGX REPORT body of the QE (SGX DCAP ECDSA Quote Library API, "Enclave Report Body"). */
function parseQeReport(raw: Buffer, base: number): QeReport {
  const r = new ByteReader(raw, { ...CODES, base });
  const cpuSvn = r.bytes(16, 'qe_report.CPUSVN');
  const miscSelect = r.u32('qe_report.MISCSELECT');
  r.skip(28, 'qe_report.reserved1');
  const attributes = r.bytes(16, 'qe_report.ATTRIBUTES');
  const mrEnclave = r.bytes(32, 'qe_report.MRENCLAVE');
  r.skip(32, 'qe_report.reserved2');
  const mrSigner = r.bytes(32, 'qe_report.MRSIGNER');
  r.skip(96, 'qe_report.reserved3');
  const isvProdId = r.u16('qe_report.ISVPRODID');
  const isvSvn = r.u16('qe_report.ISVSVN');
  r.skip(60, 'qe_report.reserved4');
  const reportData = r.bytes(64, 'qe_report.REPORTDATA');
  return { cpuSvn, miscSelect, attributes, mrEnclave, mrSigner, isvProdId, isvSvn, reportData, raw };
}

/**
 * Reads the header and the TD report body. With `requireEcdsaP256`, an attestation key type
 * other than 2 is refused before the TEE type is looked at (the verifier's order).
 */
function readHead(r: ByteReader, requireEcdsaP256: boolean): TdxQuoteHead {
  const version = r.u16('header.version');
  if (version !== 4 && version !== 5) {
    throw r.error('TDX_VERSION_UNSUPPORTED', `quote version ${version} is not 4 or 5`, 'header.version', 0);
  }
  const attKeyType = r.u16('header.att_key_type');
  if (requireEcdsaP256 && attKeyType !== 2) {
    throw r.error(
      'TDX_ATT_KEY_TYPE_UNSUPPORTED',
      `attestation key type ${attKeyType} is not 2 (ECDSA P-256)`,
      'header.att_key_type',
      2,
    );
  }
  const teeType = r.u32('header.tee_type');
  if (teeType !== TDX_TEE_TYPE) {
    throw r.error(
      'TDX_BODY_TYPE_UNSUPPORTED',
      `TEE type 0x${teeType.toString(16)} is not TDX (0x81)`,
      'header.tee_type',
      4,
    );
  }
  const qeSvn = r.u16('header.qe_svn');
  const pceSvn = r.u16('header.pce_svn');
  const qeVendorId = r.bytes(16, 'header.qe_vendor_id');
  const userData = r.bytes(20, 'header.user_data');
  let bodyType: 2 | 3 = 2;
  let bodySize = TD10_SIZE;
  if (version === 5) {
    const t = r.u16('body.type');
    const size = r.u32('body.size');
    if (t !== 2 && t !== 3)
      throw r.error('TDX_BODY_TYPE_UNSUPPORTED', `v5 body type ${t} is not a TD report (2, 3)`, 'body.type');
    bodyType = t;
    bodySize = t === 2 ? TD10_SIZE : TD15_SIZE;
    if (size !== bodySize) {
      throw r.error(
        'TDX_QUOTE_MALFORMED',
        `v5 body type ${t} has size ${size}, expected ${bodySize}`,
        'body.size',
      );
    }
  }
  const bodyOffset = r.offset;
  const body = readTdReport(r.sub(bodySize, 'body'), bodyType);
  return { version, attKeyType, teeType, qeSvn, pceSvn, qeVendorId, userData, bodyType, body, bodyOffset };
}

/**
 * Parses the header and TD report body of a v4/v5 quote, ignoring what follows (the native
 * layer's shape check of a quote it just obtained; the verifier parses everything).
 * @throws AbiError TDX_VERSION_UNSUPPORTED, TDX_BODY_TYPE_UNSUPPORTED, TDX_QUOTE_TRUNCATED,
 *   TDX_QUOTE_MALFORMED
 */
export function parseTdxQuoteHead(bytes: Uint8Array): TdxQuoteHead {
  return readHead(new ByteReader(bytes, CODES), false);
}

/** A certification data header the quote must carry: where, which type, and how errors name it. */
interface CertDataHeader {
  /** Field prefix in the reader's errors. */
  field: string;
  /** What the header is, and what its data is, in error messages. */
  label: string;
  type: number;
  holds: string;
  /** What the size counts, and what it must fill, in error messages. */
  sized: string;
  within: string;
}

/** Type 6: the QE report certification data, filling the signature data. */
const QE_REPORT_CERT_DATA: CertDataHeader = {
  field: 'certification_data',
  label: 'certification data',
  type: 6,
  holds: 'QE report',
  sized: 'certification data',
  within: 'signature data',
};
/** Type 5, nested in type 6: the PCK chain, filling the rest of the certification data. */
const PCK_CHAIN_CERT_DATA: CertDataHeader = {
  field: 'qe_certification_data',
  label: 'QE certification data',
  type: 5,
  holds: 'PCK chain',
  sized: 'PCK chain',
  within: 'certification data',
};

/**
 * Reads a certification data header (type u16, size u32) that must declare `h.type` and a size
 * filling the rest of `s` exactly; returns the size.
 * @throws AbiError TDX_CERT_DATA_UNSUPPORTED (another type), TDX_QUOTE_MALFORMED (size)
 */
function readCertDataHeader(s: ByteReader, h: CertDataHeader): number {
  const type = s.u16(`${h.field}.type`);
  const size = s.u32(`${h.field}.size`);
  if (type !== h.type) {
    throw s.error(
      'TDX_CERT_DATA_UNSUPPORTED',
      `${h.label} type ${type} is not ${h.type} (${h.holds})`,
      `${h.field}.type`,
    );
  }
  if (size !== s.remaining) {
    throw s.error(
      'TDX_QUOTE_MALFORMED',
      `${h.sized} size ${size} does not fill the ${h.within} exactly`,
      `${h.field}.size`,
    );
  }
  return size;
}

/**
 * Parses a TDX quote v4 or v5 exactly (see the module comment).
 * @throws AbiError TDX_VERSION_UNSUPPORTED, TDX_BODY_TYPE_UNSUPPORTED,
 *   TDX_ATT_KEY_TYPE_UNSUPPORTED, TDX_CERT_DATA_UNSUPPORTED, TDX_QUOTE_TRUNCATED, TDX_QUOTE_MALFORMED
 */
export function parseTdxQuote(bytes: Uint8Array): TdxQuote {
  const b = Buffer.from(bytes);
  const r = new ByteReader(b, CODES);
  const head = readHead(r, true);
  const signedRegion = Buffer.from(b.subarray(0, r.offset));
  const sigLen = r.u32('signature_data_len');
  const end = r.offset + sigLen;
  if (end > b.length) {
    throw r.error(
      'TDX_QUOTE_TRUNCATED',
      `signature data of ${sigLen} bytes runs past the ${b.length}-byte quote`,
      'signature_data',
    );
  }
  const s = r.sub(sigLen, 'signature_data');
  const signature = s.bytes(64, 'signature');
  const attestationKey = s.bytes(64, 'attestation_key');
  readCertDataHeader(s, QE_REPORT_CERT_DATA);
  const qeAt = s.absolute;
  const qeRaw = s.bytes(QE_REPORT_SIZE, 'qe_report');
  const qeReportSignature = s.bytes(64, 'qe_report_signature');
  const authSize = s.u16('qe_auth_data.size');
  const qeAuthData = s.bytes(authSize, 'qe_auth_data');
  const pem = s.bytes(readCertDataHeader(s, PCK_CHAIN_CERT_DATA), 'pck_chain');
  // One C-string terminator, as DCAP's quote generation library counts it; only one.
  const nul = pem.length > 0 && pem[pem.length - 1] === 0;
  return {
    ...head,
    signedRegion,
    signature,
    attestationKey,
    qeReport: parseQeReport(qeRaw, qeAt),
    qeReportSignature,
    qeAuthData,
    pckChainPem: (nul ? pem.subarray(0, pem.length - 1) : pem).toString('latin1'),
    pckChainNulTerminated: nul,
    end,
    trailing: b.length - end,
  };
}
