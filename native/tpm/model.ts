/**
 * The native TPM layer's public shapes (AK, EK, quote, NV, ReadPublic results) and the
 * parameters it builds: the AK template (TPM 2.0 Part 2 §12.2.4, TCG AK template attributes),
 * the AK signing scheme, PCR index checks. Sources: TPM 2.0 Library Parts 1-3 (rev 1.59).
 */
import { createHash } from 'node:crypto';
import type { EkAlgorithm } from './ek.js';
import { TpmError } from './errors.js';
import type { Tpm } from './tpm.js';
import {
  MAX_PCR_INDEX,
  TPM2_ALG_ECC,
  TPM2_ALG_ECDSA,
  TPM2_ALG_NULL,
  TPM2_ALG_RSA,
  TPM2_ALG_RSASSA,
  TPM2_ALG_SHA256,
  TPM2_ECC_NIST_P256,
  TPMA_OBJECT,
  WireWriter,
} from './wire.js';

export type AkAlgorithm = 'rsa2048' | 'ecc-p256';

export interface TpmQuote {
  /** TPMS_ATTEST bytes exactly as signed (TPM2B_ATTEST contents without the 2-byte size). */
  attest: Buffer;
  /** TPMT_SIGNATURE wire bytes. */
  signature: Buffer;
  /** TPMT_PUBLIC wire bytes of the AK (no TPM2B size prefix). */
  akPublic: Buffer;
  /** Ascending. */
  pcrSelection: { hash: 'sha256'; pcrs: number[] };
  /** Values read for exactly those PCRs (sha256 bank), checked against the quote's pcrDigest. */
  pcrValues: Record<number, Buffer>;
}

export interface TpmAk {
  readonly algorithm: AkAlgorithm;
  /** TPMT_PUBLIC wire bytes. */
  readonly publicArea: Buffer;
  /** TPM Name, Part 1 §16: nameAlg (0x000B) || SHA-256(TPMT_PUBLIC). */
  readonly name: Buffer;
  /**
   * Qualified Name, Part 1 §16.5: nameAlg || SHA-256(QN(parent) || Name), where the parent of a
   * primary key is its hierarchy (QN = the 4-byte hierarchy handle). TPMS_ATTEST.qualifiedSigner
   * carries this value, not `name`.
   */
  readonly qualifiedName: Buffer;
  /** The hierarchy the AK lives in (TPM_RH_ENDORSEMENT, 0x4000000B, for primary and EK-parented AKs). */
  readonly hierarchy: number;
  /**
   * Qualified Name of the AK's parent: the 4-byte hierarchy handle for a primary AK, the EK's
   * Qualified Name (nameAlg ‖ H(0x4000000B ‖ EK Name)) for an EK-parented AK.
   */
  readonly parentQualifiedName: Buffer;
  /** The persistent handle (0x81xxxxxx) of a persistent AK, or null for a transient one. */
  readonly persistentHandle: number | null;
  /**
   * Transient: TPM2_FlushContext (Part 3 §28.4). Persistent: releases the ESYS handle only (the
   * key stays in the TPM). Idempotent; also done by {@link Tpm.close}.
   */
  flush(): void;
}

/** An endorsement key recreated from its default template (a transient primary key). */
export interface TpmEk {
  readonly algorithm: EkAlgorithm;
  /** TPMT_PUBLIC wire bytes. */
  readonly publicArea: Buffer;
  readonly name: Buffer;
  /** nameAlg ‖ H(TPM_RH_ENDORSEMENT ‖ Name): the parent QN of EK-parented keys. */
  readonly qualifiedName: Buffer;
  flush(): void;
}

/** An AK created under an EK, as blobs that TPM2_Load accepts again under the same EK. */
export interface AkBlobs {
  /** TPM2B_PRIVATE wire bytes (with size prefix; wrapped by the EK, useless elsewhere). */
  privateBlob: Buffer;
  /** TPMT_PUBLIC wire bytes. */
  publicArea: Buffer;
}

/** NV index metadata (TPMS_NV_PUBLIC, Part 2 §13.5). */
export interface NvPublic {
  index: number;
  nameAlg: number;
  attributes: number;
  size: number;
}

/** Public area of an object the TPM holds, with the Names the TPM computed (TPM2_ReadPublic). */
export interface ReadPublicResult {
  publicArea: Buffer;
  name: Buffer;
  qualifiedName: Buffer;
}

