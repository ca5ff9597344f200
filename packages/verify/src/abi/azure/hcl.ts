/**
 * The Azure confidential VM paravisor (HCL) report, as the guest reads it from vTPM NV index
 * 0x01400001 (little-endian):
 *
 * | offset | size | field |
 * |---|---|---|
 * | 0 | 32 | header: signature `HCLA` (0x414c4348), version, report_size, request_type, status, reserved[3] |
 * | 32 | 1184 | hardware report area: SEV-SNP ATTESTATION_REPORT (1184), or TDX TDREPORT_STRUCT (1024, zero padded) |
 * | 1216 | 20 + n | IGVM request data: data_size, version, report_type (2 SNP, 4 TDX), report_data_hash_type (1 SHA-256, 2 SHA-384, 3 SHA-512), variable_data_size = n, then n bytes of runtime data (JSON) |
 *
 * report_size counts header, area and request data; the NV index is larger and zero-filled
 * after it. The paravisor sets the hardware report's REPORT_DATA[0:hash length] to the hash of
 * the runtime data, which carries the vTPM attestation key (HCLAkPub).
 * Sources: Microsoft OpenHCL `openhcl_attestation_protocol` (IGVM_ATTEST request header and
 * IgvmAttestRequestData); azure-cvm-tooling `az-cvm-vtpm/src/hcl`.
 */

import { AbiError } from '../errors.js';
import { ByteReader } from '../reader.js';
import { SNP_REPORT_DATA_OFFSET, SNP_REPORT_SIZE, SNP_VERSIONS } from '../snp/report.js';
import {
  parseTdReportStruct,
  TDREPORT_REPORT_DATA_OFFSET,
  TDREPORT_SIZE,
  type TdReportStruct,
} from '../tdx/tdreport.js';

/** The vTPM NV index holding the HCL report. */
export const HCL_REPORT_NV_INDEX = 0x01400001;
/** Header signature 'HCLA' read as a little-endian u32. */
export const HCL_SIGNATURE = 0x414c4348;
/** Header versions seen in the field (1: SNP-era paravisor, 2: with TDX support). */
export const HCL_VERSIONS: readonly number[] = [1, 2];
/** Header size. */
export const HCL_HEADER_SIZE = 32;
/** Size of the hardware report area (an SNP report; a TD report is padded to it). */
export const HCL_HW_REPORT_AREA_SIZE = SNP_REPORT_SIZE;
/** Offset of the IGVM request data. */
export const HCL_REQUEST_DATA_OFFSET = HCL_HEADER_SIZE + HCL_HW_REPORT_AREA_SIZE;
/** Fixed part of the IGVM request data (five u32). */
export const HCL_REQUEST_DATA_HEADER_SIZE = 20;
/** IGVM report types this layout knows. */
export const HCL_REPORT_TYPE = { SNP: 2, TDX: 4 } as const;
/** IGVM report_data_hash_type → hash name. */
export const HCL_HASH_TYPES: Readonly<Record<number, 'sha256' | 'sha384' | 'sha512'>> = {
  1: 'sha256',
  2: 'sha384',
  3: 'sha512',
};

/** A parsed HCL report. */
export interface HclReport {
  version: number;
  /** Header report_size: bytes from the header through the runtime data. */
  reportSize: number;
  requestType: number;
  status: number;
  /** Which hardware report the area holds (from IGVM report_type, checked against the area). */
  kind: 'sev-snp' | 'tdx';
  /** The hardware report bytes: 1184 (SNP ATTESTATION_REPORT) or 1024 (TDREPORT_STRUCT). */
  hwReport: Buffer;
  /** The TD report, parsed (kind `tdx`). */
  tdReport?: TdReportStruct;
  /** REPORT_DATA / REPORTDATA of the hardware report (64 bytes). */
  reportData: Buffer;
  requestVersion: number;
  reportType: number;
  hashType: number;
  /** Hash of the runtime data in REPORT_DATA[0:n]. */
  hash: 'sha256' | 'sha384' | 'sha512';
  /** The runtime data (variable data) bytes: a JSON document. */
  runtimeData: Buffer;
}

function reader(bytes: Uint8Array, structure: string, base = 0): ByteReader {
  return new ByteReader(bytes, {
    structure,
    littleEndian: true,
    base,
    truncated: 'HCL_REPORT_TRUNCATED',
    malformed: 'HCL_REPORT_MALFORMED',
    trailing: 'HCL_REPORT_MALFORMED',
  });
}

