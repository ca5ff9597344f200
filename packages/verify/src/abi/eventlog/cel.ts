/**
 * TCG Canonical Event Log, TLV encoding (TCG "Canonical Event Log Format" v1.0 §5), as
 * Confidential Space's launcher writes it (go-tpm-tools `cel/`, go-eventlog `cel/`).
 *
 * A TLV is type u8, length u32 big-endian, value. A record is four TLVs in this order:
 *  - recnum (type 0): the record number, big-endian, 1..8 bytes; records are numbered 0, 1, 2…;
 *  - index: type 1 = PCR (TPM), or type 108 = CC MR index (not in the CEL spec; Confidential
 *    Space's TDX form: 1..4 = RTMR0..3 as in UEFI 2.10 §38.4.1), a 1-byte value. NV-index
 *    records (type 2) are not supported and are refused;
 *  - digests (type 3): a sequence of TLVs whose type is the TPM_ALG_ID (low byte) and whose
 *    value is the digest of that size; at least one, no algorithm twice;
 *  - content: any type; the whole content TLV is kept (Confidential Space's content type 80
 *    "COS" nests one TLV and its digest is H(content TLV bytes)).
 * Every length is checked against what remains before anything is read; a record that does not
 * fit is `CEL_RECORD_TRUNCATED`, any other inconsistency `CEL_RECORD_MALFORMED`.
 */
import { AbiError } from '../errors.js';
import { ByteReader } from '../reader.js';
import { TPM_ALG } from '../tpm/constants.js';

/** TLV types of the record fields. */
export const CEL_TYPE = { RECNUM: 0, PCR: 1, NV_INDEX: 2, DIGESTS: 3, CCMR: 108 } as const;
/** Content type of Confidential Space (COS) events. */
export const CEL_CONTENT_COS = 80;
/** Digest algorithms a CEL digests TLV may carry (TPM_ALG_ID low byte → size). */
export const CEL_DIGEST_SIZES: Readonly<Record<number, number>> = {
  [TPM_ALG.SHA1]: 20,
  [TPM_ALG.SHA256]: 32,
  [TPM_ALG.SHA384]: 48,
  [TPM_ALG.SHA512]: 64,
};
const MAX_CONTENT = 16 * 1024 * 1024;
const STRUCTURE = 'CEL';

/** One CEL record. */
export interface CelRecord {
  recnum: number;
  /** Byte offset of the record. */
  offset: number;
  indexType: typeof CEL_TYPE.PCR | typeof CEL_TYPE.CCMR;
  /** PCR number, or CC MR index (1..4 = RTMR0..3). */
  index: number;
  /** Digest per TPM_ALG_ID. */
  digests: Map<number, Buffer>;
  contentType: number;
  /** The content TLV's value. */
  content: Buffer;
  /** The whole content TLV (type ‖ length ‖ value). */
  contentTlv: Buffer;
}

function malformed(offset: number, message: string): AbiError {
  return new AbiError('CEL_RECORD_MALFORMED', `${message} (at byte ${offset})`, STRUCTURE, null, offset);
}

interface Tlv {
  type: number;
  value: Buffer;
  offset: number;
}

function readTlv(r: ByteReader, what: string): Tlv {
  const offset = r.absolute;
  const type = r.u8(`${what} type`);
  const length = r.u32(`${what} length`);
  if (length > MAX_CONTENT) throw malformed(offset, `${what} length ${length} is too large`);
  return { type, value: r.bytes(length, `${what} value`), offset };
}

function reader(bytes: Uint8Array, base = 0): ByteReader {
  return new ByteReader(bytes, {
    structure: STRUCTURE,
    base,
    truncated: 'CEL_RECORD_TRUNCATED',
    malformed: 'CEL_RECORD_MALFORMED',
    trailing: 'CEL_RECORD_MALFORMED',
    truncatedMessage: (field, n, off, left) => `${field} needs ${n} byte(s), ${left} remain (at byte ${off})`,
  });
}

function readRecord(r: ByteReader, expected: number): CelRecord {
  const offset = r.absolute;
  const bad = (at: number, msg: string) => malformed(at, `record ${expected}: ${msg}`);
  const rn = readTlv(r, 'recnum');
  if (rn.type !== CEL_TYPE.RECNUM) throw bad(rn.offset, `first TLV has type ${rn.type}, not recnum (0)`);
  if (rn.value.length < 1 || rn.value.length > 8)
    throw bad(rn.offset, `recnum is ${rn.value.length} bytes, not 1..8`);
  const recnum = Number(rn.value.reduce((acc, b) => (acc << 8n) | BigInt(b), 0n));
  if (recnum !== expected)
    throw bad(rn.offset, `recnum is ${recnum}, not ${expected} (records out of sequence)`);
  const ix = readTlv(r, 'index');
  if (ix.type === CEL_TYPE.NV_INDEX) throw bad(ix.offset, 'NV-index records are not supported');
  if (ix.type !== CEL_TYPE.PCR && ix.type !== CEL_TYPE.CCMR) {
    throw bad(ix.offset, `index TLV has type ${ix.type}, not PCR (1) or CC MR (108)`);
  }
  if (ix.value.length !== 1) throw bad(ix.offset, `index is ${ix.value.length} bytes, not 1`);
  const index = ix.value[0] as number;
  if (ix.type === CEL_TYPE.CCMR && (index < 1 || index > 4)) {
    throw bad(ix.offset, `CC MR index ${index} is not 1..4 (RTMR0..3; MRTD is not extended at run time)`);
  }
  if (ix.type === CEL_TYPE.PCR && index >= 24) throw bad(ix.offset, `PCR ${index} is not below 24`);
  const dg = readTlv(r, 'digests');
  if (dg.type !== CEL_TYPE.DIGESTS) throw bad(dg.offset, `third TLV has type ${dg.type}, not digests (3)`);
  const digests = new Map<number, Buffer>();
  const dr = reader(dg.value, dg.offset + 5);
  while (dr.remaining > 0) {
    const d = readTlv(dr, 'digest');
    const size = CEL_DIGEST_SIZES[d.type];
    if (size === undefined) throw bad(d.offset, `digest algorithm 0x${d.type.toString(16)} is not supported`);
    if (d.value.length !== size)
      throw bad(d.offset, `digest 0x${d.type.toString(16)} is ${d.value.length} bytes, not ${size}`);
    if (digests.has(d.type)) throw bad(d.offset, `digest algorithm 0x${d.type.toString(16)} appears twice`);
    digests.set(d.type, d.value);
  }
  if (digests.size === 0) throw bad(dg.offset, 'no digest');
  const ct = readTlv(r, 'content');
  // The TLV bytes as read: the length field is the value's length, so this is exact.
  const head = Buffer.alloc(5);
  head[0] = ct.type;
  head.writeUInt32BE(ct.value.length, 1);
  const contentTlv = Buffer.concat([head, ct.value]);
  return {
    recnum,
    offset,
    indexType: ix.type,
    index,
    digests,
    contentType: ct.type,
    content: ct.value,
    contentTlv,
  };
}

/**
 * Parses a TLV-encoded CEL (see the module comment); the whole input must be records.
 * @throws AbiError CEL_RECORD_TRUNCATED / CEL_RECORD_MALFORMED
 */
export function parseCel(bytes: Uint8Array): CelRecord[] {
  const r = reader(bytes);
  if (r.remaining === 0)
    throw new AbiError('CEL_RECORD_TRUNCATED', 'the CEL is empty (at byte 0)', STRUCTURE, null, 0);
  const records: CelRecord[] = [];
  while (r.remaining > 0) records.push(readRecord(r, records.length));
  return records;
}