/** True when a TPM return code is TPM_RC_HANDLE (format-1, any parameter/handle number). */
export function isHandleAbsent(rc: number | null): boolean {
  if (rc === null) return false;
  const r = rc >>> 0;
  return (r & 0xffff0000) === 0 && (r & 0x80) !== 0 && (r & 0x3f) === 0x0b;
}

/** NV reads are done in chunks no TPM refuses (TPM2_PT_NV_BUFFER_MAX is at least 512 in practice). */
export const NV_CHUNK = 512;

/** TPM_RH_ENDORSEMENT (Part 2 §7.4): the handle, and so the Name and Qualified Name, of the hierarchy. */
export const TPM_RH_ENDORSEMENT = 0x4000000b;

export const AK_ATTRIBUTES =
  TPMA_OBJECT.fixedTPM |
  TPMA_OBJECT.fixedParent |
  TPMA_OBJECT.sensitiveDataOrigin |
  TPMA_OBJECT.userWithAuth |
  TPMA_OBJECT.restricted |
  TPMA_OBJECT.sign;

/**
 * TPMT_PUBLIC template of the attestation key (Part 2 §12.2.4), in wire format. Restricted signing
 * key, nameAlg SHA-256, authPolicy empty (or an instance tag: native/tpm/instance-ak.ts), no symmetric, fixed scheme (RSASSA-SHA256, or ECDSA-SHA256
 * on NIST P-256), empty unique (so the key is derived deterministically from the hierarchy seed).
 */
export function akTemplate(alg: AkAlgorithm, authPolicy: Buffer = Buffer.alloc(0)): Buffer {
  const w = new WireWriter();
  if (alg === 'rsa2048') {
    w.u16(TPM2_ALG_RSA).u16(TPM2_ALG_SHA256).u32(AK_ATTRIBUTES).tpm2b(authPolicy);
    // TPMS_RSA_PARMS: symmetric NULL, scheme RSASSA(SHA256), keyBits 2048, exponent 0 (= 65537)
    w.u16(TPM2_ALG_NULL).u16(TPM2_ALG_RSASSA).u16(TPM2_ALG_SHA256).u16(2048).u32(0);
    w.tpm2b(Buffer.alloc(0)); // unique: TPM2B_PUBLIC_KEY_RSA
  } else if (alg === 'ecc-p256') {
    w.u16(TPM2_ALG_ECC).u16(TPM2_ALG_SHA256).u32(AK_ATTRIBUTES).tpm2b(authPolicy);
    // TPMS_ECC_PARMS: symmetric NULL, scheme ECDSA(SHA256), curve P-256, kdf NULL
    w.u16(TPM2_ALG_NULL).u16(TPM2_ALG_ECDSA).u16(TPM2_ALG_SHA256).u16(TPM2_ECC_NIST_P256).u16(TPM2_ALG_NULL);
    w.tpm2b(Buffer.alloc(0)).tpm2b(Buffer.alloc(0)); // unique: TPMS_ECC_POINT {x, y}
  } else {
    throw new TpmError('TPM_BAD_INPUT', `unknown AK algorithm: ${String(alg)}`);
  }
  return w.done();
}

/** TPMT_SIG_SCHEME wire bytes matching the AK template (Part 2 §11.2.1.5). */
export function sigScheme(alg: AkAlgorithm): Buffer {
  return new WireWriter()
    .u16(alg === 'rsa2048' ? TPM2_ALG_RSASSA : TPM2_ALG_ECDSA)
    .u16(TPM2_ALG_SHA256)
    .done();
}

export function sha256(...parts: Uint8Array[]): Buffer {
  const h = createHash('sha256');
  for (const p of parts) h.update(p);
  return h.digest();
}

/** Accepts 0..31 integers, returns them deduplicated and ascending. */
export function normalisePcrs(pcrs: readonly number[]): number[] {
  if (!Array.isArray(pcrs) || pcrs.length === 0) {
    throw new TpmError('TPM_BAD_INPUT', 'PCR list must be a non-empty array');
  }
  for (const p of pcrs) {
    if (!Number.isInteger(p) || p < 0 || p > MAX_PCR_INDEX) {
      throw new TpmError(
        'TPM_BAD_INPUT',
        `PCR index must be an integer 0..${MAX_PCR_INDEX}, got ${String(p)}`,
      );
    }
  }
  return [...new Set(pcrs)].sort((a, b) => a - b);
}
