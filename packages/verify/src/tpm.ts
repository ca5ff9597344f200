/**
 * Strict TPM 2.0 structure parsing and quote verification for relying parties.
 *
 * Everything here works on TPM wire format (big-endian, TPM 2.0 Library Part 2
 * "Structures"); it never reads tpm2-tss host structs. Parsers consume their input exactly:
 * short input, out-of-range size fields and trailing bytes are errors. Every parse error is a
 * {@link TpmParseError} carrying a stable reason code, so a caller can report it as a failed
 * check (never a skipped one).
 *
 * The quote check ({@link verifyTpmQuote}) is independent of claims so that it can be reused
 * for raw evidence (AK supplied as a TPMT_PUBLIC, or as a bare key from a certificate).
 */
import {
  createHash,
  createPublicKey,
  constants as cryptoConstants,
  verify as cryptoVerify,
  type KeyObject,
} from 'node:crypto';
import { b64u } from './format/canonical.js';
import {
  type CheckResult,
  check,
  fail,
  HARDWARE_BINDING_CHECK,
  HARDWARE_SIGNATURE_CHECK,
  pass,
  type ReasonCode,
} from './result.js';

/** TPM_GENERATED_VALUE (Part 2 §6.2): first field of every TPMS_ATTEST the TPM signs. */
export const TPM_GENERATED_VALUE = 0xff544347;
/** TPM_ST_ATTEST_QUOTE (Part 2 §6.9): TPMS_ATTEST.type of a TPM2_Quote result. */
export const TPM_ST_ATTEST_QUOTE = 0x8018;

/** TPM_ALG_ID values used here (Part 2 §6.3). */
export const TPM_ALG = {
  RSA: 0x0001,
  SHA1: 0x0004,
  SHA256: 0x000b,
  SHA384: 0x000c,
  SHA512: 0x000d,
  NULL: 0x0010,
  SM3_256: 0x0012,
  RSASSA: 0x0014,
  RSAES: 0x0015,
  RSAPSS: 0x0016,
  OAEP: 0x0017,
  ECDSA: 0x0018,
  ECDH: 0x0019,
  ECDAA: 0x001a,
  SM2: 0x001b,
  ECSCHNORR: 0x001c,
  ECMQV: 0x001d,
  KDF1_SP800_56A: 0x0020,
  KDF2: 0x0021,
  KDF1_SP800_108: 0x0022,
  ECC: 0x0023,
  SHA3_256: 0x0027,
  SHA3_384: 0x0028,
  SHA3_512: 0x0029,
} as const;

/** TPM_ECC_CURVE values supported (Part 2 §6.4) → node curve name and coordinate size in bytes. */
const ECC_CURVES: Record<number, { jwkCrv: string; nodeCurve: string; size: number }> = {
  3: { jwkCrv: 'P-256', nodeCurve: 'prime256v1', size: 32 },
  4: { jwkCrv: 'P-384', nodeCurve: 'secp384r1', size: 48 },
  5: { jwkCrv: 'P-521', nodeCurve: 'secp521r1', size: 66 },
};

/** Hash algorithms this verifier computes: TPM_ALG_ID → node digest name and size in bytes. */
const HASHES: Record<number, { node: string; size: number }> = {
  [TPM_ALG.SHA1]: { node: 'sha1', size: 20 },
  [TPM_ALG.SHA256]: { node: 'sha256', size: 32 },
  [TPM_ALG.SHA384]: { node: 'sha384', size: 48 },
  [TPM_ALG.SHA512]: { node: 'sha512', size: 64 },
};

/** Hashes accepted for signatures and AK names (SHA-1 is refused there). */
const STRONG_HASHES = new Set<number>([TPM_ALG.SHA256, TPM_ALG.SHA384, TPM_ALG.SHA512]);

/** TPMA_OBJECT bits (Part 2 §8.3). */
export const TPMA_OBJECT = {
  fixedTPM: 1 << 1,
  stClear: 1 << 2,
  fixedParent: 1 << 4,
  sensitiveDataOrigin: 1 << 5,
  userWithAuth: 1 << 6,
  adminWithPolicy: 1 << 7,
  noDA: 1 << 10,
  encryptedDuplication: 1 << 11,
  restricted: 1 << 16,
  decrypt: 1 << 17,
  sign: 1 << 18,
} as const;

/** Largest TPMU_HA (SHA-512): bounds TPM2B_DIGEST; TPM2B_NAME/TPM2B_DATA hold a TPMT_HA (2 + 64). */
const MAX_DIGEST = 64;
const MAX_TPMT_HA = 2 + MAX_DIGEST;
/** tpm2-tss TPM2_NUM_PCR_BANKS and TPM2_PCR_SELECT_MAX. */
const MAX_PCR_BANKS = 16;
const MAX_PCR_SELECT = 4;

/** Human name of a TPM_ALG_ID, for details. */
export function algName(alg: number): string {
  for (const [k, v] of Object.entries(TPM_ALG)) if (v === alg) return k.toLowerCase();
  return `0x${alg.toString(16).padStart(4, '0')}`;
}

/** Node digest name and size (bytes) of a TPM hash algorithm, or undefined if unsupported. */
export function hashInfo(alg: number): { node: string; size: number } | undefined {
  return HASHES[alg];
}

/** A structure failed to unmarshal; `code` is a stable reason code. */
export class TpmParseError extends Error {
  constructor(
    readonly code: ReasonCode,
    message: string,
  ) {
    super(message);
    this.name = 'TpmParseError';
  }
}

