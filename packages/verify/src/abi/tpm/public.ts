/**
 * TPMT_PUBLIC (TPM 2.0 Part 2 §12.2.4) of RSA and ECC keys — parameters §12.2.3.5
 * (TPMS_RSA_PARMS) / §12.2.3.6 (TPMS_ECC_PARMS), unique §12.2.3.2 — and TPMA_OBJECT (§8.3)
 * with the one attestation-key attribute rule ({@link akAttributeProblem}).
 *
 * Parsing is structural: every field is read and bounded, nothing is interpreted as a key
 * (building a public key from `rsa` / `ecc` is the verifier's crypto module's job).
 */
import { ByteReader } from '../reader.js';
import { algName, MAX_DIGEST, MAX_ECC_KEY_BYTES, MAX_RSA_KEY_BYTES, TPM_ALG } from './constants.js';

/** TPMA_OBJECT bits (Part 2 §8.3.2). */
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

/** A key's scheme (TPMT_RSA_SCHEME / TPMT_ECC_SCHEME / TPMT_KDF_SCHEME): TPM_ALG_NULL ⇒ no hash. */
export interface TpmScheme {
  scheme: number;
  /** The scheme's hashAlg; null for TPM_ALG_NULL and RSAES (which carry no details). */
  hashAlg: number | null;
}

/** TPMT_SYM_DEF_OBJECT of a storage key; null when its algorithm is TPM_ALG_NULL. */
export interface TpmSymDef {
  algorithm: number;
  keyBits: number;
  mode: number;
}

/** Parsed TPMT_PUBLIC of an RSA or ECC key. */
export interface TpmtPublic {
  /** TPM_ALG_RSA (0x0001) or TPM_ALG_ECC (0x0023). */
  type: number;
  nameAlg: number;
  /** TPMA_OBJECT bits (see {@link TPMA_OBJECT}). */
  objectAttributes: number;
  authPolicy: Buffer;
  symmetric: TpmSymDef | null;
  scheme: TpmScheme;
  /** RSA: TPMS_RSA_PARMS.keyBits, exponent (0 ⇒ 65537) and unique.rsa (the modulus). */
  rsa?: { keyBits: number; exponent: number; modulus: Buffer };
  /** ECC: TPMS_ECC_PARMS.curveID, kdf and unique.ecc (x, y, big-endian, possibly short). */
  ecc?: { curveId: number; kdf: TpmScheme; x: Buffer; y: Buffer };
  /** The exact TPMT_PUBLIC bytes that were parsed (hashed into the Name). */
  bytes: Buffer;
}

function readSymDef(r: ByteReader): TpmSymDef | null {
  const algorithm = r.u16('parameters.symmetric.algorithm');
  if (algorithm === TPM_ALG.NULL) return null;
  return {
    algorithm,
    keyBits: r.u16('parameters.symmetric.keyBits'),
    mode: r.u16('parameters.symmetric.mode'),
  };
}

function readScheme(r: ByteReader, field: string): TpmScheme {
  const scheme = r.u16(`${field}.scheme`);
  if (scheme === TPM_ALG.NULL || scheme === TPM_ALG.RSAES) return { scheme, hashAlg: null };
  const hashAlg = r.u16(`${field}.details.hashAlg`);
  if (scheme === TPM_ALG.ECDAA) r.u16(`${field}.details.count`);
  return { scheme, hashAlg };
}

/**
 * Parses TPMT_PUBLIC wire bytes exactly: type u16, nameAlg u16, objectAttributes u32,
 * authPolicy TPM2B_DIGEST, parameters (symmetric, scheme, then RSA keyBits u16 + exponent u32,
 * or ECC curveID u16 + kdf), unique (RSA TPM2B modulus ≤ 512 bytes; ECC x, y TPM2B ≤ 66 bytes).
 * @throws AbiError AK_PUBLIC_MALFORMED (short, oversize or trailing input) or
 *   AK_PUBLIC_UNSUPPORTED (a type other than RSA or ECC).
 */
export function parseTpmtPublic(bytes: Uint8Array): TpmtPublic {
  const r = new ByteReader(bytes, {
    structure: 'TPMT_PUBLIC',
    truncated: 'AK_PUBLIC_MALFORMED',
    malformed: 'AK_PUBLIC_MALFORMED',
    trailing: 'AK_PUBLIC_MALFORMED',
  });
  const type = r.u16('type');
  const nameAlg = r.u16('nameAlg');
  const objectAttributes = r.u32('objectAttributes');
  const authPolicy = r.tpm2b('authPolicy', MAX_DIGEST);
  if (type !== TPM_ALG.RSA && type !== TPM_ALG.ECC) {
    throw r.error('AK_PUBLIC_UNSUPPORTED', `TPMT_PUBLIC: type ${algName(type)}`, 'type', 0);
  }
  const symmetric = readSymDef(r);
  const scheme = readScheme(r, 'parameters.scheme');
  const base = { type, nameAlg, objectAttributes, authPolicy, symmetric, scheme };
  if (type === TPM_ALG.RSA) {
    const keyBits = r.u16('parameters.keyBits');
    const exponent = r.u32('parameters.exponent');
    const modulus = r.tpm2b('unique.rsa', MAX_RSA_KEY_BYTES);
    r.end();
    return { ...base, rsa: { keyBits, exponent, modulus }, bytes: Buffer.from(bytes) };
  }
  const curveId = r.u16('parameters.curveID');
  const kdf = readScheme(r, 'parameters.kdf');
  const x = r.tpm2b('unique.ecc.x', MAX_ECC_KEY_BYTES);
  const y = r.tpm2b('unique.ecc.y', MAX_ECC_KEY_BYTES);
  r.end();
  return { ...base, ecc: { curveId, kdf, x, y }, bytes: Buffer.from(bytes) };
}

/** The attributes an attestation key must have, as [bit, must be set]. */
const AK_ATTRIBUTES: readonly [keyof typeof TPMA_OBJECT, boolean][] = [
  ['restricted', true],
  ['sign', true],
  ['fixedTPM', true],
  ['fixedParent', true],
  ['sensitiveDataOrigin', true],
  ['decrypt', false],
];

/**
 * The one rule for attestation-key attributes (TPM 2.0 Part 2 §8.3.3; Part 1 §25 restricted
 * signing keys; TCG "TPM 2.0 Keys for Device Identity and Attestation" §7.3 AK templates):
 * restricted, sign, fixedTPM, fixedParent and sensitiveDataOrigin set, decrypt clear.
 * sensitiveDataOrigin is required because a key whose private part the TPM did not generate
 * may exist outside the TPM, and then anything could have produced a "TPM_GENERATED" quote.
 * @returns null when acceptable, else which bits are wrong, e.g.
 *   `AK attributes 0x00050072: restricted must be set, decrypt must be clear`.
 */
export function akAttributeProblem(objectAttributes: number): string | null {
  const wrong = AK_ATTRIBUTES.filter(([bit, want]) => ((objectAttributes & TPMA_OBJECT[bit]) !== 0) !== want);
  if (wrong.length === 0) return null;
  return `AK attributes 0x${(objectAttributes >>> 0).toString(16).padStart(8, '0')}: ${wrong
    .map(([bit, want]) => `${bit} must be ${want ? 'set' : 'clear'}`)
    .join(', ')}`;
}

/** The AK attribute rule in words, for pass details. */
export const AK_ATTRIBUTE_RULE =
  'restricted, sign, fixedTPM, fixedParent, sensitiveDataOrigin set; decrypt clear';
