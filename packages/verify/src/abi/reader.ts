/**
 * The one bounded byte reader and writer of hardware layouts. TPM 2.0 structures are big-endian
 * (TPM 2.0 Part 1 §18 "canonical form"); SEV-SNP, TDX and TCG2 event logs are little-endian.
 * Every read checks bounds first and throws {@link AbiError} naming the structure, field and
 * offset; nothing is read past the end, and `end()` refuses trailing bytes.
 *
 * Byte strings come back as Buffers (Uint8Array subclasses): the verifier compares and prints
 * them with Buffer's methods; a browser build supplies Buffer through the `buffer` package.
 */
import { AbiError, type AbiErrorCode } from './errors.js';

/** Error codes a reader raises, per structure. */
export interface ReaderCodes {
  /** A field runs past the end of the input. */
  truncated: AbiErrorCode;
  /** A size field exceeds its bound. */
  malformed: AbiErrorCode;
  /** Bytes remain after the structure. */
  trailing: AbiErrorCode;
}

/** Options of {@link ByteReader}. */
export interface ReaderOptions extends ReaderCodes {
  /** Structure name for messages, e.g. `TPMS_ATTEST`. */
  structure: string;
  littleEndian?: boolean;
  /** Offset of `bytes[0]` in the outer input, for messages (nested readers). */
  base?: number;
  /**
   * Formats a bounds failure; default `${structure}: ${field} needs n bytes at offset o, r left`.
   */
  truncatedMessage?: (field: string, need: number, offset: number, left: number) => string;
}

/** Bounds-checked reader over a byte string. Returned byte strings are copies. */
export class ByteReader {
  private off = 0;
  private readonly view: DataView;
  readonly structure: string;
  private readonly le: boolean;
  private readonly base: number;

  constructor(
    private readonly buf: Uint8Array,
    private readonly opts: ReaderOptions,
  ) {
    this.view = new DataView(buf.buffer, buf.byteOffset, buf.byteLength);
    this.structure = opts.structure;
    this.le = opts.littleEndian ?? false;
    this.base = opts.base ?? 0;
  }

  /** Offset of the next byte, relative to this reader's input. */
  get offset(): number {
    return this.off;
  }

  /** Offset of the next byte in the outer input. */
  get absolute(): number {
    return this.base + this.off;
  }

  get remaining(): number {
    return this.buf.length - this.off;
  }

  /** An error of this structure at the current offset. */
  error(code: AbiErrorCode, message: string, field: string | null = null, at = this.absolute): AbiError {
    return new AbiError(code, message, this.structure, field, at);
  }

  /** A `malformed` error of this structure (a value out of its range) at the current offset. */
  invalid(message: string, field: string | null = null): AbiError {
    return this.error(this.opts.malformed, `${this.structure}: ${message}`, field);
  }

  private need(n: number, field: string): void {
    if (this.remaining < n) {
      const msg = this.opts.truncatedMessage
        ? this.opts.truncatedMessage(field, n, this.absolute, this.remaining)
        : `${this.structure}: ${field} needs ${n} bytes at offset ${this.absolute}, ${this.remaining} left`;
      throw this.error(this.opts.truncated, msg, field);
    }
  }

  u8(field: string): number {
    this.need(1, field);
    return this.view.getUint8(this.off++);
  }

  u16(field: string): number {
    this.need(2, field);
    const v = this.view.getUint16(this.off, this.le);
    this.off += 2;
    return v;
  }

  u32(field: string): number {
    this.need(4, field);
    const v = this.view.getUint32(this.off, this.le);
    this.off += 4;
    return v;
  }

  u64(field: string): bigint {
    this.need(8, field);
    const v = this.view.getBigUint64(this.off, this.le);
    this.off += 8;
    return v;
  }

  /** `n` bytes (a copy). */
  bytes(n: number, field: string): Buffer {
    this.need(n, field);
    const v = Buffer.from(this.buf.subarray(this.off, this.off + n));
    this.off += n;
    return v;
  }

  /** Skips `n` bytes. */
  skip(n: number, field: string): void {
    this.need(n, field);
    this.off += n;
  }

  /** A reader over the next `n` bytes (consumed here), with the same codes unless overridden. */
  sub(n: number, field: string, opts: Partial<ReaderOptions> = {}): ByteReader {
    this.need(n, field);
    const r = new ByteReader(this.buf.subarray(this.off, this.off + n), {
      ...this.opts,
      ...opts,
      base: this.absolute,
    });
    this.off += n;
    return r;
  }

  /** TPM2B_*: u16 size then `size` bytes; `size` must be ≤ `max` (TPM 2.0 Part 2 §10.4). */
  tpm2b(field: string, max = 0xffff): Buffer {
    const size = this.u16(`${field}.size`);
    if (size > max) {
      throw this.error(
        this.opts.malformed,
        `${this.structure}: ${field}.size ${size} exceeds ${max}`,
        `${field}.size`,
        this.absolute - 2,
      );
    }
    return this.bytes(size, field);
  }

  /** Asserts the input is consumed exactly. */
  end(): void {
    if (this.remaining !== 0) {
      throw this.error(
        this.opts.trailing,
        `${this.structure}: ${this.remaining} trailing byte(s) after offset ${this.absolute}`,
      );
    }
  }
}

/** Growable writer of wire bytes (big-endian unless `littleEndian`). */
export class ByteWriter {
  private readonly parts: Uint8Array[] = [];
  private length = 0;

  constructor(private readonly littleEndian = false) {}

  private push(b: Uint8Array): this {
    this.parts.push(b);
    this.length += b.length;
    return this;
  }

  private num(size: 1 | 2 | 4 | 8, v: number | bigint): this {
    const b = new Uint8Array(size);
    const dv = new DataView(b.buffer);
    if (size === 1) dv.setUint8(0, Number(v));
    else if (size === 2) dv.setUint16(0, Number(v), this.littleEndian);
    else if (size === 4) dv.setUint32(0, Number(v) >>> 0, this.littleEndian);
    else dv.setBigUint64(0, BigInt(v), this.littleEndian);
    return this.push(b);
  }

  u8(v: number): this {
    return this.num(1, v);
  }

  u16(v: number): this {
    return this.num(2, v);
  }

  u32(v: number): this {
    return this.num(4, v);
  }

  u64(v: bigint): this {
    return this.num(8, v);
  }

  bytes(v: Uint8Array): this {
    return this.push(Uint8Array.from(v));
  }

  /** TPM2B_*: u16 size then the bytes. */
  tpm2b(v: Uint8Array): this {
    return this.u16(v.length).bytes(v);
  }

  /** The bytes written so far. */
  done(): Buffer {
    return Buffer.concat(this.parts, this.length);
  }
}