/** Bounds-checked big-endian reader over wire bytes. */
class Reader {
  private off = 0;
  constructor(
    private readonly buf: Buffer,
    private readonly truncCode: ReasonCode,
    private readonly what: string,
  ) {}
  get offset(): number {
    return this.off;
  }
  get remaining(): number {
    return this.buf.length - this.off;
  }
  private need(n: number, field: string): void {
    if (this.remaining < n) {
      throw new TpmParseError(
        this.truncCode,
        `${this.what}: ${field} needs ${n} bytes at offset ${this.off}, ${this.remaining} left`,
      );
    }
  }
  u8(field: string): number {
    this.need(1, field);
    return this.buf.readUInt8(this.off++);
  }
  u16(field: string): number {
    this.need(2, field);
    const v = this.buf.readUInt16BE(this.off);
    this.off += 2;
    return v;
  }
  u32(field: string): number {
    this.need(4, field);
    const v = this.buf.readUInt32BE(this.off);
    this.off += 4;
    return v;
  }
  u64(field: string): bigint {
    this.need(8, field);
    const v = this.buf.readBigUInt64BE(this.off);
    this.off += 8;
    return v;
  }
  bytes(n: number, field: string): Buffer {
    this.need(n, field);
    const v = Buffer.from(this.buf.subarray(this.off, this.off + n));
    this.off += n;
    return v;
  }
  /** TPM2B: u16 size then `size` bytes; `size` must be ≤ `max`. */
  tpm2b(field: string, max: number, malformed: ReasonCode): Buffer {
    const size = this.u16(`${field}.size`);
    if (size > max) throw new TpmParseError(malformed, `${this.what}: ${field}.size ${size} exceeds ${max}`);
    return this.bytes(size, field);
  }
  end(trailing: ReasonCode): void {
    if (this.remaining !== 0) {
      throw new TpmParseError(
        trailing,
        `${this.what}: ${this.remaining} trailing byte(s) after offset ${this.off}`,
      );
    }
  }
}

/** One TPMS_PCR_SELECTION (Part 2 §10.6.2) with its selected PCR indices (ascending). */
export interface PcrSelection {
  /** TPMI_ALG_HASH of the PCR bank. */
  hashAlg: number;
  /** Selected PCR indices, ascending (bit i of byte j ⇒ PCR 8j + i). */
  pcrs: number[];
  /** sizeofSelect as marshalled (0 when built by a caller). */
  sizeofSelect?: number;
}

/**
 * Parsed TPMS_ATTEST of a quote (TPM 2.0 Part 2 §10.12 "Attestation Structures":
 * TPMS_ATTEST, TPMS_CLOCK_INFO, TPMS_QUOTE_INFO).
 */
export interface TpmsAttestQuote {
  /** TPM_GENERATED_VALUE. */
  magic: number;
  /** TPM_ST_ATTEST_QUOTE. */
  type: number;
  /** TPM2B_NAME of the signing key: nameAlg (2 bytes) ‖ digest. */
  qualifiedSigner: Buffer;
  /** TPM2B_DATA: the caller's qualifyingData, exact bytes. */
  extraData: Buffer;
  clockInfo: { clock: bigint; resetCount: number; restartCount: number; safe: boolean };
  firmwareVersion: bigint;
  /** TPML_PCR_SELECTION in marshalled order. */
  pcrSelect: PcrSelection[];
  /** TPM2B_DIGEST: hash (of the signing scheme's hash algorithm) over the selected PCRs. */
  pcrDigest: Buffer;
}

function decodeSelect(select: Buffer): number[] {
  const pcrs: number[] = [];
  select.forEach((byte, j) => {
    for (let i = 0; i < 8; i++) if (byte & (1 << i)) pcrs.push(8 * j + i);
  });
  return pcrs;
}

/**
 * Parses a bare TPMS_ATTEST produced by TPM2_Quote — the exact bytes the AK signed, without
 * the TPM2B_ATTEST size prefix (use {@link unwrapTpm2bAttest} first if you have one).
 *
 * Layout (big-endian): magic u32 = 0xff544347, type u16 = 0x8018, qualifiedSigner TPM2B_NAME,
 * extraData TPM2B_DATA, clockInfo {clock u64, resetCount u32, restartCount u32, safe u8 ∈ {0,1}},
 * firmwareVersion u64, TPMS_QUOTE_INFO {TPML_PCR_SELECTION {count u32 ≤ 16, count ×
 * {hash u16, sizeofSelect u8 ≤ 4, pcrSelect[sizeofSelect]}}, pcrDigest TPM2B_DIGEST ≤ 64}.
 * Source: TPM 2.0 Library Part 2 §10.12 (TPMS_ATTEST), §10.6 (PCR selection).
 *
 * @throws TpmParseError with TPM_ATTEST_BAD_MAGIC, TPM_ATTEST_NOT_QUOTE, TPM_ATTEST_TRUNCATED,
 *   TPM_ATTEST_MALFORMED or TPM_ATTEST_TRAILING_BYTES.
 */
