/**
 * TPMT_SIGNATURE (TPM 2.0 Part 2 §11.3.4) for the schemes an attestation key can use:
 * RSASSA (0x0014) / RSAPSS (0x0016) carry TPMS_SIGNATURE_RSA {hash, sig TPM2B_PUBLIC_KEY_RSA}
 * (§11.3.1); ECDSA (0x0018) carries TPMS_SIGNATURE_ECC {hash, signatureR, signatureS}
 * (§11.3.2; TPM2B_ECC_PARAMETER each, big-endian, possibly shorter than the curve size).
 */
import { ByteReader } from '../reader.js';
import { algName, MAX_ECC_KEY_BYTES, MAX_RSA_KEY_BYTES, TPM_ALG } from './constants.js';

/** Parsed TPMT_SIGNATURE. */
export type TpmtSignature =
  | { sigAlg: typeof TPM_ALG.RSASSA | typeof TPM_ALG.RSAPSS; hashAlg: number; sig: Buffer }
  | { sigAlg: typeof TPM_ALG.ECDSA; hashAlg: number; r: Buffer; s: Buffer };

/**
 * Parses TPMT_SIGNATURE wire bytes exactly (sigAlg u16, hash u16, then the scheme's fields).
 * @throws AbiError TPM_SIGNATURE_MALFORMED (short, oversize or trailing input) or
 *   TPM_SIGNATURE_UNSUPPORTED (sigAlg other than RSASSA/RSAPSS/ECDSA).
 */
export function parseTpmtSignature(bytes: Uint8Array): TpmtSignature {
  const r = new ByteReader(bytes, {
    structure: 'TPMT_SIGNATURE',
    truncated: 'TPM_SIGNATURE_MALFORMED',
    malformed: 'TPM_SIGNATURE_MALFORMED',
    trailing: 'TPM_SIGNATURE_MALFORMED',
  });
  const sigAlg = r.u16('sigAlg');
  if (sigAlg !== TPM_ALG.RSASSA && sigAlg !== TPM_ALG.RSAPSS && sigAlg !== TPM_ALG.ECDSA) {
    throw r.error('TPM_SIGNATURE_UNSUPPORTED', `TPMT_SIGNATURE: sigAlg ${algName(sigAlg)}`, 'sigAlg', 0);
  }
  const hashAlg = r.u16('hash');
  if (sigAlg === TPM_ALG.ECDSA) {
    const rr = r.tpm2b('signatureR', MAX_ECC_KEY_BYTES);
    const ss = r.tpm2b('signatureS', MAX_ECC_KEY_BYTES);
    r.end();
    return { sigAlg, hashAlg, r: rr, s: ss };
  }
  const sig = r.tpm2b('sig', MAX_RSA_KEY_BYTES);
  r.end();
  return { sigAlg, hashAlg, sig };
}

/** The smallest plain signature: a DER ECDSA-Sig-Value {r, s} of one-byte INTEGERs (RFC 3279 §2.2.3). */
const MIN_PLAIN_SIGNATURE_BYTES = 8;
const HEADER_HASHES: ReadonlySet<number> = new Set([
  TPM_ALG.SHA1,
  TPM_ALG.SHA256,
  TPM_ALG.SHA384,
  TPM_ALG.SHA512,
]);

/**
 * Whether bytes of unknown form are to be read as TPMT_SIGNATURE (TPM 2.0 Part 2 §11.3.4) even
 * when they do not parse as one: they begin with its header — sigAlg RSASSA, RSAPSS or ECDSA,
 * then a SHA-1/256/384/512 hash (or end before the hash) — or are shorter than any plain
 * signature. A TPMT_SIGNATURE cut short is then reported as a malformed TPMT_SIGNATURE, not read
 * as a plain signature whose scheme nothing names. A plain RSA signature that happens to begin so
 * is taken with an explicit plain format.
 */
export function isTpmtSignatureHeader(bytes: Uint8Array): boolean {
  const b = Buffer.from(bytes.buffer, bytes.byteOffset, bytes.byteLength);
  if (b.length < MIN_PLAIN_SIGNATURE_BYTES) return true;
  const sigAlg = b.readUInt16BE(0);
  if (sigAlg !== TPM_ALG.RSASSA && sigAlg !== TPM_ALG.RSAPSS && sigAlg !== TPM_ALG.ECDSA) return false;
  return HEADER_HASHES.has(b.readUInt16BE(2));
}
