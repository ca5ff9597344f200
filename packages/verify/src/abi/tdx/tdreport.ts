/**
 * TDREPORT_STRUCT (1024 bytes), what TDG.MR.REPORT returns inside a TD: REPORTMACSTRUCT (256),
 * TEE_TCB_INFO (239), reserved (17), TDINFO_STRUCT (512). It is MAC'd for the local platform,
 * not signed: only a quote from the host's Quoting Enclave makes it verifiable elsewhere.
 * Source: Intel TDX Module ABI Specification, "TDREPORT_STRUCT", "REPORTMACSTRUCT", "TDINFO_STRUCT".
 */
import { ByteReader } from '../reader.js';
import { readTdMeasurements, TDX_TEE_TYPE, type TdMeasurements } from './quote.js';

/** Size of TDREPORT_STRUCT. */
export const TDREPORT_SIZE = 1024;
/** Offset of REPORTDATA in TDREPORT_STRUCT (inside REPORTMACSTRUCT). */
export const TDREPORT_REPORT_DATA_OFFSET = 128;
/** Offset of TDINFO_STRUCT in TDREPORT_STRUCT. */
export const TDREPORT_TDINFO_OFFSET = 512;

/** A parsed TDREPORT_STRUCT (fields as the quote body names them). */
export interface TdReportStruct extends TdMeasurements {
  /** REPORTTYPE.TYPE (0x81 = TDX). */
  type: number;
  subType: number;
  version: number;
  cpuSvn: Buffer;
  teeTcbInfoHash: Buffer;
  teeInfoHash: Buffer;
  reportData: Buffer;
  mac: Buffer;
  /** TEE_TCB_INFO (239 bytes), kept whole. */
  teeTcbInfo: Buffer;
  tdAttributes: Buffer;
  servTdHash: Buffer;
}

/**
 * Parses TDREPORT_STRUCT from exactly {@link TDREPORT_SIZE} bytes.
 * @throws AbiError TDX_QUOTE_TRUNCATED / TDX_QUOTE_MALFORMED (size), TDX_BODY_TYPE_UNSUPPORTED
 *   (REPORTTYPE.TYPE is not 0x81).
 */
export function parseTdReportStruct(bytes: Uint8Array, base = 0): TdReportStruct {
  const r = new ByteReader(bytes, {
    structure: 'TDREPORT_STRUCT',
    littleEndian: true,
    base,
    truncated: 'TDX_QUOTE_TRUNCATED',
    malformed: 'TDX_QUOTE_MALFORMED',
    trailing: 'TDX_QUOTE_MALFORMED',
  });
  const type = r.u8('REPORTTYPE.TYPE');
  if (type !== TDX_TEE_TYPE)
    throw r.error('TDX_BODY_TYPE_UNSUPPORTED', `REPORTTYPE.TYPE is 0x${type.toString(16)}, not 0x81 (TDX)`);
  const subType = r.u8('REPORTTYPE.SUBTYPE');
  const version = r.u8('REPORTTYPE.VERSION');
  r.skip(1 + 12, 'reserved');
  const out = {
    type,
    subType,
    version,
    cpuSvn: r.bytes(16, 'CPUSVN'),
    teeTcbInfoHash: r.bytes(48, 'TEE_TCB_INFO_HASH'),
    teeInfoHash: r.bytes(48, 'TEE_INFO_HASH'),
    reportData: r.bytes(64, 'REPORTDATA'),
  };
  r.skip(32, 'reserved');
  const mac = r.bytes(32, 'MAC');
  const teeTcbInfo = r.bytes(239, 'TEE_TCB_INFO');
  r.skip(17, 'reserved');
  const td = {
    tdAttributes: r.bytes(8, 'ATTRIBUTES'),
    ...readTdMeasurements(r),
    servTdHash: r.bytes(48, 'SERVTD_HASH'),
  };
  r.skip(64, 'reserved');
  r.end();
  return { ...out, mac, teeTcbInfo, ...td };
}