export function parseTpmsAttest(bytes: Uint8Array): TpmsAttestQuote {
  const r = new Reader(Buffer.from(bytes), 'TPM_ATTEST_TRUNCATED', 'TPMS_ATTEST');
  const magic = r.u32('magic');
  if (magic !== TPM_GENERATED_VALUE) {
    throw new TpmParseError('TPM_ATTEST_BAD_MAGIC', `TPMS_ATTEST: magic 0x${magic.toString(16)}`);
  }
  const type = r.u16('type');
  if (type !== TPM_ST_ATTEST_QUOTE) {
    throw new TpmParseError(
      'TPM_ATTEST_NOT_QUOTE',
      `TPMS_ATTEST: type 0x${type.toString(16)} is not a quote`,
    );
  }
  const qualifiedSigner = r.tpm2b('qualifiedSigner', MAX_TPMT_HA, 'TPM_ATTEST_MALFORMED');
  const extraData = r.tpm2b('extraData', MAX_TPMT_HA, 'TPM_ATTEST_MALFORMED');
  const clock = r.u64('clockInfo.clock');
  const resetCount = r.u32('clockInfo.resetCount');
  const restartCount = r.u32('clockInfo.restartCount');
  const safe = r.u8('clockInfo.safe');
  if (safe > 1) throw new TpmParseError('TPM_ATTEST_MALFORMED', `TPMS_ATTEST: clockInfo.safe = ${safe}`);
  const firmwareVersion = r.u64('firmwareVersion');
  const count = r.u32('pcrSelect.count');
  if (count > MAX_PCR_BANKS) {
    throw new TpmParseError(
      'TPM_ATTEST_MALFORMED',
      `TPMS_ATTEST: pcrSelect.count ${count} > ${MAX_PCR_BANKS}`,
    );
  }
  const pcrSelect: PcrSelection[] = [];
  for (let i = 0; i < count; i++) {
    const hashAlg = r.u16(`pcrSelect[${i}].hash`);
    const sizeofSelect = r.u8(`pcrSelect[${i}].sizeofSelect`);
    if (sizeofSelect > MAX_PCR_SELECT) {
      throw new TpmParseError(
        'TPM_ATTEST_MALFORMED',
        `TPMS_ATTEST: pcrSelect[${i}].sizeofSelect ${sizeofSelect} > ${MAX_PCR_SELECT}`,
      );
    }
    const select = r.bytes(sizeofSelect, `pcrSelect[${i}].pcrSelect`);
    pcrSelect.push({ hashAlg, pcrs: decodeSelect(select), sizeofSelect });
  }
  const pcrDigest = r.tpm2b('pcrDigest', MAX_DIGEST, 'TPM_ATTEST_MALFORMED');
  r.end('TPM_ATTEST_TRAILING_BYTES');
  return {
    magic,
    type,
    qualifiedSigner,
    extraData,
    clockInfo: { clock, resetCount, restartCount, safe: safe === 1 },
    firmwareVersion,
    pcrSelect,
    pcrDigest,
  };
}

/**
 * Strips the TPM2B_ATTEST wrapper ({u16 size, size bytes}) and returns the TPMS_ATTEST bytes.
 * The size must match the remaining input exactly. Source: Part 2 §10.12 (TPM2B_ATTEST).
 * @throws TpmParseError TPM_ATTEST_TRUNCATED (size too large / short input) or
 *   TPM_ATTEST_TRAILING_BYTES (bytes after the declared size).
 */
export function unwrapTpm2bAttest(bytes: Uint8Array): Buffer {
  const r = new Reader(Buffer.from(bytes), 'TPM_ATTEST_TRUNCATED', 'TPM2B_ATTEST');
  const size = r.u16('size');
  const body = r.bytes(size, 'attestationData');
  r.end('TPM_ATTEST_TRAILING_BYTES');
  return body;
}

/**
 * Parsed TPMT_SIGNATURE (Part 2 §11.3.4) for the schemes an AK can use.
 * - RSASSA (0x0014) / RSAPSS (0x0016): TPMS_SIGNATURE_RSA {hash, sig TPM2B_PUBLIC_KEY_RSA}.
 * - ECDSA (0x0018): TPMS_SIGNATURE_ECC {hash, signatureR, signatureS} (TPM2B_ECC_PARAMETER each,
 *   big-endian, possibly shorter than the curve size).
 */
export type TpmtSignature =
  | { sigAlg: typeof TPM_ALG.RSASSA | typeof TPM_ALG.RSAPSS; hashAlg: number; sig: Buffer }
  | { sigAlg: typeof TPM_ALG.ECDSA; hashAlg: number; r: Buffer; s: Buffer };

/**
 * Parses TPMT_SIGNATURE wire bytes exactly.
 * @throws TpmParseError TPM_SIGNATURE_MALFORMED (short, oversize or trailing input) or
 *   TPM_SIGNATURE_UNSUPPORTED (algorithm other than RSASSA/RSAPSS/ECDSA, or hash other than
 *   SHA-256/384/512).
 */
export function parseTpmtSignature(bytes: Uint8Array): TpmtSignature {
  const r = new Reader(Buffer.from(bytes), 'TPM_SIGNATURE_MALFORMED', 'TPMT_SIGNATURE');
  const sigAlg = r.u16('sigAlg');
  if (sigAlg !== TPM_ALG.RSASSA && sigAlg !== TPM_ALG.RSAPSS && sigAlg !== TPM_ALG.ECDSA) {
    throw new TpmParseError('TPM_SIGNATURE_UNSUPPORTED', `TPMT_SIGNATURE: sigAlg ${algName(sigAlg)}`);
  }
  const hashAlg = r.u16('hash');
  if (!STRONG_HASHES.has(hashAlg)) {
    throw new TpmParseError('TPM_SIGNATURE_UNSUPPORTED', `TPMT_SIGNATURE: hash ${algName(hashAlg)}`);
  }
  if (sigAlg === TPM_ALG.ECDSA) {
    const rr = r.tpm2b('signatureR', 66, 'TPM_SIGNATURE_MALFORMED');
    const ss = r.tpm2b('signatureS', 66, 'TPM_SIGNATURE_MALFORMED');
    r.end('TPM_SIGNATURE_MALFORMED');
    return { sigAlg, hashAlg, r: rr, s: ss };
  }
  const sig = r.tpm2b('sig', 512, 'TPM_SIGNATURE_MALFORMED');
  r.end('TPM_SIGNATURE_MALFORMED');
  return { sigAlg, hashAlg, sig };
}

/** Signing scheme of a key: TPM_ALG_NULL (0x0010) scheme has `hashAlg` null. */
export interface TpmScheme {
  scheme: number;
  hashAlg: number | null;
}

/** Parsed TPMT_PUBLIC of an RSA or ECC key (Part 2 §12.2.4), with the derived node key and name. */
export interface TpmtPublic {
  /** TPM_ALG_RSA (0x0001) or TPM_ALG_ECC (0x0023). */
  type: number;
  nameAlg: number;
  /** TPMA_OBJECT bits (see {@link TPMA_OBJECT}). */
  objectAttributes: number;
  authPolicy: Buffer;
  /** TPMT_SYM_DEF_OBJECT.algorithm (TPM_ALG_NULL for a signing key). */
  symmetric: number;
  scheme: TpmScheme;
  /** RSA: keyBits; ECC: curve size in bits. */
  keyBits: number;
  /** ECC only: TPM_ECC_CURVE. */
  curveId?: number;
  /** Node public key built from `unique` (RSA modulus+exponent, ECC point). */
  key: KeyObject;
  /** TPM name = nameAlg (2 bytes, big-endian) ‖ H_nameAlg(TPMT_PUBLIC bytes) (Part 1 §16). */
  name: Buffer;
  /** The exact TPMT_PUBLIC bytes that were parsed. */
  bytes: Buffer;
}

