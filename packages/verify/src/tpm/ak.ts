/**
 * The verifier's view of TPM key material: an AK's TPMT_PUBLIC (parsed by abi/tpm, then
 * checked against what this verifier accepts and turned into a public key and a TPM Name)
 * and TPMT_SIGNATURE restricted to strong hashes. Sources: TPM 2.0 Part 2 §12.2.4
 * (TPMT_PUBLIC), §11.3.4 (TPMT_SIGNATURE); Part 1 §16 (Names).
 */
import { AbiError } from '../abi/errors.js';
import { algName, ECC_COORDINATE_SIZE, TPM_ALG } from '../abi/tpm/constants.js';
import {
  type TpmtPublic as AbiTpmtPublic,
  parseTpmtPublic as parseAbiTpmtPublic,
} from '../abi/tpm/public.js';
import { parseTpmtSignature as parseAbiTpmtSignature, type TpmtSignature } from '../abi/tpm/signature.js';
import { digest, hashInfo } from '../crypto/hash.js';
import { ecPublicKey, type KeyObject, rsaPublicKey } from '../crypto/keys.js';

/** Hashes accepted for signatures and AK names (SHA-1 is refused there). */
export const STRONG_HASHES: ReadonlySet<number> = new Set<number>([
  TPM_ALG.SHA256,
  TPM_ALG.SHA384,
  TPM_ALG.SHA512,
]);

/** An AK's TPMT_PUBLIC with the derived public key and TPM Name. */
export interface TpmtPublic extends AbiTpmtPublic {
  /** RSA: keyBits; ECC: curve size in bits. */
  keyBits: number;
  /** ECC only: TPM_ECC_CURVE. */
  curveId?: number;
  /** Public key built from `unique` (RSA modulus + exponent, ECC point). */
  key: KeyObject;
  /** TPM Name = nameAlg (2 bytes, big-endian) ‖ H_nameAlg(TPMT_PUBLIC bytes) (Part 1 §16). */
  name: Buffer;
}

const pubError = (code: 'AK_PUBLIC_MALFORMED' | 'AK_PUBLIC_UNSUPPORTED', msg: string, field: string) =>
  new AbiError(code, `TPMT_PUBLIC: ${msg}`, 'TPMT_PUBLIC', field);

function rsaKey(p: AbiTpmtPublic & { rsa: NonNullable<AbiTpmtPublic['rsa']> }): {
  key: KeyObject;
  keyBits: number;
} {
  const { keyBits, modulus, exponent } = p.rsa;
  if (keyBits !== 2048 && keyBits !== 3072 && keyBits !== 4096) {
    throw pubError('AK_PUBLIC_UNSUPPORTED', `RSA keyBits ${keyBits}`, 'parameters.keyBits');
  }
  if (modulus.length * 8 !== keyBits || (modulus[0] ?? 0) < 0x80) {
    throw pubError(
      'AK_PUBLIC_MALFORMED',
      `modulus of ${modulus.length} bytes does not have keyBits ${keyBits}`,
      'unique.rsa',
    );
  }
  const k = rsaPublicKey(modulus, exponent);
  if (!k.ok) throw pubError('AK_PUBLIC_MALFORMED', `RSA key not constructible (${k.detail})`, 'unique.rsa');
  return { key: k.key, keyBits };
}

function eccKey(ecc: NonNullable<AbiTpmtPublic['ecc']>): { key: KeyObject; keyBits: number } {
  const size = ECC_COORDINATE_SIZE[ecc.curveId];
  if (size !== 32 && size !== 48 && size !== 66) {
    throw pubError('AK_PUBLIC_UNSUPPORTED', `ECC curve 0x${ecc.curveId.toString(16)}`, 'parameters.curveID');
  }
  if (ecc.x.length > size || ecc.y.length > size) {
    throw pubError('AK_PUBLIC_MALFORMED', 'ECC point coordinate longer than the curve', 'unique.ecc');
  }
  const k = ecPublicKey(ecc.x, ecc.y, size);
  if (!k.ok) throw pubError('AK_PUBLIC_MALFORMED', `ECC point not on the curve (${k.detail})`, 'unique.ecc');
  return { key: k.key, keyBits: size === 66 ? 521 : size * 8 };
}

/**
 * Parses an AK's TPMT_PUBLIC wire bytes exactly (abi/tpm) and derives its public key and Name.
 * Supported: RSA 2048/3072/4096 (exponent 0 ⇒ 65537) and ECC NIST P-256/P-384/P-521; nameAlg
 * SHA-256/384/512. Source: TPM 2.0 Part 2 §12.2.4, §12.2.3.5, §12.2.3.6; Part 1 §16.
 * @throws AbiError AK_PUBLIC_MALFORMED (bad sizes, trailing bytes, key not constructible) or
 *   AK_PUBLIC_UNSUPPORTED (other types, curves, sizes or name algorithms).
 */
export function parseTpmtPublic(bytes: Uint8Array): TpmtPublic {
  const p = parseAbiTpmtPublic(bytes);
  const nameHash = hashInfo(p.nameAlg);
  if (!STRONG_HASHES.has(p.nameAlg) || !nameHash) {
    throw pubError('AK_PUBLIC_UNSUPPORTED', `nameAlg ${algName(p.nameAlg)}`, 'nameAlg');
  }
  const { key, keyBits } = p.rsa
    ? rsaKey({ ...p, rsa: p.rsa })
    : eccKey(p.ecc as NonNullable<AbiTpmtPublic['ecc']>);
  const nameAlg = Buffer.alloc(2);
  nameAlg.writeUInt16BE(p.nameAlg);
  const name = Buffer.concat([nameAlg, digest(nameHash.node, p.bytes)]);
  return { ...p, keyBits, ...(p.ecc ? { curveId: p.ecc.curveId } : {}), key, name };
}

/**
 * Parses TPMT_SIGNATURE wire bytes exactly (abi/tpm) and refuses hashes other than
 * SHA-256/384/512.
 * @throws AbiError TPM_SIGNATURE_MALFORMED or TPM_SIGNATURE_UNSUPPORTED.
 */
export function parseTpmtSignature(bytes: Uint8Array): TpmtSignature {
  const sig = parseAbiTpmtSignature(bytes);
  if (!STRONG_HASHES.has(sig.hashAlg)) {
    throw new AbiError(
      'TPM_SIGNATURE_UNSUPPORTED',
      `TPMT_SIGNATURE: hash ${algName(sig.hashAlg)}`,
      'TPMT_SIGNATURE',
      'hash',
      2,
    );
  }
  return sig;
}
