/**
 * Synchronous TPM 2.0 access through tpm2-tss ESYS (koffi): attestation keys, PCR reads and
 * extends, and quotes. Sources: TCG TPM 2.0 Library spec Parts 1-3 (rev 1.59); tpm2-tss 3.x ESYS.
 */
import { createHash } from 'node:crypto';
import { EK_PROFILES, type EkAlgorithm, ekTemplate } from './ek.js';
import { TpmError } from './errors.js';
import {
  ESYS_TR_NONE,
  ESYS_TR_PASSWORD,
  ESYS_TR_PCR0,
  ESYS_TR_RH_ENDORSEMENT,
  ESYS_TR_RH_OWNER,
  fromStruct,
  type NativePtr,
  rcError,
  TPM2_RC_INITIALIZE,
  TPM2_SE_POLICY,
  TPM2_SU_CLEAR,
  toStruct,
  tss,
} from './lib.js';
import {
  akAttributeProblem,
  hierarchyQualifiedName,
  nameOfPublic,
  parsePublic,
  qualifiedNameOf,
} from './public.js';
import {
  MAX_PCR_INDEX,
  parseDigestList,
  parseNvPublic,
  parsePcrSelection,
  parseQuoteAttest,
  pcrSelectionSha256,
  TPM2_ALG_ECC,
  TPM2_ALG_ECDSA,
  TPM2_ALG_NULL,
  TPM2_ALG_RSA,
  TPM2_ALG_RSASSA,
  TPM2_ALG_SHA256,
  TPM2_ECC_NIST_P256,
  TPM2_GENERATED_VALUE,
  TPMA_OBJECT,
  unwrap2b,
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
const NV_CHUNK = 512;

/** TPM_RH_ENDORSEMENT (Part 2 §7.4): the handle, and so the Name and Qualified Name, of the hierarchy. */
export const TPM_RH_ENDORSEMENT = 0x4000000b;

const AK_ATTRIBUTES =
  TPMA_OBJECT.fixedTPM |
  TPMA_OBJECT.fixedParent |
  TPMA_OBJECT.sensitiveDataOrigin |
  TPMA_OBJECT.userWithAuth |
  TPMA_OBJECT.restricted |
  TPMA_OBJECT.sign;

/**
 * TPMT_PUBLIC template of the attestation key (Part 2 §12.2.4), in wire format. Restricted signing
 * key, nameAlg SHA-256, empty authPolicy, no symmetric, fixed scheme (RSASSA-SHA256, or ECDSA-SHA256
 * on NIST P-256), empty unique (so the key is derived deterministically from the hierarchy seed).
 */
export function akTemplate(alg: AkAlgorithm): Buffer {
  const w = new WireWriter();
  if (alg === 'rsa2048') {
    w.u16(TPM2_ALG_RSA).u16(TPM2_ALG_SHA256).u32(AK_ATTRIBUTES).tpm2b(Buffer.alloc(0));
    // TPMS_RSA_PARMS: symmetric NULL, scheme RSASSA(SHA256), keyBits 2048, exponent 0 (= 65537)
    w.u16(TPM2_ALG_NULL).u16(TPM2_ALG_RSASSA).u16(TPM2_ALG_SHA256).u16(2048).u32(0);
    w.tpm2b(Buffer.alloc(0)); // unique: TPM2B_PUBLIC_KEY_RSA
  } else if (alg === 'ecc-p256') {
    w.u16(TPM2_ALG_ECC).u16(TPM2_ALG_SHA256).u32(AK_ATTRIBUTES).tpm2b(Buffer.alloc(0));
    // TPMS_ECC_PARMS: symmetric NULL, scheme ECDSA(SHA256), curve P-256, kdf NULL
    w.u16(TPM2_ALG_NULL).u16(TPM2_ALG_ECDSA).u16(TPM2_ALG_SHA256).u16(TPM2_ECC_NIST_P256).u16(TPM2_ALG_NULL);
    w.tpm2b(Buffer.alloc(0)).tpm2b(Buffer.alloc(0)); // unique: TPMS_ECC_POINT {x, y}
  } else {
    throw new TpmError('TPM_BAD_INPUT', `unknown AK algorithm: ${String(alg)}`);
  }
  return w.done();
}

/** TPMT_SIG_SCHEME wire bytes matching the AK template (Part 2 §11.2.1.5). */
function sigScheme(alg: AkAlgorithm): Buffer {
  return new WireWriter()
    .u16(alg === 'rsa2048' ? TPM2_ALG_RSASSA : TPM2_ALG_ECDSA)
    .u16(TPM2_ALG_SHA256)
    .done();
}

function sha256(...parts: Uint8Array[]): Buffer {
  const h = createHash('sha256');
  for (const p of parts) h.update(p);
  return h.digest();
}

/** Accepts 0..31 integers, returns them deduplicated and ascending. */
function normalisePcrs(pcrs: readonly number[]): number[] {
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

/** Something holding an ESYS_TR that {@link Tpm.close} must release. */
interface Loaded {
  handle: number | null;
  /** Persistent objects and NV indices are released with Esys_TR_Close, never flushed. */
  readonly persistent: boolean;
}

class LoadedAk implements TpmAk, Loaded {
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

class LoadedEk implements TpmEk, Loaded {
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
function akAlgorithmOf(publicArea: Buffer): AkAlgorithm | null {
  const p = parsePublic(publicArea);
  if (p.rsa && p.rsa.keyBits === 2048) return 'rsa2048';
  if (p.ecc && p.ecc.curve === TPM2_ECC_NIST_P256) return 'ecc-p256';
  return null;
}

/** Frees every non-null ESYS output pointer (Esys_Free). */
function freeAll(...outs: [NativePtr | null][]): void {
  const lib = tss();
  for (const o of outs) {
    const p = o[0];
    if (p !== null && p !== 0n) lib.Esys_Free(p);
    o[0] = null;
  }
}

/** Throws TPM_BAD_RESPONSE when a required ESYS output pointer is NULL despite rc 0. */
function ptr(out: [NativePtr | null], what: string): NativePtr {
  const p = out[0];
  if (p === null || p === 0n) throw new TpmError('TPM_BAD_RESPONSE', `${what}: ESYS returned no output`);
  return p;
}

/**
 * One ESYS context over one TCTI connection. Not safe to share between concurrent callers (calls
 * are synchronous, so within one Node thread they cannot interleave).
 */
export class Tpm {
  private esys: NativePtr | null;
  private tcti: NativePtr | null;
  private readonly loaded = new Set<Loaded>();
  private lost: TpmError | null = null;

  private constructor(esys: NativePtr, tcti: NativePtr) {
    this.esys = esys;
    this.tcti = tcti;
  }

  /**
   * Opens a TPM: Tss2_TctiLdr_Initialize(tcti) then Esys_Initialize, then TPM2_Startup(CLEAR)
   * (Part 3 §9.3), tolerating TPM_RC_INITIALIZE when the TPM was already started.
   * @param tcti tctildr configuration, e.g. `swtpm:host=127.0.0.1,port=2321` or `device:/dev/tpmrm0`.
   * @throws TpmError TCTI_INIT_FAILED, TPM_UNREACHABLE, TPM_RC, TSS_LIBRARY_MISSING
   */
  static open(tcti: string): Tpm {
    if (typeof tcti !== 'string' || tcti.length === 0) {
      throw new TpmError('TPM_BAD_INPUT', 'TCTI configuration must be a non-empty string');
    }
    const lib = tss();
    const tctiOut: [NativePtr | null] = [null];
    const rc = lib.Tss2_TctiLdr_Initialize(tcti, tctiOut);
    if (rc !== 0 || tctiOut[0] === null) {
      const e = rcError(`Tss2_TctiLdr_Initialize("${tcti}")`, rc);
      throw new TpmError('TCTI_INIT_FAILED', e.message, e.rc);
    }
    const esysOut: [NativePtr | null] = [null];
    const erc = lib.Esys_Initialize(esysOut, tctiOut[0], null);
    if (erc !== 0 || esysOut[0] === null) {
      lib.Tss2_TctiLdr_Finalize(tctiOut);
      throw rcError('Esys_Initialize', erc);
    }
    const tpm = new Tpm(esysOut[0], tctiOut[0]);
    const src = lib.Esys_Startup(esysOut[0], TPM2_SU_CLEAR);
    if (src !== 0 && src !== TPM2_RC_INITIALIZE) {
      tpm.close();
      throw rcError('TPM2_Startup', src);
    }
    return tpm;
  }

  private ctx(): NativePtr {
    if (this.esys === null) throw new TpmError('TPM_CLOSED', 'TPM is closed');
    // After a TCTI failure ESYS is stuck mid-command and answers every later call with
    // TSS2_ESYS_RC_BAD_SEQUENCE; report the real cause instead.
    if (this.lost) {
      throw new TpmError(
        'TPM_UNREACHABLE',
        `TPM connection lost earlier: ${this.lost.message}`,
        this.lost.rc,
      );
    }
    return this.esys;
  }

  private check(what: string, rc: number): void {
    if (rc === 0) return;
    const err = rcError(what, rc);
    if (err.code === 'TPM_UNREACHABLE') this.lost = err;
    throw err;
  }

  /** True after a TCTI failure: every later call throws TPM_UNREACHABLE; only close() is useful. */
  get unreachable(): boolean {
    return this.lost !== null;
  }

  /** True once {@link close} has run. */
  get closed(): boolean {
    return this.esys === null;
  }

  /**
   * Creates an attestation key as a primary key of the endorsement hierarchy (TPM2_CreatePrimary,
   * Part 3 §24.1; template {@link akTemplate}). The endorsement hierarchy is used because TPMS_ATTEST
   * from keys outside the endorsement/platform hierarchies has resetCount, restartCount and
   * firmwareVersion obfuscated (Part 3 §18.1), and the planned EK-parented AK lives there too. The
   * key is deterministic for the TPM's endorsement seed. The caller must {@link TpmAk.flush} it
   * (or {@link close}): a raw swtpm socket holds only 3 transient objects.
   * @throws TpmError TPM_RC, TPM_UNREACHABLE, TPM_CLOSED
   */
  createAk(alg: AkAlgorithm): TpmAk {
    const { handle, publicArea, name } = this.createPrimary(akTemplate(alg), 'AK');
    const ak = new LoadedAk(
      this,
      handle,
      alg,
      publicArea,
      name,
      hierarchyQualifiedName(TPM_RH_ENDORSEMENT),
      TPM_RH_ENDORSEMENT,
      null,
    );
    this.loaded.add(ak);
    return ak;
  }

  /**
   * Recreates the endorsement key from the TCG default template (see native/tpm/ek.ts) with
   * TPM2_CreatePrimary in the endorsement hierarchy. Deterministic: the same TPM always yields
   * the key its EK certificate was issued for. Transient: flush it.
   * @throws TpmError TPM_RC, TPM_UNREACHABLE, TPM_CLOSED
   */
  createEk(alg: EkAlgorithm): TpmEk {
    const { handle, publicArea, name } = this.createPrimary(ekTemplate(alg), 'EK');
    const ek = new LoadedEk(this, handle, alg, publicArea, name);
    this.loaded.add(ek);
    return ek;
  }

  /** TPM2_CreatePrimary in the endorsement hierarchy; returns the transient handle, public area and Name. */
  private createPrimary(
    template: Buffer,
    what: string,
  ): { handle: number; publicArea: Buffer; name: Buffer } {
    const ctx = this.ctx();
    const lib = tss();
    const inSensitive = toStruct('TPM2B_SENSITIVE_CREATE', new WireWriter().u16(4).u16(0).u16(0).done());
    const inPublic = toStruct('TPM2B_PUBLIC', new WireWriter().tpm2b(template).done());
    const outsideInfo = toStruct('TPM2B_DATA', new WireWriter().u16(0).done());
    const creationPcr = toStruct('TPML_PCR_SELECTION', new WireWriter().u32(0).done());
    const handle: [number] = [ESYS_TR_NONE];
    const outPublic: [NativePtr | null] = [null];
    const creationData: [NativePtr | null] = [null];
    const creationHash: [NativePtr | null] = [null];
    const creationTicket: [NativePtr | null] = [null];
    let created = false;
    try {
      this.check(
        `TPM2_CreatePrimary(${what})`,
        lib.Esys_CreatePrimary(
          ctx,
          ESYS_TR_RH_ENDORSEMENT,
          ESYS_TR_PASSWORD,
          ESYS_TR_NONE,
          ESYS_TR_NONE,
          inSensitive,
          inPublic,
          outsideInfo,
          creationPcr,
          handle,
          outPublic,
          creationData,
          creationHash,
          creationTicket,
        ),
      );
      created = true;
      const publicArea = unwrap2b(
        fromStruct('TPM2B_PUBLIC', ptr(outPublic, 'TPM2_CreatePrimary outPublic')),
        'TPM2B_PUBLIC',
      );
      const name = nameOfPublic(publicArea);
      // ESYS computes the name from the response too; disagreeing means a marshalling bug.
      if (!this.esysName(handle[0]).equals(name)) {
        throw new TpmError('TPM_BAD_RESPONSE', `${what} name from ESYS differs from H(TPMT_PUBLIC)`);
      }
      return { handle: handle[0], publicArea, name };
    } catch (err) {
      if (created && !this.lost) lib.Esys_FlushContext(ctx, handle[0]);
      throw err;
    } finally {
      freeAll(outPublic, creationData, creationHash, creationTicket);
    }
  }

  private esysName(handle: number): Buffer {
    const out: [NativePtr | null] = [null];
    try {
      this.check('Esys_TR_GetName', tss().Esys_TR_GetName(this.ctx(), handle, out));
      return unwrap2b(fromStruct('TPM2B_NAME', ptr(out, 'Esys_TR_GetName')), 'TPM2B_NAME');
    } finally {
      freeAll(out);
    }
  }

  /**
   * An ESYS_TR for a TPM handle (persistent object or NV index), or null when the TPM has
   * nothing there (TPM_RC_HANDLE). Release it with Esys_TR_Close.
   */
  private trFromTpm(tpmHandle: number): number | null {
    const out: [number] = [ESYS_TR_NONE];
    const rc = tss().Esys_TR_FromTPMPublic(
      this.ctx(),
      tpmHandle >>> 0,
      ESYS_TR_NONE,
      ESYS_TR_NONE,
      ESYS_TR_NONE,
      out,
    );
    if (rc !== 0) {
      if (isHandleAbsent(rc)) return null;
      this.check(`Esys_TR_FromTPMPublic(0x${(tpmHandle >>> 0).toString(16)})`, rc);
    }
    return out[0];
  }

  private trClose(tr: number): void {
    if (this.esys === null || this.lost) return;
    const h: [number] = [tr];
    tss().Esys_TR_Close(this.esys, h);
  }

  /**
   * TPM2_NV_ReadPublic (Part 3 §31.6) of an NV index, or null when the index is not defined.
   * @throws TpmError TPM_RC, TPM_UNREACHABLE, TPM_BAD_RESPONSE
   */
  nvPublic(index: number): NvPublic | null {
    const tr = this.trFromTpm(index);
    if (tr === null) return null;
    const pubOut: [NativePtr | null] = [null];
    const nameOut: [NativePtr | null] = [null];
    try {
      this.check(
        'TPM2_NV_ReadPublic',
        tss().Esys_NV_ReadPublic(this.ctx(), tr, ESYS_TR_NONE, ESYS_TR_NONE, ESYS_TR_NONE, pubOut, nameOut),
      );
      const p = parseNvPublic(
        unwrap2b(fromStruct('TPM2B_NV_PUBLIC', ptr(pubOut, 'NV_ReadPublic')), 'TPM2B_NV_PUBLIC'),
      );
      const nv: NvPublic = {
        index: p.nvIndex,
        nameAlg: p.nameAlg,
        attributes: p.attributes,
        size: p.dataSize,
      };
      if (nv.index !== index >>> 0)
        throw new TpmError('TPM_BAD_RESPONSE', 'NV_ReadPublic answered another index');
      return nv;
    } finally {
      freeAll(pubOut, nameOut);
      this.trClose(tr);
    }
  }

  /**
   * Reads a whole NV index with its own (empty) authorization (TPM2_NV_Read, Part 3 §31.13), in
   * chunks. Returns null when the index is not defined. EK and platform certificate indices are
   * AUTHREAD with an empty authValue.
   * @throws TpmError TPM_RC (e.g. not readable), TPM_UNREACHABLE
   */
  readNv(index: number): Buffer | null {
    const pub = this.nvPublic(index);
    if (pub === null) return null;
    const tr = this.trFromTpm(index);
    if (tr === null) return null;
    const parts: Buffer[] = [];
    try {
      for (let off = 0; off < pub.size; off += NV_CHUNK) {
        const n = Math.min(NV_CHUNK, pub.size - off);
        const out: [NativePtr | null] = [null];
        try {
          this.check(
            `TPM2_NV_Read(0x${index.toString(16)})`,
            tss().Esys_NV_Read(this.ctx(), tr, tr, ESYS_TR_PASSWORD, ESYS_TR_NONE, ESYS_TR_NONE, n, off, out),
          );
          const chunk = unwrap2b(
            fromStruct('TPM2B_MAX_NV_BUFFER', ptr(out, 'NV_Read')),
            'TPM2B_MAX_NV_BUFFER',
          );
          if (chunk.length !== n) throw new TpmError('TPM_BAD_RESPONSE', 'NV_Read returned a short chunk');
          parts.push(chunk);
        } finally {
          freeAll(out);
        }
      }
    } finally {
      this.trClose(tr);
    }
    return Buffer.concat(parts);
  }

  /**
   * Defines an owner-authorized NV index (empty authValue, AUTHREAD|AUTHWRITE|OWNERREAD|OWNERWRITE|NO_DA)
   * and writes `data` into it. Used to stage platform certificates (e.g. a cloud AK certificate)
   * on a software TPM; a real platform provisions these itself.
   * @throws TpmError TPM_RC (e.g. NV_DEFINED), TPM_UNREACHABLE
   */
  writeNewNv(index: number, data: Buffer): void {
    const ctx = this.ctx();
    const lib = tss();
    const attrs = 0x00000002 | 0x00000004 | 0x00020000 | 0x00040000 | 0x02000000;
    const nvPub = new WireWriter()
      .u32(index)
      .u16(TPM2_ALG_SHA256)
      .u32(attrs)
      .tpm2b(Buffer.alloc(0))
      .u16(data.length)
      .done();
    const nvTr: [number] = [ESYS_TR_NONE];
    this.check(
      'TPM2_NV_DefineSpace',
      lib.Esys_NV_DefineSpace(
        ctx,
        ESYS_TR_RH_OWNER,
        ESYS_TR_PASSWORD,
        ESYS_TR_NONE,
        ESYS_TR_NONE,
        toStruct('TPM2B_AUTH', new WireWriter().u16(0).done()),
        toStruct('TPM2B_NV_PUBLIC', new WireWriter().tpm2b(nvPub).done()),
        nvTr,
      ),
    );
    try {
      for (let off = 0; off < data.length; off += NV_CHUNK) {
        const chunk = data.subarray(off, Math.min(data.length, off + NV_CHUNK));
        this.check(
          'TPM2_NV_Write',
          lib.Esys_NV_Write(
            ctx,
            nvTr[0],
            nvTr[0],
            ESYS_TR_PASSWORD,
            ESYS_TR_NONE,
            ESYS_TR_NONE,
            toStruct('TPM2B_MAX_NV_BUFFER', new WireWriter().tpm2b(chunk).done()),
            off,
          ),
        );
      }
    } finally {
      this.trClose(nvTr[0]);
    }
  }

  /**
   * TPM2_ReadPublic (Part 3 §12.4) of a persistent object, with the Name and Qualified Name
   * the TPM computed. Null when nothing is persisted at `tpmHandle`.
   */
  readPublic(tpmHandle: number): ReadPublicResult | null {
    const tr = this.trFromTpm(tpmHandle);
    if (tr === null) return null;
    try {
      return this.readPublicTr(tr);
    } finally {
      this.trClose(tr);
    }
  }

  private readPublicTr(tr: number): ReadPublicResult {
    const pubOut: [NativePtr | null] = [null];
    const nameOut: [NativePtr | null] = [null];
    const qnOut: [NativePtr | null] = [null];
    try {
      this.check(
        'TPM2_ReadPublic',
        tss().Esys_ReadPublic(
          this.ctx(),
          tr,
          ESYS_TR_NONE,
          ESYS_TR_NONE,
          ESYS_TR_NONE,
          pubOut,
          nameOut,
          qnOut,
        ),
      );
      const publicArea = unwrap2b(fromStruct('TPM2B_PUBLIC', ptr(pubOut, 'ReadPublic')), 'TPM2B_PUBLIC');
      const name = unwrap2b(fromStruct('TPM2B_NAME', ptr(nameOut, 'ReadPublic name')), 'TPM2B_NAME');
      const qualifiedName = unwrap2b(fromStruct('TPM2B_NAME', ptr(qnOut, 'ReadPublic qn')), 'TPM2B_NAME');
      if (!nameOfPublic(publicArea).equals(name)) {
        throw new TpmError('TPM_BAD_RESPONSE', 'ReadPublic name is not H(TPMT_PUBLIC)');
      }
      return { publicArea, name, qualifiedName };
    } finally {
      freeAll(pubOut, nameOut, qnOut);
    }
  }

  /**
   * Runs `fn` with the authorization session the EK's USER role needs: a policy session
   * satisfied with PolicySecret(TPM_RH_ENDORSEMENT) (Part 3 §23.4) for the low-range templates
   * (userWithAuth clear), or the empty password for the high-range ones. The session is flushed.
   */
  private withEkAuth<T>(ek: LoadedEk, fn: (session: number) => T): T {
    if (!EK_PROFILES[ek.algorithm].needsPolicy) return fn(ESYS_TR_PASSWORD);
    const ctx = this.ctx();
    const lib = tss();
    const sess: [number] = [ESYS_TR_NONE];
    this.check(
      'TPM2_StartAuthSession(policy)',
      lib.Esys_StartAuthSession(
        ctx,
        ESYS_TR_NONE,
        ESYS_TR_NONE,
        ESYS_TR_NONE,
        ESYS_TR_NONE,
        ESYS_TR_NONE,
        null,
        TPM2_SE_POLICY,
        toStruct('TPMT_SYM_DEF', new WireWriter().u16(TPM2_ALG_NULL).done()),
        TPM2_ALG_SHA256,
        sess,
      ),
    );
    const timeout: [NativePtr | null] = [null];
    const ticket: [NativePtr | null] = [null];
    try {
      this.check(
        'TPM2_PolicySecret(TPM_RH_ENDORSEMENT)',
        lib.Esys_PolicySecret(
          ctx,
          ESYS_TR_RH_ENDORSEMENT,
          sess[0],
          ESYS_TR_PASSWORD,
          ESYS_TR_NONE,
          ESYS_TR_NONE,
          null,
          null,
          null,
          0,
          timeout,
          ticket,
        ),
      );
      freeAll(timeout, ticket);
      return fn(sess[0]);
    } finally {
      freeAll(timeout, ticket);
      if (!this.lost && this.esys !== null) lib.Esys_FlushContext(this.esys, sess[0]);
    }
  }

  private ekHandle(ek: TpmEk): LoadedEk {
    if (!(ek instanceof LoadedEk) || ek.owner !== this) {
      throw new TpmError('TPM_BAD_INPUT', 'EK was not created by this Tpm');
    }
    if (ek.handle === null) throw new TpmError('TPM_CLOSED', 'EK has been flushed');
    return ek;
  }

  private akHandle(ak: TpmAk): LoadedAk & { handle: number } {
    if (!(ak instanceof LoadedAk) || ak.owner !== this) {
      throw new TpmError('TPM_BAD_INPUT', 'AK was not created by this Tpm');
    }
    if (ak.handle === null) throw new TpmError('TPM_CLOSED', 'AK has been flushed');
    return ak as LoadedAk & { handle: number };
  }

  /**
   * Creates an attestation key as a child of the EK (TPM2_Create, Part 3 §12.1) from
   * {@link akTemplate}. Returns the blobs; load them with {@link loadAkUnderEk}. The AK's
   * attributes are checked (restricted, sign, fixedTPM, fixedParent, sensitiveDataOrigin, no decrypt).
   * @throws TpmError TPM_RC, TPM_UNREACHABLE, TPM_BAD_RESPONSE
   */
  createAkUnderEk(ekIn: TpmEk, alg: AkAlgorithm): AkBlobs {
    const ek = this.ekHandle(ekIn);
    const ctx = this.ctx();
    const lib = tss();
    const inSensitive = toStruct('TPM2B_SENSITIVE_CREATE', new WireWriter().u16(4).u16(0).u16(0).done());
    const inPublic = toStruct('TPM2B_PUBLIC', new WireWriter().tpm2b(akTemplate(alg)).done());
    const outsideInfo = toStruct('TPM2B_DATA', new WireWriter().u16(0).done());
    const creationPcr = toStruct('TPML_PCR_SELECTION', new WireWriter().u32(0).done());
    const outPrivate: [NativePtr | null] = [null];
    const outPublic: [NativePtr | null] = [null];
    const creationData: [NativePtr | null] = [null];
    const creationHash: [NativePtr | null] = [null];
    const creationTicket: [NativePtr | null] = [null];
    try {
      this.withEkAuth(ek, (session) =>
        this.check(
          'TPM2_Create(AK under EK)',
          lib.Esys_Create(
            ctx,
            ek.handle as number,
            session,
            ESYS_TR_NONE,
            ESYS_TR_NONE,
            inSensitive,
            inPublic,
            outsideInfo,
            creationPcr,
            outPrivate,
            outPublic,
            creationData,
            creationHash,
            creationTicket,
          ),
        ),
      );
      const privateBlob = fromStruct('TPM2B_PRIVATE', ptr(outPrivate, 'Create outPrivate'));
      const publicArea = unwrap2b(
        fromStruct('TPM2B_PUBLIC', ptr(outPublic, 'Create outPublic')),
        'TPM2B_PUBLIC',
      );
      const problem = akAttributeProblem(parsePublic(publicArea).attributes);
      if (problem) throw new TpmError('TPM_BAD_RESPONSE', problem);
      return { privateBlob, publicArea };
    } finally {
      freeAll(outPrivate, outPublic, creationData, creationHash, creationTicket);
    }
  }

  /**
   * Loads AK blobs under the EK (TPM2_Load, Part 3 §12.2). Refuses a public area that is not
   * a restricted signing key fixed to this TPM and parent.
   * @throws TpmError TPM_BAD_INPUT (not an acceptable AK), TPM_RC (e.g. blobs of another EK)
   */
  loadAkUnderEk(ekIn: TpmEk, blobs: AkBlobs): TpmAk {
    const ek = this.ekHandle(ekIn);
    const problem = akAttributeProblem(parsePublic(blobs.publicArea).attributes);
    if (problem) throw new TpmError('TPM_BAD_INPUT', problem);
    const alg = akAlgorithmOf(blobs.publicArea);
    if (!alg) throw new TpmError('TPM_BAD_INPUT', 'AK is neither RSA-2048 nor ECC P-256');
    const ctx = this.ctx();
    const lib = tss();
    const handle: [number] = [ESYS_TR_NONE];
    this.withEkAuth(ek, (session) =>
      this.check(
        'TPM2_Load(AK under EK)',
        lib.Esys_Load(
          ctx,
          ek.handle as number,
          session,
          ESYS_TR_NONE,
          ESYS_TR_NONE,
          toStruct('TPM2B_PRIVATE', blobs.privateBlob),
          toStruct('TPM2B_PUBLIC', new WireWriter().tpm2b(blobs.publicArea).done()),
          handle,
        ),
      ),
    );
    const name = nameOfPublic(blobs.publicArea);
    const ak = new LoadedAk(
      this,
      handle[0],
      alg,
      Buffer.from(blobs.publicArea),
      name,
      ek.qualifiedName,
      TPM_RH_ENDORSEMENT,
      null,
    );
    this.loaded.add(ak);
    return ak;
  }

  /**
   * TPM2_ActivateCredential (Part 3 §12.5): the TPM decrypts the credential blob with the EK and
   * releases the credential only if it was made for the Name of `ak`, which must be loaded.
   * @param credentialBlob TPM2B_ID_OBJECT wire bytes; @param secret TPM2B_ENCRYPTED_SECRET wire bytes.
   * @throws TpmError TPM_RC (TPM_RC_INTEGRITY etc. when the credential was not made for this AK/EK)
   */
  activateCredential(akIn: TpmAk, ekIn: TpmEk, credentialBlob: Buffer, secret: Buffer): Buffer {
    const ak = this.akHandle(akIn);
    const ek = this.ekHandle(ekIn);
    const ctx = this.ctx();
    const lib = tss();
    const out: [NativePtr | null] = [null];
    try {
      this.withEkAuth(ek, (session) =>
        this.check(
          'TPM2_ActivateCredential',
          lib.Esys_ActivateCredential(
            ctx,
            ak.handle,
            ek.handle as number,
            ESYS_TR_PASSWORD,
            session,
            ESYS_TR_NONE,
            toStruct('TPM2B_ID_OBJECT', credentialBlob),
            toStruct('TPM2B_ENCRYPTED_SECRET', secret),
            out,
          ),
        ),
      );
      return unwrap2b(fromStruct('TPM2B_DIGEST', ptr(out, 'ActivateCredential certInfo')), 'TPM2B_DIGEST');
    } finally {
      freeAll(out);
    }
  }

  /**
   * Makes a loaded transient AK persistent at `persistentHandle` (TPM2_EvictControl, Part 3
   * §28.5, owner authorization with the empty password). Returns the persistent AK; the
   * transient one stays loaded (flush it).
   * @throws TpmError TPM_BAD_INPUT (handle outside the owner range), TPM_RC (NV_DEFINED when occupied)
   */
  persistAk(akIn: TpmAk, persistentHandle: number): TpmAk {
    const ak = this.akHandle(akIn);
    if (persistentHandle < 0x81000000 || persistentHandle > 0x817fffff) {
      throw new TpmError(
        'TPM_BAD_INPUT',
        'persistent handle must be in 0x81000000..0x817FFFFF (owner range)',
      );
    }
    const newHandle: [number] = [ESYS_TR_NONE];
    this.check(
      'TPM2_EvictControl(persist)',
      tss().Esys_EvictControl(
        this.ctx(),
        ESYS_TR_RH_OWNER,
        ak.handle,
        ESYS_TR_PASSWORD,
        ESYS_TR_NONE,
        ESYS_TR_NONE,
        persistentHandle >>> 0,
        newHandle,
      ),
    );
    const p = new LoadedAk(
      this,
      newHandle[0],
      ak.algorithm,
      ak.publicArea,
      ak.name,
      ak.parentQualifiedName,
      ak.hierarchy,
      persistentHandle >>> 0,
    );
    this.loaded.add(p);
    return p;
  }

  /**
   * Removes the persistent object at `persistentHandle` (TPM2_EvictControl). Returns false when
   * nothing was there.
   */
  evictPersistent(persistentHandle: number): boolean {
    const tr = this.trFromTpm(persistentHandle);
    if (tr === null) return false;
    const out: [number] = [ESYS_TR_NONE];
    // On success ESYS invalidates `tr` itself; on failure release it.
    const rc = tss().Esys_EvictControl(
      this.ctx(),
      ESYS_TR_RH_OWNER,
      tr,
      ESYS_TR_PASSWORD,
      ESYS_TR_NONE,
      ESYS_TR_NONE,
      persistentHandle >>> 0,
      out,
    );
    if (rc !== 0) {
      this.trClose(tr);
      this.check('TPM2_EvictControl(evict)', rc);
    }
    return true;
  }

  /**
   * Opens the persistent AK at `persistentHandle` for quoting. `parentQualifiedName` is the QN
   * of its parent (the EK's QN for an enrolled AK, a hierarchy handle for a primary one); it
   * must reproduce the Qualified Name the TPM reports, or the key is refused (it would sign
   * quotes whose qualifiedSigner a verifier cannot reproduce). Returns null when the handle is empty.
   * @throws TpmError TPM_BAD_INPUT (not an acceptable AK, or wrong parent), TPM_RC, TPM_UNREACHABLE
   */
  loadPersistentAk(persistentHandle: number, parentQualifiedName: Buffer): TpmAk | null {
    const tr = this.trFromTpm(persistentHandle);
    if (tr === null) return null;
    try {
      const pub = this.readPublicTr(tr);
      const problem = akAttributeProblem(parsePublic(pub.publicArea).attributes);
      if (problem) throw new TpmError('TPM_BAD_INPUT', problem);
      const alg = akAlgorithmOf(pub.publicArea);
      if (!alg) throw new TpmError('TPM_BAD_INPUT', 'AK is neither RSA-2048 nor ECC P-256');
      if (!qualifiedNameOf(parentQualifiedName, pub.name).equals(pub.qualifiedName)) {
        throw new TpmError(
          'TPM_BAD_INPUT',
          `the key at 0x${persistentHandle.toString(16)} is not a child of the expected parent (Qualified Name differs)`,
        );
      }
      const ak = new LoadedAk(
        this,
        tr,
        alg,
        pub.publicArea,
        pub.name,
        parentQualifiedName,
        // a primary key's parent QN is its hierarchy handle; an EK child lives in the endorsement hierarchy
        parentQualifiedName.length === 4 ? parentQualifiedName.readUInt32BE(0) : TPM_RH_ENDORSEMENT,
        persistentHandle >>> 0,
      );
      this.loaded.add(ak);
      return ak;
    } catch (err) {
      this.trClose(tr);
      throw err;
    }
  }

  /** @internal Used by {@link TpmAk.flush} and {@link TpmEk.flush}. */
  release(obj: Loaded): void {
    if (obj.handle === null) return;
    const handle = obj.handle;
    obj.handle = null;
    this.loaded.delete(obj);
    if (this.esys === null || this.lost) return;
    if (obj.persistent) this.trClose(handle);
    else this.check('TPM2_FlushContext', tss().Esys_FlushContext(this.esys, handle));
  }

  /**
   * Reads sha256-bank PCRs with TPM2_PCR_Read (Part 3 §22.4), repeating the command because one
   * response carries at most 8 digests (TPML_DIGEST, Part 2 §10.9.2).
   * @throws TpmError TPM_BAD_INPUT (bad index, or PCR not implemented), TPM_RC, TPM_UNREACHABLE
   */
  readPcrs(pcrs: number[]): Record<number, Buffer> {
    const ctx = this.ctx();
    const want = normalisePcrs(pcrs);
    const lib = tss();
    const values: Record<number, Buffer> = {};
    let remaining = want;
    while (remaining.length > 0) {
      const counter: [number] = [0];
      const selOut: [NativePtr | null] = [null];
      const valOut: [NativePtr | null] = [null];
      let got: number[];
      let digests: Buffer[];
      try {
        this.check(
          'TPM2_PCR_Read',
          lib.Esys_PCR_Read(
            ctx,
            ESYS_TR_NONE,
            ESYS_TR_NONE,
            ESYS_TR_NONE,
            toStruct('TPML_PCR_SELECTION', pcrSelectionSha256(remaining)),
            counter,
            selOut,
            valOut,
          ),
        );
        const sel = fromStruct('TPML_PCR_SELECTION', ptr(selOut, 'PCR_Read selection'));
        got = parsePcrSelection(sel).get(TPM2_ALG_SHA256) ?? [];
        digests = parseDigestList(fromStruct('TPML_DIGEST', ptr(valOut, 'PCR_Read values')));
      } finally {
        freeAll(selOut, valOut);
      }
      if (got.length === 0) {
        throw new TpmError('TPM_BAD_INPUT', `TPM has no sha256 value for PCR(s) ${remaining.join(',')}`);
      }
      if (digests.length !== got.length || got.some((p) => !remaining.includes(p))) {
        throw new TpmError('TPM_BAD_RESPONSE', 'TPM2_PCR_Read returned values for PCRs not asked for');
      }
      got.forEach((p, i) => {
        const d = digests[i]!;
        if (d.length !== 32)
          throw new TpmError('TPM_BAD_RESPONSE', `PCR ${p} sha256 value is ${d.length} bytes`);
        values[p] = d;
      });
      remaining = remaining.filter((p) => !got.includes(p));
    }
    return values;
  }

  /**
   * TPM2_Quote (Part 3 §18.4) over sha256-bank PCRs with the AK's own scheme. The PCR values are
   * read just before the quote and must hash to its pcrDigest (TPMS_QUOTE_INFO, Part 2 §10.12.1);
   * if a PCR changed in between, the pair is retried (up to 3 times) so the result is consistent.
   * @param qualifyingData at most 32 bytes (always 32 in cMCP: SHA-256 of REPORT_DATA, design §4).
   * @throws TpmError TPM_BAD_INPUT, TPM_CLOSED, TPM_RC, TPM_UNREACHABLE, PCR_CHANGED, TPM_BAD_RESPONSE
   */
  quote(ak: TpmAk, qualifyingData: Buffer, pcrs: number[]): TpmQuote {
    const ctx = this.ctx();
    const loaded = this.akHandle(ak);
    if (!(qualifyingData instanceof Uint8Array) || qualifyingData.length > 32) {
      throw new TpmError('TPM_BAD_INPUT', 'qualifyingData must be a Buffer of at most 32 bytes');
    }
    const qd = Buffer.from(qualifyingData);
    const want = normalisePcrs(pcrs);
    const lib = tss();
    const qdStruct = toStruct('TPM2B_DATA', new WireWriter().tpm2b(qd).done());
    const scheme = toStruct('TPMT_SIG_SCHEME', sigScheme(ak.algorithm));
    const selection = toStruct('TPML_PCR_SELECTION', pcrSelectionSha256(want));
    for (let attempt = 0; attempt < 3; attempt++) {
      const pcrValues = this.readPcrs(want);
      const quoted: [NativePtr | null] = [null];
      const sigOut: [NativePtr | null] = [null];
      let attest: Buffer;
      let signature: Buffer;
      try {
        this.check(
          'TPM2_Quote',
          lib.Esys_Quote(
            ctx,
            loaded.handle,
            ESYS_TR_PASSWORD,
            ESYS_TR_NONE,
            ESYS_TR_NONE,
            qdStruct,
            scheme,
            selection,
            quoted,
            sigOut,
          ),
        );
        attest = unwrap2b(fromStruct('TPM2B_ATTEST', ptr(quoted, 'TPM2_Quote quoted')), 'TPM2B_ATTEST');
        signature = fromStruct('TPMT_SIGNATURE', ptr(sigOut, 'TPM2_Quote signature'));
      } finally {
        freeAll(quoted, sigOut);
      }
      const parsed = parseQuoteAttest(attest);
      const [bank, ...others] = parsed.pcrSelect;
      if (
        parsed.magic !== TPM2_GENERATED_VALUE ||
        !parsed.extraData.equals(qd) ||
        !parsed.qualifiedSigner.equals(ak.qualifiedName) ||
        others.length !== 0 ||
        bank?.hashAlg !== TPM2_ALG_SHA256 ||
        bank.pcrs.join(',') !== want.join(',')
      ) {
        throw new TpmError('TPM_BAD_RESPONSE', 'TPM2_Quote attestation does not match the request');
      }
      const digest = sha256(...want.map((p) => pcrValues[p]!));
      if (digest.equals(parsed.pcrDigest)) {
        return {
          attest,
          signature,
          akPublic: Buffer.from(ak.publicArea),
          pcrSelection: { hash: 'sha256', pcrs: want },
          pcrValues,
        };
      }
    }
    throw new TpmError('PCR_CHANGED', 'PCR values kept changing between TPM2_PCR_Read and TPM2_Quote');
  }

  /**
   * TPM2_PCR_Extend (Part 3 §22.2) of the sha256 bank with empty PCR auth: new = SHA-256(old || digest).
   * PCRs 17-22 need a higher locality than a userspace caller has; the TPM refuses those.
   * @throws TpmError TPM_BAD_INPUT, TPM_RC, TPM_UNREACHABLE
   */
  extendPcr(pcr: number, digest: Buffer): void {
    const ctx = this.ctx();
    normalisePcrs([pcr]);
    if (!(digest instanceof Uint8Array) || digest.length !== 32) {
      throw new TpmError('TPM_BAD_INPUT', 'extend digest must be 32 bytes (sha256)');
    }
    const values = toStruct(
      'TPML_DIGEST_VALUES',
      new WireWriter().u32(1).u16(TPM2_ALG_SHA256).bytes(digest).done(),
    );
    this.check(
      `TPM2_PCR_Extend(PCR ${pcr})`,
      tss().Esys_PCR_Extend(ctx, ESYS_TR_PCR0 + pcr, ESYS_TR_PASSWORD, ESYS_TR_NONE, ESYS_TR_NONE, values),
    );
  }

  /**
   * Flushes every AK still loaded (errors ignored: the TPM may be gone), then Esys_Finalize and
   * Tss2_TctiLdr_Finalize. Idempotent.
   */
  close(): void {
    if (this.esys === null) return;
    const lib = tss();
    for (const obj of this.loaded) {
      if (obj.handle !== null && !this.lost) {
        if (obj.persistent) lib.Esys_TR_Close(this.esys, [obj.handle]);
        else lib.Esys_FlushContext(this.esys, obj.handle);
      }
      obj.handle = null;
    }
    this.loaded.clear();
    const esys: [NativePtr | null] = [this.esys];
    this.esys = null;
    lib.Esys_Finalize(esys);
    const tcti: [NativePtr | null] = [this.tcti];
    this.tcti = null;
    lib.Tss2_TctiLdr_Finalize(tcti);
  }
}