function readSymDefObject(r: Reader): number {
  const alg = r.u16('parameters.symmetric.algorithm');
  if (alg !== TPM_ALG.NULL) {
    r.u16('parameters.symmetric.keyBits');
    r.u16('parameters.symmetric.mode');
  }
  return alg;
}

function readScheme(r: Reader, field: string): TpmScheme {
  const scheme = r.u16(`${field}.scheme`);
  if (scheme === TPM_ALG.NULL || scheme === TPM_ALG.RSAES) return { scheme, hashAlg: null };
  const hashAlg = r.u16(`${field}.details.hashAlg`);
  if (scheme === TPM_ALG.ECDAA) r.u16(`${field}.details.count`);
  return { scheme, hashAlg };
}

/**
 * Parses TPMT_PUBLIC wire bytes exactly (Part 2 §12.2.4; parameters §12.2.3.5 RSA / §12.2.3.6 ECC;
 * unique §12.2.3.2) and derives the node public key and the TPM name.
 *
 * Supported: RSA 2048/3072/4096 (exponent 0 ⇒ 65537) and ECC NIST P-256/P-384/P-521; nameAlg
 * SHA-256/384/512.
 * @throws TpmParseError AK_PUBLIC_MALFORMED (bad sizes, trailing bytes, key not constructible)
 *   or AK_PUBLIC_UNSUPPORTED (other types, curves, sizes or name algorithms).
 */
export function parseTpmtPublic(bytes: Uint8Array): TpmtPublic {
  const buf = Buffer.from(bytes);
  const r = new Reader(buf, 'AK_PUBLIC_MALFORMED', 'TPMT_PUBLIC');
  const type = r.u16('type');
  const nameAlg = r.u16('nameAlg');
  const nameHash = hashInfo(nameAlg);
  if (!STRONG_HASHES.has(nameAlg) || !nameHash) {
    throw new TpmParseError('AK_PUBLIC_UNSUPPORTED', `TPMT_PUBLIC: nameAlg ${algName(nameAlg)}`);
  }
  const objectAttributes = r.u32('objectAttributes');
  const authPolicy = r.tpm2b('authPolicy', MAX_DIGEST, 'AK_PUBLIC_MALFORMED');
  let key: KeyObject;
  let keyBits: number;
  let curveId: number | undefined;
  let symmetric: number;
  let scheme: TpmScheme;
  if (type === TPM_ALG.RSA) {
    symmetric = readSymDefObject(r);
    scheme = readScheme(r, 'parameters.scheme');
    keyBits = r.u16('parameters.keyBits');
    const exponent = r.u32('parameters.exponent');
    const modulus = r.tpm2b('unique.rsa', 512, 'AK_PUBLIC_MALFORMED');
    r.end('AK_PUBLIC_MALFORMED');
    if (keyBits !== 2048 && keyBits !== 3072 && keyBits !== 4096) {
      throw new TpmParseError('AK_PUBLIC_UNSUPPORTED', `TPMT_PUBLIC: RSA keyBits ${keyBits}`);
    }
    if (modulus.length * 8 !== keyBits || (modulus[0] ?? 0) < 0x80) {
      throw new TpmParseError(
        'AK_PUBLIC_MALFORMED',
        `TPMT_PUBLIC: modulus of ${modulus.length} bytes does not have keyBits ${keyBits}`,
      );
    }
    const e = exponent === 0 ? 65537 : exponent;
    const eBytes = Buffer.alloc(4);
    eBytes.writeUInt32BE(e);
    let i = 0;
    while (i < 3 && eBytes[i] === 0) i++;
    try {
      key = createPublicKey({
        key: { kty: 'RSA', n: b64u(modulus), e: b64u(eBytes.subarray(i)) },
        format: 'jwk',
      });
    } catch (err) {
      throw new TpmParseError(
        'AK_PUBLIC_MALFORMED',
        `TPMT_PUBLIC: RSA key not constructible (${errText(err)})`,
      );
    }
  } else if (type === TPM_ALG.ECC) {
    symmetric = readSymDefObject(r);
    scheme = readScheme(r, 'parameters.scheme');
    curveId = r.u16('parameters.curveID');
    readScheme(r, 'parameters.kdf');
    const x = r.tpm2b('unique.ecc.x', 66, 'AK_PUBLIC_MALFORMED');
    const y = r.tpm2b('unique.ecc.y', 66, 'AK_PUBLIC_MALFORMED');
    r.end('AK_PUBLIC_MALFORMED');
    const curve = ECC_CURVES[curveId];
    if (!curve)
      throw new TpmParseError('AK_PUBLIC_UNSUPPORTED', `TPMT_PUBLIC: ECC curve 0x${curveId.toString(16)}`);
    keyBits = curve.size === 66 ? 521 : curve.size * 8;
    if (x.length > curve.size || y.length > curve.size) {
      throw new TpmParseError(
        'AK_PUBLIC_MALFORMED',
        'TPMT_PUBLIC: ECC point coordinate longer than the curve',
      );
    }
    try {
      key = createPublicKey({
        key: {
          kty: 'EC',
          crv: curve.jwkCrv,
          x: b64u(leftPad(x, curve.size)),
          y: b64u(leftPad(y, curve.size)),
        },
        format: 'jwk',
      });
    } catch (err) {
      throw new TpmParseError(
        'AK_PUBLIC_MALFORMED',
        `TPMT_PUBLIC: ECC point not on the curve (${errText(err)})`,
      );
    }
  } else {
    throw new TpmParseError('AK_PUBLIC_UNSUPPORTED', `TPMT_PUBLIC: type ${algName(type)}`);
  }
  const nameAlgBytes = Buffer.alloc(2);
  nameAlgBytes.writeUInt16BE(nameAlg);
  const name = Buffer.concat([nameAlgBytes, createHash(nameHash.node).update(buf).digest()]);
  return {
    type,
    nameAlg,
    objectAttributes,
    authPolicy,
    symmetric,
    scheme,
    keyBits,
    ...(curveId === undefined ? {} : { curveId }),
    key,
    name,
    bytes: buf,
  };
}

