/**
 * Hashing for the verifier (synchronous, node:crypto): SHA-1/256/384/512 by name or by
 * TPM_ALG_ID (TPM 2.0 Part 2 §6.3).
 */
import { createHash, hash } from 'node:crypto';
import { TPM_ALG } from '../abi/tpm/constants.js';

/** Hash names the verifier computes. */
export type HashName = 'sha1' | 'sha256' | 'sha384' | 'sha512';

/** TPM_ALG_ID → hash name and digest size in bytes (the banks and schemes this verifier computes). */
const TPM_HASHES: Readonly<Record<number, { node: HashName; size: number }>> = {
  [TPM_ALG.SHA1]: { node: 'sha1', size: 20 },
  [TPM_ALG.SHA256]: { node: 'sha256', size: 32 },
  [TPM_ALG.SHA384]: { node: 'sha384', size: 48 },
  [TPM_ALG.SHA512]: { node: 'sha512', size: 64 },
};

/** Hash name and digest size (bytes) of a TPM hash algorithm, or undefined if not computed here. */
export function hashInfo(alg: number): { node: HashName; size: number } | undefined {
  return TPM_HASHES[alg];
}

/**
 * The digest of the concatenation of `parts`. One part goes through node's one-shot `hash`
 * (no Hash object: about a third less CPU for the short inputs of the call path).
 */
export function digest(alg: HashName, ...parts: readonly Uint8Array[]): Buffer {
  if (parts.length === 1) return hash(alg, parts[0] as Uint8Array, 'buffer');
  const h = createHash(alg);
  for (const p of parts) h.update(p);
  return h.digest();
}

/** The digest of a string's UTF-8 bytes (hashed as it is encoded: no intermediate Buffer). */
export function digestUtf8(alg: HashName, text: string): Buffer {
  return hash(alg, text, 'buffer'); // node's one-shot hash encodes a string as UTF-8
}

/** Lowercase hex SHA-256. */
export function sha256hex(data: Uint8Array): string {
  return hash('sha256', data, 'hex');
}
