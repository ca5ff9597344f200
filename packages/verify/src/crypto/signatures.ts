/**
 * Signature verification for the verifier: ECDSA with IEEE P1363 (r‖s) signatures (SEV-SNP,
 * TDX, TPM ECDSA after padding) and RSA PKCS#1 v1.5 / PSS (TPM RSASSA / RSAPSS, Part 1 Annex B.7).
 */
import { constants, type KeyObject, verify } from 'node:crypto';
import type { HashName } from './hash.js';

/** ECDSA over `data` with `hash`; `p1363` = r ‖ s at the curve size. False on any error. */
export function verifyEcdsaP1363(
  hash: HashName,
  data: Uint8Array,
  key: KeyObject,
  p1363: Uint8Array,
): boolean {
  try {
    return verify(hash, data, { key, dsaEncoding: 'ieee-p1363' }, p1363);
  } catch {
    return false;
  }
}

/** RSA PKCS#1 v1.5 over `data` with `hash`. */
export function verifyRsaPkcs1(hash: HashName, data: Uint8Array, key: KeyObject, sig: Uint8Array): boolean {
  return verify(hash, data, { key, padding: constants.RSA_PKCS1_PADDING }, sig);
}

/** RSA-PSS over `data` with `hash`, MGF1 with the same hash, salt length `saltLength`. */
export function verifyRsaPss(
  hash: HashName,
  data: Uint8Array,
  key: KeyObject,
  sig: Uint8Array,
  saltLength: number,
): boolean {
  return verify(hash, data, { key, padding: constants.RSA_PKCS1_PSS_PADDING, saltLength }, sig);
}

/** A signature by a key of any type node supports (DER ECDSA, RSA PKCS#1, Ed25519: hash null). */
export function verifyWithKey(
  hash: HashName | null,
  data: Uint8Array,
  key: KeyObject,
  sig: Uint8Array,
): boolean {
  return verify(hash, data, key, sig);
}