/**
 * Checks the attributes an attestation key must have (Part 2 §8.3, Part 1 §25 "restricted
 * signing keys"): restricted, sign, fixedTPM and fixedParent set; decrypt clear.
 * @returns null when acceptable, else a description of what is wrong.
 */
export function akAttributeProblem(pub: Pick<TpmtPublic, 'objectAttributes'>): string | null {
  const a = pub.objectAttributes;
  const missing = (['restricted', 'sign', 'fixedTPM', 'fixedParent'] as const).filter(
    (k) => (a & TPMA_OBJECT[k]) === 0,
  );
  const problems: string[] = [];
  if (missing.length) problems.push(`missing ${missing.join('+')}`);
  if (a & TPMA_OBJECT.decrypt) problems.push('decrypt is set');
  return problems.length
    ? `objectAttributes 0x${a.toString(16).padStart(8, '0')}: ${problems.join('; ')}`
    : null;
}

function leftPad(b: Buffer, size: number): Buffer {
  return b.length >= size ? b : Buffer.concat([Buffer.alloc(size - b.length), b]);
}

function errText(err: unknown): string {
  return (err instanceof Error ? err.message : String(err)).slice(0, 120);
}

/**
 * Verifies a TPM signature over `message` (the TPMS_ATTEST bytes) under `key`.
 *
 * - The hash is taken from `sig.hashAlg` and the padding from `sig.sigAlg`; never assumed.
 * - RSASSA: PKCS#1 v1.5. RSAPSS: MGF1 with the same hash, salt length = digest length (the
 *   TPM's choice; Part 1 Annex B.7). Signature length must equal the modulus size.
 * - ECDSA: r and s are left-padded to the curve size (they may be shorter); longer values are
 *   refused. High-S signatures are accepted (TPMs do not normalise S).
 *
 * @returns true when the signature verifies; false when it does not, or the key type does not
 *   fit the scheme.
 * @throws TpmParseError TPM_SIGNATURE_LENGTH_INVALID for an RSA signature whose length is not
 *   the modulus size, or an ECDSA r/s longer than the curve size.
 */
export function verifyTpmSignature(message: Uint8Array, sig: TpmtSignature, key: KeyObject): boolean {
  const hash = hashInfo(sig.hashAlg);
  if (!hash || !STRONG_HASHES.has(sig.hashAlg)) return false;
  const details = key.asymmetricKeyDetails ?? {};
  if (sig.sigAlg === TPM_ALG.ECDSA) {
    if (key.asymmetricKeyType !== 'ec') return false;
    const curve = Object.values(ECC_CURVES).find((c) => c.nodeCurve === details.namedCurve);
    if (!curve) return false;
    if (sig.r.length > curve.size || sig.s.length > curve.size) {
      throw new TpmParseError('TPM_SIGNATURE_LENGTH_INVALID', `ECDSA r/s longer than ${curve.size} bytes`);
    }
    const p1363 = Buffer.concat([leftPad(sig.r, curve.size), leftPad(sig.s, curve.size)]);
    return cryptoVerify(hash.node, message, { key, dsaEncoding: 'ieee-p1363' }, p1363);
  }
  if (key.asymmetricKeyType !== 'rsa') return false;
  const modBytes = Math.ceil((details.modulusLength ?? 0) / 8);
  if (sig.sig.length !== modBytes) {
    throw new TpmParseError(
      'TPM_SIGNATURE_LENGTH_INVALID',
      `RSA signature is ${sig.sig.length} bytes, modulus is ${modBytes} bytes`,
    );
  }
  if (sig.sigAlg === TPM_ALG.RSAPSS) {
    return cryptoVerify(
      hash.node,
      message,
      { key, padding: cryptoConstants.RSA_PKCS1_PSS_PADDING, saltLength: hash.size },
      sig.sig,
    );
  }
  return cryptoVerify(hash.node, message, { key, padding: cryptoConstants.RSA_PKCS1_PADDING }, sig.sig);
}

/** One supplied PCR value. */
export interface PcrValue {
  /** TPM_ALG_ID of the bank. */
  hashAlg: number;
  index: number;
  value: Uint8Array;
}

/**
 * Recomputes a quote's pcrDigest: H_digestAlg(concatenation of the selected PCR values), banks in
 * the selection's marshalled order and PCRs ascending within each bank (Part 3 §18.4 TPM2_Quote,
 * Part 1 §17.5.2). `digestAlg` is the hash of the quote's signing scheme, which may differ from the
 * bank hash (e.g. a SHA-384-signed quote over SHA-256 PCRs carries a 48-byte digest).
 * Supplied values may be listed in any order; each (bank, index) may appear once.
 * @throws TpmParseError PCR_VALUE_MISSING, PCR_VALUES_MALFORMED (duplicate, wrong length,
 *   unsupported bank) or PCR_VALUE_UNSELECTED (a supplied value the selection does not cover).
 */
