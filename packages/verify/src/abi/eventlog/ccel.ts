/**
 * The TDX CC event log and the ACPI table that locates it.
 *
 * ACPI CCEL table (ACPI 6.5 §5.2.34 "Confidential Computing Event Log Table", 56 bytes,
 * little-endian): the 36-byte ACPI header (signature "CCEL", length u32, revision u8, checksum
 * u8 making all bytes sum to 0 mod 256, OEM ID[6], OEM table ID[8], OEM revision u32, creator
 * ID[4], creator revision u32), then CC type u8 (1 = AMD SEV, 2 = Intel TDX), CC subtype u8,
 * reserved u16, LAML u64 (log area minimum length) and LASA u64 (log area start address).
 * Linux exposes it as /sys/firmware/acpi/tables/CCEL and the log area as
 * /sys/firmware/acpi/tables/data/CCEL.
 *
 * The log (UEFI 2.10 §38.1 "Virtual Platform CC Event Log") is the crypto-agile layout of
 * ./tcg2.ts whose index field is the CC MR index: 0 = MRTD, 1..4 = RTMR0..3 (UEFI 2.10 §38.4.1).
 * EDK2 TDVF writes the Spec ID header with MR index 1 (§38.4.1 maps PCR 0 to index 0; both are
 * accepted, the header is never extended) and leaves the rest of the LAML-byte area at 0xFF. The
 * parser stops at that fill; any other byte after the last event is read as an event (and
 * refused if it is not one).
 */
import { AbiError } from '../errors.js';
import { ByteReader } from '../reader.js';
import { type CryptoAgileProfile, type EventLog, parseCryptoAgileLog } from './tcg2.js';

/** ACPI table size of CCEL revision 1. */
export const CCEL_TABLE_SIZE = 56;
/** CC type of Intel TDX in the CCEL table. */
export const CCEL_CC_TYPE_TDX = 2;
/** CC MR indices: 0 = MRTD, 1..4 = RTMR0..3 (UEFI 2.10 §38.4.1). */
export const CC_MR_COUNT = 5;
/** Bound on a log area this verifier reads (TDVF reserves 64 KiB to 256 KiB). */
export const CCEL_MAX_LOG = 16 * 1024 * 1024;

/** A parsed ACPI CCEL table. */
export interface CcelTable {
  revision: number;
  oemId: string;
  oemTableId: string;
  oemRevision: number;
  creatorId: string;
  creatorRevision: number;
  /** 1 = AMD SEV, 2 = Intel TDX. */
  ccType: number;
  ccSubtype: number;
  /** Log area minimum length (bytes). */
  laml: bigint;
  /** Log area start address (guest physical). */
  lasa: bigint;
}

const TABLE = 'ACPI CCEL table';

/**
 * Parses the 56-byte ACPI CCEL table: signature, length, checksum, reserved field and a TDX CC
 * type are each checked, and each failure says which.
 * @throws AbiError CCEL_TABLE_MALFORMED
 */
export function parseCcelTable(bytes: Uint8Array): CcelTable {
  const bad = (offset: number, msg: string) =>
    new AbiError('CCEL_TABLE_MALFORMED', `${TABLE}: ${msg} (at byte ${offset})`, TABLE, null, offset);
  const r = new ByteReader(bytes, {
    structure: TABLE,
    littleEndian: true,
    truncated: 'CCEL_TABLE_MALFORMED',
    malformed: 'CCEL_TABLE_MALFORMED',
    trailing: 'CCEL_TABLE_MALFORMED',
  });
  const sig = r.bytes(4, 'Signature');
  if (sig.toString('latin1') !== 'CCEL')
    throw bad(0, `signature is ${JSON.stringify(sig.toString('latin1'))}, not "CCEL"`);
  const length = r.u32('Length');
  if (length !== CCEL_TABLE_SIZE) throw bad(4, `Length is ${length}, not ${CCEL_TABLE_SIZE}`);
  if (bytes.length !== length)
    throw bad(bytes.length, `the table is ${bytes.length} bytes, its Length says ${length}`);
  let sum = 0;
  for (const b of bytes) sum = (sum + b) & 0xff;
  if (sum !== 0) throw bad(9, `checksum does not sum the table to 0 (sum is 0x${sum.toString(16)})`);
  const revision = r.u8('Revision');
  r.skip(1, 'Checksum');
  const oemId = r.bytes(6, 'OEMID').toString('latin1');
  const oemTableId = r.bytes(8, 'OEM Table ID').toString('latin1');
  const oemRevision = r.u32('OEM Revision');
  const creatorId = r.bytes(4, 'Creator ID').toString('latin1');
  const creatorRevision = r.u32('Creator Revision');
  const ccType = r.u8('CC Type');
  const ccSubtype = r.u8('CC Subtype');
  const reserved = r.u16('Reserved');
  const laml = r.u64('LAML');
  const lasa = r.u64('LASA');
  r.end();
  if (ccType !== CCEL_CC_TYPE_TDX) throw bad(36, `CC Type is ${ccType}, not ${CCEL_CC_TYPE_TDX} (Intel TDX)`);
  if (reserved !== 0) throw bad(38, 'the reserved field is not zero');
  if (laml === 0n || laml > BigInt(CCEL_MAX_LOG)) throw bad(40, `LAML ${laml} is not in 1..${CCEL_MAX_LOG}`);
  return {
    revision,
    oemId,
    oemTableId,
    oemRevision,
    creatorId,
    creatorRevision,
    ccType,
    ccSubtype,
    laml,
    lasa,
  };
}

/** The CC event log profile of the crypto-agile parser. */
export const CCEL_PROFILE: CryptoAgileProfile = {
  structure: 'CC event log',
  truncated: 'CCEL_EVENT_TRUNCATED',
  malformed: 'CCEL_EVENT_MALFORMED',
  indexName: 'MR index',
  indexLimit: CC_MR_COUNT,
  headerIndices: [0, 1],
  startupLocality: false,
  ffFill: true,
};

/**
 * Parses a TDX CC event log (the CCEL log area, 0xFF fill allowed after the last event).
 * Events carry the CC MR index in `pcr`.
 * @throws AbiError CCEL_EVENT_TRUNCATED / CCEL_EVENT_MALFORMED
 */
export function parseCcelLog(bytes: Uint8Array): EventLog {
  if (bytes.length > CCEL_MAX_LOG) {
    throw new AbiError(
      'CCEL_EVENT_MALFORMED',
      `the log is ${bytes.length} bytes, more than ${CCEL_MAX_LOG} (at byte 0)`,
      CCEL_PROFILE.structure,
      null,
      0,
    );
  }
  return parseCryptoAgileLog(bytes, CCEL_PROFILE);
}
