/**
 * ESYS object bookkeeping for {@link Tpm}: loaded AK/EK handles (flushed or closed by their
 * owner), ESYS output pointers (Esys_Free), and the AK algorithm of a public area.
 */
import type { EkAlgorithm } from './ek.js';
import { TpmError } from './errors.js';
import { type NativePtr, tss } from './lib.js';
import { type AkAlgorithm, TPM_RH_ENDORSEMENT, type TpmAk, type TpmEk } from './model.js';
import { hierarchyQualifiedName, parsePublic, qualifiedNameOf } from './public.js';
import type { Tpm } from './tpm.js';
import { TPM2_ECC_NIST_P256 } from './wire.js';

/** Something holding an ESYS_TR that {@link Tpm.close} must release. */
export interface Loaded {
  handle: number | null;
  /** Persistent objects and NV indices are released with Esys_TR_Close, never flushed. */
  readonly persistent: boolean;
}

export class LoadedAk implements TpmAk, Loaded {
  /** ESYS_TR of the loaded key; null once flushed. */
  handle: number | null;
  readonly qualifiedName: Buffer;

  constructor(
    readonly owner: Tpm,
    handle: number,
    readonly algorithm: AkAlgorithm,
    readonly publicArea: Buffer,
    readonly name: Buffer,
    readonly parentQualifiedName: Buffer,
    readonly hierarchy: number,
    readonly persistentHandle: number | null,
  ) {
    this.handle = handle;
    this.qualifiedName = qualifiedNameOf(parentQualifiedName, name);
  }

  get persistent(): boolean {
    return this.persistentHandle !== null;
  }

  flush(): void {
    this.owner.release(this);
  }
}

export class LoadedEk implements TpmEk, Loaded {
  handle: number | null;
  readonly persistent = false;
  readonly qualifiedName: Buffer;

  constructor(
    readonly owner: Tpm,
    handle: number,
    readonly algorithm: EkAlgorithm,
    readonly publicArea: Buffer,
    readonly name: Buffer,
  ) {
    this.handle = handle;
    this.qualifiedName = qualifiedNameOf(hierarchyQualifiedName(TPM_RH_ENDORSEMENT), name);
  }

  flush(): void {
    this.owner.release(this);
  }
}

/** AK algorithm of a restricted signing public area, or null when it is neither RSA-2048 nor ECC P-256. */
export function akAlgorithmOf(publicArea: Buffer): AkAlgorithm | null {
  const p = parsePublic(publicArea);
  if (p.rsa && p.rsa.keyBits === 2048) return 'rsa2048';
  if (p.ecc && p.ecc.curve === TPM2_ECC_NIST_P256) return 'ecc-p256';
  return null;
}

/** Frees every non-null ESYS output pointer (Esys_Free). */
export function freeAll(...outs: [NativePtr | null][]): void {
  const lib = tss();
  for (const o of outs) {
    const p = o[0];
    if (p !== null && p !== 0n) lib.Esys_Free(p);
    o[0] = null;
  }
}

/** Throws TPM_BAD_RESPONSE when a required ESYS output pointer is NULL despite rc 0. */
export function ptr(out: [NativePtr | null], what: string): NativePtr {
  const p = out[0];
  if (p === null || p === 0n) throw new TpmError('TPM_BAD_RESPONSE', `${what}: ESYS returned no output`);
  return p;
}