/** The hardware report area, checked against the report type it is said to hold. */
function hwArea(
  area: Buffer,
  reportType: number,
): Pick<HclReport, 'kind' | 'hwReport' | 'tdReport' | 'reportData'> {
  const mismatch = (msg: string) =>
    new AbiError(
      'HCL_REPORT_TYPE_MISMATCH',
      `HCL report: ${msg}`,
      'HCL_REPORT',
      'report_type',
      HCL_REQUEST_DATA_OFFSET + 8,
    );
  if (reportType === HCL_REPORT_TYPE.SNP) {
    const version = area.readUInt32LE(0);
    if (!SNP_VERSIONS.includes(version))
      throw mismatch(
        `report_type 2 (SEV-SNP) but the area starts with 0x${version.toString(16)}, not an SNP report version`,
      );
    return {
      kind: 'sev-snp',
      hwReport: Buffer.from(area),
      reportData: Buffer.from(area.subarray(SNP_REPORT_DATA_OFFSET, SNP_REPORT_DATA_OFFSET + 64)),
    };
  }
  if (reportType === HCL_REPORT_TYPE.TDX) {
    let td: TdReportStruct;
    try {
      td = parseTdReportStruct(area.subarray(0, TDREPORT_SIZE), HCL_HEADER_SIZE);
    } catch (err) {
      if (err instanceof AbiError && err.code === 'TDX_BODY_TYPE_UNSUPPORTED')
        throw mismatch(`report_type 4 (TDX) but the area is not a TD report (${err.message})`);
      throw err;
    }
    if (area.subarray(TDREPORT_SIZE).some((b) => b !== 0))
      throw new AbiError(
        'HCL_REPORT_MALFORMED',
        'HCL report: the padding after the TD report is not zero',
        'HCL_REPORT',
        'hw_report',
        HCL_HEADER_SIZE + TDREPORT_SIZE,
      );
    return {
      kind: 'tdx',
      hwReport: Buffer.from(area.subarray(0, TDREPORT_SIZE)),
      tdReport: td,
      reportData: Buffer.from(area.subarray(TDREPORT_REPORT_DATA_OFFSET, TDREPORT_REPORT_DATA_OFFSET + 64)),
    };
  }
  throw new AbiError(
    'HCL_REPORT_TYPE_UNSUPPORTED',
    `HCL report: IGVM report_type ${reportType} is not 2 (SEV-SNP) or 4 (TDX)`,
    'HCL_REPORT',
    'report_type',
    HCL_REQUEST_DATA_OFFSET + 8,
  );
}

/**
 * Parses an HCL report (the NV index contents: report_size bytes, then zero fill).
 * @throws AbiError HCL_REPORT_TRUNCATED (shorter than a field or a declared size),
 *   HCL_REPORT_MALFORMED (signature, version, inconsistent sizes, non-zero fill),
 *   HCL_REPORT_TYPE_UNSUPPORTED, HCL_REPORT_TYPE_MISMATCH (the area is not the report type's
 *   report), HCL_HASH_TYPE_UNSUPPORTED; TDX_QUOTE_* from the TD report.
 */
export function parseHclReport(bytes: Uint8Array): HclReport {
  const buf = Buffer.from(bytes.buffer, bytes.byteOffset, bytes.byteLength);
  const h = reader(buf, 'HCL_REPORT');
  const signature = h.u32('signature');
  if (signature !== HCL_SIGNATURE)
    throw h.invalid(`signature is 0x${signature.toString(16)}, not 'HCLA' (0x414c4348)`, 'signature');
  const version = h.u32('version');
  if (!HCL_VERSIONS.includes(version)) throw h.invalid(`header version ${version} is not 1 or 2`, 'version');
  const reportSize = h.u32('report_size');
  const requestType = h.u32('request_type');
  const status = h.u32('status');
  h.skip(12, 'reserved');
  const area = h.bytes(HCL_HW_REPORT_AREA_SIZE, 'hw_report');
  const r = h.sub(h.remaining, 'request_data');
  const dataSize = r.u32('data_size');
  const requestVersion = r.u32('version');
  const reportType = r.u32('report_type');
  const hashType = r.u32('report_data_hash_type');
  const varSize = r.u32('variable_data_size');
  if (dataSize !== HCL_REQUEST_DATA_HEADER_SIZE + varSize)
    throw r.invalid(`data_size ${dataSize} is not 20 + variable_data_size ${varSize}`, 'data_size');
  const runtimeData = r.bytes(varSize, 'variable_data');
  if (reportSize !== HCL_REQUEST_DATA_OFFSET + dataSize)
    throw h.invalid(
      `report_size ${reportSize} is not ${HCL_REQUEST_DATA_OFFSET} + data_size ${dataSize}`,
      'report_size',
    );
  const fill = buf.subarray(reportSize);
  const nz = fill.findIndex((b) => b !== 0);
  if (nz >= 0)
    throw new AbiError(
      'HCL_REPORT_MALFORMED',
      `HCL report: byte ${reportSize + nz} after report_size is not zero`,
      'HCL_REPORT',
      'fill',
      reportSize + nz,
    );
  const hw = hwArea(area, reportType);
  const hash = HCL_HASH_TYPES[hashType];
  if (!hash)
    throw new AbiError(
      'HCL_HASH_TYPE_UNSUPPORTED',
      `HCL report: report_data_hash_type ${hashType} is not 1, 2 or 3`,
      'HCL_REPORT',
      'report_data_hash_type',
      HCL_REQUEST_DATA_OFFSET + 12,
    );
  return {
    version,
    reportSize,
    requestType,
    status,
    ...hw,
    requestVersion,
    reportType,
    hashType,
    hash,
    runtimeData,
  };
}