export function computePcrDigest(
  selection: readonly PcrSelection[],
  values: readonly PcrValue[],
  digestAlg: number,
): Buffer {
  const digest = hashInfo(digestAlg);
  if (!digest)
    throw new TpmParseError('PCR_VALUES_MALFORMED', `unsupported digest hash ${algName(digestAlg)}`);
  const byKey = new Map<string, Uint8Array>();
  for (const v of values) {
    const k = `${v.hashAlg}:${v.index}`;
    if (byKey.has(k))
      throw new TpmParseError('PCR_VALUES_MALFORMED', `PCR ${algName(v.hashAlg)}:${v.index} twice`);
    const bank = hashInfo(v.hashAlg);
    if (!bank) throw new TpmParseError('PCR_VALUES_MALFORMED', `unsupported PCR bank ${algName(v.hashAlg)}`);
    if (v.value.length !== bank.size) {
      throw new TpmParseError(
        'PCR_VALUES_MALFORMED',
        `PCR ${algName(v.hashAlg)}:${v.index} is ${v.value.length} bytes, expected ${bank.size}`,
      );
    }
    byKey.set(k, v.value);
  }
  const h = createHash(digest.node);
  const used = new Set<string>();
  for (const sel of selection) {
    for (const index of sel.pcrs) {
      const k = `${sel.hashAlg}:${index}`;
      const v = byKey.get(k);
      if (!v)
        throw new TpmParseError('PCR_VALUE_MISSING', `no value for PCR ${algName(sel.hashAlg)}:${index}`);
      used.add(k);
      h.update(v);
    }
  }
  for (const k of byKey.keys()) {
    if (!used.has(k)) {
      const [alg, index] = k.split(':');
      throw new TpmParseError('PCR_VALUE_UNSELECTED', `PCR ${algName(Number(alg))}:${index} is not selected`);
    }
  }
  return h.digest();
}

/** Non-empty banks of a selection as `alg:[i,j]` strings, sorted, for exact set comparison. */
function selectionKey(sel: readonly PcrSelection[]): string {
  return sel
    .filter((s) => s.pcrs.length > 0)
    .map((s) => `${algName(s.hashAlg)}:[${[...s.pcrs].sort((a, b) => a - b).join(',')}]`)
    .sort()
    .join(' ');
}

/**
 * True when two selections cover exactly the same (bank, PCR) set (banks without PCRs ignored,
 * duplicate banks never equal to a single bank).
 */
export function sameSelection(a: readonly PcrSelection[], b: readonly PcrSelection[]): boolean {
  return selectionKey(a) === selectionKey(b);
}

/** Printable form of a selection, e.g. `sha256:[0,1,2,7]`. */
export function describeSelection(sel: readonly PcrSelection[]): string {
  return selectionKey(sel) || '(empty)';
}

/** Input of {@link verifyTpmQuote}. All byte strings are wire format. */
export interface TpmQuoteInput {
  /** TPMS_ATTEST bytes exactly as signed (no TPM2B prefix). */
  attest: Uint8Array;
  /** TPMT_SIGNATURE wire bytes, or an already-parsed signature (e.g. a raw `-f plain` RSA one). */
  signature: Uint8Array | TpmtSignature;
  /**
   * The AK: its TPMT_PUBLIC wire bytes (attributes, scheme and name are then checked), or a bare
   * node public key (e.g. from a certificate; those checks are then `absent`).
   */
  ak: { public: Uint8Array } | { key: KeyObject };
  /**
   * The Qualified Name of the AK's parent (TPM 2.0 Part 1 §16): for a primary key, the 4-byte
   * hierarchy handle (e.g. TPM_RH_ENDORSEMENT 0x4000000B). When given, qualifiedSigner must equal
   * the AK's Qualified Name nameAlg ‖ H_nameAlg(parentQN ‖ Name); when absent, it must equal the
   * AK's Name.
   */
  akParentQualifiedName?: Uint8Array;
  /** Expected extraData (qualifyingData), compared at exact length; null skips (not-applicable). */
  expectedExtraData: Uint8Array | null;
  /** Description of the expected extraData for details, e.g. "SHA-256(REPORT_DATA)". */
  expectedExtraDataLabel?: string;
  /** PCR values to recompute pcrDigest from; undefined ⇒ the digest check is `absent`. */
  pcrValues?: readonly PcrValue[];
  /** The selection the evidence says it covers (e.g. the claim's pcr_selection). */
  declaredSelection?: readonly PcrSelection[];
  /** The verifier's policy: the quote must select exactly this set. */
  requiredSelection?: readonly PcrSelection[];
}

/** Result of {@link verifyTpmQuote}: the checks, and the parsed structures where they parsed. */
export interface TpmQuoteResult {
  checks: CheckResult[];
  attest?: TpmsAttestQuote;
  signature?: TpmtSignature;
  akPublic?: TpmtPublic;
}

function parseOr<T>(
  fn: () => T,
  fallback: ReasonCode,
): { ok: true; value: T } | { ok: false; code: ReasonCode; detail: string } {
  try {
    return { ok: true, value: fn() };
  } catch (err) {
    if (err instanceof TpmParseError) return { ok: false, code: err.code, detail: err.message };
    return { ok: false, code: fallback, detail: errText(err) };
  }
}

/**
 * Verifies a TPM2_Quote and returns one check per property, in this order (ids stable):
 * `tpm.attest_parse`, `tpm.signature_parse`, `tpm.ak_public`, `tpm.ak_attributes`,
 * `tpm.signature_scheme`, `evidence.signature` (quote signature under the AK),
 * `evidence.binding` (extraData equals the expected value exactly), `tpm.qualified_signer`,
 * `tpm.pcr_selection`, `tpm.pcr_policy`, `tpm.pcr_digest`.
 *
 * A check whose input did not parse fails with the parse reason (never skipped). Checks the
 * caller supplied no input for are `absent` (evidence missing) or `not-applicable` (no policy).
 * The AK certificate chain is not checked here.
 */
