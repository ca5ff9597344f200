/**
 * TPM 2.0 wire-format (big-endian, Part 1 §18 / Part 2 "canonical form") writers and readers.
 * These are the only byte layouts the layer builds by hand; C struct layouts are never mirrored:
 * tpm2-tss MU functions convert between this wire format and its own structs.
 */
import { TpmError } from './errors.js';

/** Algorithm and constant identifiers, TPM 2.0 Part 2 §6 (TPM_ALG_ID, TPM_ECC_CURVE, TPM_ST). */
export const TPM2_ALG_RSA = 0x0001;
export const TPM2_ALG_SHA256 = 0x000b;
export const TPM2_ALG_NULL = 0x0010;
export const TPM2_ALG_RSASSA = 0x0014;
export const TPM2_ALG_ECDSA = 0x0018;
export const TPM2_ALG_ECC = 0x0023;
export const TPM2_ECC_NIST_P256 = 0x0003;
export const TPM2_GENERATED_VALUE = 0xff544347;
export const TPM2_ST_ATTEST_QUOTE = 0x8018;

/** TPMA_OBJECT bits, Part 2 §8.3.2. */
export const TPMA_OBJECT = {
  fixedTPM: 0x00000002,
  stClear: 0x00000004,
  fixedParent: 0x00000010,
  sensitiveDataOrigin: 0x00000020,
  userWithAuth: 0x00000040,
  adminWithPolicy: 0x00000080,
  noDA: 0x00000400,
  encryptedDuplication: 0x00000800,
  restricted: 0x00010000,
  decrypt: 0x00020000,
  sign: 0x00040000,
} as const;

/** Highest PCR index expressible with a 4-byte pcrSelect bitmap. */
export const MAX_PCR_INDEX = 31;

export class WireWriter {
  private readonly parts: Buffer[] = [];

  u8(v: number): this {
    const b = Buffer.alloc(1);
    b.writeUInt8(v);
    this.parts.push(b);
    return this;
  }

  u16(v: number): this {
    const b = Buffer.alloc(2);
    b.writeUInt16BE(v);
    this.parts.push(b);
    return this;
  }

  u32(v: number): this {
    const b = Buffer.alloc(4);
    b.writeUInt32BE(v >>> 0);
    this.parts.push(b);
    return this;
  }

  bytes(v: Uint8Array): this {
    this.parts.push(Buffer.from(v));
    return this;
  }

  /** A TPM2B: u16 size then the bytes. */
  tpm2b(v: Uint8Array): this {
    return this.u16(v.length).bytes(v);
  }

  done(): Buffer {
    return Buffer.concat(this.parts);
  }
}

export class WireReader {
  private off = 0;

  constructor(
    private readonly buf: Buffer,
    private readonly what: string,
  ) {}

  get offset(): number {
    return this.off;
  }

  get remaining(): number {
    return this.buf.length - this.off;
  }

  private need(n: number): void {
    if (this.off + n > this.buf.length) {
      throw new TpmError(
        'TPM_BAD_RESPONSE',
        `${this.what}: truncated at offset ${this.off} (need ${n} bytes)`,
      );
    }
  }

  u8(): number {
    this.need(1);
    const v = this.buf.readUInt8(this.off);
    this.off += 1;
    return v;
  }

  u16(): number {
    this.need(2);
    const v = this.buf.readUInt16BE(this.off);
    this.off += 2;
    return v;
  }

  u32(): number {
    this.need(4);
    const v = this.buf.readUInt32BE(this.off);
    this.off += 4;
    return v;
  }

  u64(): bigint {
    this.need(8);
    const v = this.buf.readBigUInt64BE(this.off);
    this.off += 8;
    return v;
  }

  bytes(n: number): Buffer {
    this.need(n);
    const v = Buffer.from(this.buf.subarray(this.off, this.off + n));
    this.off += n;
    return v;
  }

  tpm2b(): Buffer {
    return this.bytes(this.u16());
  }

  end(): void {
    if (this.remaining !== 0) {
      throw new TpmError('TPM_BAD_RESPONSE', `${this.what}: ${this.remaining} trailing bytes`);
    }
  }
}

/**
 * TPML_PCR_SELECTION with one sha256 TPMS_PCR_SELECTION (Part 2 §10.6.2, §10.9.7).
 * sizeofSelect is at least 3 (PCR_SELECT_MIN for 24 PCRs), 4 when a PCR above 23 is named.
 */
export function pcrSelectionSha256(pcrs: readonly number[]): Buffer {
  const size = pcrs.some((p) => p > 23) ? 4 : 3;
  const bitmap = Buffer.alloc(size);
  for (const p of pcrs) bitmap[p >> 3]! |= 1 << (p & 7);
  return new WireWriter().u32(1).u16(TPM2_ALG_SHA256).u8(size).bytes(bitmap).done();
}

/** Parses TPML_PCR_SELECTION wire bytes into bank → ascending PCR indices. */
export function parsePcrSelection(r: WireReader): Map<number, number[]> {
  const out = new Map<number, number[]>();
  const count = r.u32();
  for (let i = 0; i < count; i++) {
    const hash = r.u16();
    const size = r.u8();
    const bitmap = r.bytes(size);
    const pcrs = out.get(hash) ?? [];
    for (let byte = 0; byte < size; byte++) {
      for (let bit = 0; bit < 8; bit++) if (bitmap[byte]! & (1 << bit)) pcrs.push(byte * 8 + bit);
    }
    out.set(hash, pcrs);
  }
  return out;
}

/** Parses TPML_DIGEST wire bytes (Part 2 §10.9.2). */
export function parseDigestList(wire: Buffer): Buffer[] {
  const r = new WireReader(wire, 'TPML_DIGEST');
  const count = r.u32();
  const out: Buffer[] = [];
  for (let i = 0; i < count; i++) out.push(r.tpm2b());
  r.end();
  return out;
}

/** The fields of a quote TPMS_ATTEST (Part 2 §10.12.8, §10.12.1 TPMS_QUOTE_INFO) the layer checks. */
export interface ParsedQuoteAttest {
  magic: number;
  type: number;
  qualifiedSigner: Buffer;
  extraData: Buffer;
  pcrSelection: Map<number, number[]>;
  pcrDigest: Buffer;
}

export function parseQuoteAttest(attest: Buffer): ParsedQuoteAttest {
  const r = new WireReader(attest, 'TPMS_ATTEST');
  const magic = r.u32();
  const type = r.u16();
  const qualifiedSigner = r.tpm2b();
  const extraData = r.tpm2b();
  r.bytes(8 + 4 + 4 + 1); // TPMS_CLOCK_INFO: clock, resetCount, restartCount, safe
  r.u64(); // firmwareVersion
  if (type !== TPM2_ST_ATTEST_QUOTE) {
    throw new TpmError('TPM_BAD_RESPONSE', `TPMS_ATTEST type 0x${type.toString(16)} is not ATTEST_QUOTE`);
  }
  const pcrSelection = parsePcrSelection(r);
  const pcrDigest = r.tpm2b();
  r.end();
  return { magic, type, qualifiedSigner, extraData, pcrSelection, pcrDigest };
}