export function verifyTpmQuote(input: TpmQuoteInput): TpmQuoteResult {
  const checks: CheckResult[] = [];
  const out: TpmQuoteResult = { checks };

  // 1. TPMS_ATTEST
  const attestR = parseOr(() => parseTpmsAttest(input.attest), 'TPM_ATTEST_MALFORMED');
  if (attestR.ok) {
    out.attest = attestR.value;
    checks.push(pass('tpm.attest_parse', `TPMS_ATTEST quote, ${input.attest.length} bytes consumed exactly`));
  } else {
    checks.push(fail('tpm.attest_parse', attestR.code, attestR.detail));
  }
  const attest = out.attest;

  // 2. TPMT_SIGNATURE
  const sigInput = input.signature;
  const sigR =
    sigInput instanceof Uint8Array
      ? parseOr(() => parseTpmtSignature(sigInput), 'TPM_SIGNATURE_MALFORMED')
      : { ok: true as const, value: sigInput };
  if (sigR.ok) {
    out.signature = sigR.value;
    checks.push(
      pass('tpm.signature_parse', `${algName(sigR.value.sigAlg)} with ${algName(sigR.value.hashAlg)}`),
    );
  } else {
    checks.push(fail('tpm.signature_parse', sigR.code, sigR.detail));
  }
  const sig = out.signature;

  // 3. AK public area, attributes, scheme
  let key: KeyObject | undefined;
  let schemeOk = true;
  if ('public' in input.ak) {
    const akBytes = input.ak.public;
    const akR = parseOr(() => parseTpmtPublic(akBytes), 'AK_PUBLIC_MALFORMED');
    if (akR.ok) {
      const ak = akR.value;
      out.akPublic = ak;
      key = ak.key;
      checks.push(
        pass('tpm.ak_public', `${algName(ak.type)} ${ak.keyBits}-bit AK, name ${ak.name.toString('hex')}`),
      );
      const problem = akAttributeProblem(ak);
      checks.push(
        problem
          ? fail('tpm.ak_attributes', 'AK_ATTRIBUTES_INVALID', problem)
          : pass('tpm.ak_attributes', 'restricted, sign, fixedTPM, fixedParent set; decrypt clear'),
      );
      if (!sig) {
        schemeOk = false;
        checks.push(fail('tpm.signature_scheme', 'DEPENDENCY_FAILED', 'TPMT_SIGNATURE did not parse'));
      } else if (ak.scheme.scheme !== sig.sigAlg || ak.scheme.hashAlg !== sig.hashAlg) {
        schemeOk = false;
        checks.push(
          fail(
            'tpm.signature_scheme',
            'SIGNATURE_SCHEME_MISMATCH',
            `quote signed with ${algName(sig.sigAlg)}/${algName(sig.hashAlg)}, AK scheme is ` +
              `${algName(ak.scheme.scheme)}/${ak.scheme.hashAlg === null ? 'none' : algName(ak.scheme.hashAlg)}`,
          ),
        );
      } else {
        checks.push(
          pass(
            'tpm.signature_scheme',
            `matches the AK scheme ${algName(sig.sigAlg)}/${algName(sig.hashAlg)}`,
          ),
        );
      }
    } else {
      schemeOk = false;
      checks.push(fail('tpm.ak_public', akR.code, akR.detail));
      checks.push(fail('tpm.ak_attributes', 'DEPENDENCY_FAILED', 'AK public area did not parse'));
      checks.push(fail('tpm.signature_scheme', 'DEPENDENCY_FAILED', 'AK public area did not parse'));
    }
  } else {
    key = input.ak.key;
    const why = 'only a bare AK key was supplied (no TPMT_PUBLIC)';
    checks.push(check('tpm.ak_public', 'absent', 'AK_PUBLIC_NOT_SUPPLIED', why));
    checks.push(check('tpm.ak_attributes', 'absent', 'AK_PUBLIC_NOT_SUPPLIED', why));
    checks.push(check('tpm.signature_scheme', 'absent', 'AK_PUBLIC_NOT_SUPPLIED', why));
  }

  // 4. the signature itself — over the raw attest bytes, whether or not they parsed
  if (!sig || !key) {
    checks.push(
      fail(
        HARDWARE_SIGNATURE_CHECK,
        'DEPENDENCY_FAILED',
        `${!sig ? 'signature' : 'AK public area'} did not parse`,
      ),
    );
  } else if (!schemeOk) {
    checks.push(
      fail(HARDWARE_SIGNATURE_CHECK, 'SIGNATURE_SCHEME_MISMATCH', 'not verified under a mismatched scheme'),
    );
  } else {
    const v = parseOr(() => verifyTpmSignature(input.attest, sig, key), 'QUOTE_SIGNATURE_INVALID');
    if (!v.ok) checks.push(fail(HARDWARE_SIGNATURE_CHECK, v.code, v.detail));
    else if (!v.value) {
      checks.push(
        fail(
          HARDWARE_SIGNATURE_CHECK,
          'QUOTE_SIGNATURE_INVALID',
          `${algName(sig.sigAlg)}/${algName(sig.hashAlg)} signature does not verify over the ${input.attest.length} attest bytes`,
        ),
      );
    } else {
      checks.push(
        pass(
          HARDWARE_SIGNATURE_CHECK,
          `TPM quote signature (${algName(sig.sigAlg)}/${algName(sig.hashAlg)}) verifies under the AK`,
        ),
      );
    }
  }

  // 5. extraData (exact length)
  const label = input.expectedExtraDataLabel ?? 'expected qualifyingData';
  if (input.expectedExtraData === null) {
    checks.push(
      check(HARDWARE_BINDING_CHECK, 'not-applicable', 'NOT_SUPPLIED', 'no expected extraData supplied'),
    );
  } else if (!attest) {
    checks.push(fail(HARDWARE_BINDING_CHECK, 'DEPENDENCY_FAILED', 'TPMS_ATTEST did not parse'));
  } else {
    const want = Buffer.from(input.expectedExtraData);
    if (attest.extraData.length === want.length && attest.extraData.equals(want)) {
      checks.push(pass(HARDWARE_BINDING_CHECK, `extraData equals ${label} (${want.length} bytes)`));
    } else {
      checks.push(
        fail(
          HARDWARE_BINDING_CHECK,
          'QUOTE_NONCE_MISMATCH',
          `extraData (${attest.extraData.length} bytes) is not ${label} (${want.length} bytes): the quote is for another binding`,
        ),
      );
    }
  }

  // 6. qualifiedSigner
  if (!attest) {
    checks.push(fail('tpm.qualified_signer', 'DEPENDENCY_FAILED', 'TPMS_ATTEST did not parse'));
  } else if (!('public' in input.ak)) {
    checks.push(
      check(
        'tpm.qualified_signer',
        'absent',
        'AK_PUBLIC_NOT_SUPPLIED',
        'AK name unknown without TPMT_PUBLIC',
      ),
    );
  } else if (!out.akPublic) {
    checks.push(fail('tpm.qualified_signer', 'DEPENDENCY_FAILED', 'AK public area did not parse'));
  } else {
    const name = out.akPublic.name;
    let expected: Buffer | null = name;
    let label = 'the AK name';
    if (input.akParentQualifiedName) {
      const alg = name.readUInt16BE(0);
      const h = hashInfo(alg);
      expected = h
        ? Buffer.concat([
            name.subarray(0, 2),
            createHash(h.node).update(input.akParentQualifiedName).update(name).digest(),
          ])
        : null;
      label = `the AK qualified name under parent ${Buffer.from(input.akParentQualifiedName).toString('hex')}`;
    }
    if (!expected || !attest.qualifiedSigner.equals(expected)) {
      checks.push(
        fail(
          'tpm.qualified_signer',
          'QUALIFIED_SIGNER_MISMATCH',
          `qualifiedSigner ${attest.qualifiedSigner.toString('hex').slice(0, 70)} is not ${label}`,
        ),
      );
    } else {
      checks.push(pass('tpm.qualified_signer', `qualifiedSigner equals ${label}`));
    }
  }

  // 7. PCR selection as declared alongside the evidence
  if (!input.declaredSelection) {
    checks.push(check('tpm.pcr_selection', 'absent', 'NOT_SUPPLIED', 'no declared PCR selection supplied'));
  } else if (!attest) {
    checks.push(fail('tpm.pcr_selection', 'DEPENDENCY_FAILED', 'TPMS_ATTEST did not parse'));
  } else if (!sameSelection(attest.pcrSelect, input.declaredSelection)) {
    checks.push(
      fail(
        'tpm.pcr_selection',
        'PCR_SELECTION_MISMATCH',
        `quote selects ${describeSelection(attest.pcrSelect)}, evidence declares ${describeSelection(input.declaredSelection)}`,
      ),
    );
  } else {
    checks.push(pass('tpm.pcr_selection', `quote selects ${describeSelection(attest.pcrSelect)}`));
  }

  // 8. PCR policy
  if (!input.requiredSelection) {
    checks.push(check('tpm.pcr_policy', 'not-applicable', 'NO_PCR_POLICY', 'no required PCR selection'));
  } else if (!attest) {
    checks.push(fail('tpm.pcr_policy', 'DEPENDENCY_FAILED', 'TPMS_ATTEST did not parse'));
  } else if (!sameSelection(attest.pcrSelect, input.requiredSelection)) {
    checks.push(
      fail(
        'tpm.pcr_policy',
        'PCR_POLICY_MISMATCH',
        `quote selects ${describeSelection(attest.pcrSelect)}, policy requires exactly ${describeSelection(input.requiredSelection)}`,
      ),
    );
  } else {
    checks.push(pass('tpm.pcr_policy', `selection is exactly ${describeSelection(input.requiredSelection)}`));
  }

  // 9. pcrDigest recomputed in selection order with the signing scheme's hash
  if (!input.pcrValues) {
    checks.push(check('tpm.pcr_digest', 'absent', 'NOT_SUPPLIED', 'no PCR values supplied'));
  } else if (!attest || !sig) {
    checks.push(
      fail('tpm.pcr_digest', 'DEPENDENCY_FAILED', `${!attest ? 'TPMS_ATTEST' : 'signature'} did not parse`),
    );
  } else {
    const values = input.pcrValues;
    const d = parseOr(() => computePcrDigest(attest.pcrSelect, values, sig.hashAlg), 'PCR_VALUES_MALFORMED');
    if (!d.ok) checks.push(fail('tpm.pcr_digest', d.code, d.detail));
    else if (!d.value.equals(attest.pcrDigest)) {
      checks.push(
        fail(
          'tpm.pcr_digest',
          'PCR_DIGEST_MISMATCH',
          `${algName(sig.hashAlg)} over ${describeSelection(attest.pcrSelect)} is ${d.value.toString('hex')}, quote has ${attest.pcrDigest.toString('hex')}`,
        ),
      );
    } else {
      checks.push(
        pass(
          'tpm.pcr_digest',
          `${algName(sig.hashAlg)} over ${describeSelection(attest.pcrSelect)} equals pcrDigest`,
        ),
      );
    }
  }
  return out;
}

/**
 * The `tpm.pcr_values` check: each pinned SHA-256 PCR (reference values, index → allowed hex
 * values) must have a supplied value among the allowed ones, and those values must be the
 * quoted ones (`tpm.pcr_digest` passed, found in `checks`).
 */
export function pcrPinsCheck(
  pins: Record<string, string[]>,
  values: readonly PcrValue[],
  checks: readonly CheckResult[],
): CheckResult {
  const bad = Object.entries(pins).filter(([i, allowed]) => {
    const v = values.find((p) => p.hashAlg === TPM_ALG.SHA256 && p.index === Number(i));
    return !v || !allowed.includes(Buffer.from(v.value).toString('hex'));
  });
  if (bad.length)
    return fail(
      'tpm.pcr_values',
      'MEASUREMENT_NOT_ALLOWED',
      `PCR ${bad.map(([i]) => i).join(', ')} not an expected value`,
    );
  if (checks.find((c) => c.id === 'tpm.pcr_digest')?.status !== 'pass')
    return fail('tpm.pcr_values', 'DEPENDENCY_FAILED', 'the PCR values are not the quoted ones');
  return pass('tpm.pcr_values', `PCR ${Object.keys(pins).join(', ')} have expected values (and are quoted)`);
}
