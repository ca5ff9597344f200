/**
 * TPM 2.0 access through tpm2-tss ESYS (koffi): attestation keys, PCR reads and extends, and
 * quotes — synchronous, except the quote the gateway binds sessions with, which also runs on
 * koffi's worker thread ({@link Tpm.quoteAsync}). Sources: TCG TPM 2.0 Library spec Parts 1-3
 * (rev 1.59); tpm2-tss 3.x ESYS.
 *
 * The {@link Tpm} class owns the ESYS context, its loaded objects, the lost-connection state and
 * the busy state of an asynchronous command; its operations live by concern in ./nv.ts,
 * ./enroll.ts, ./pcr.ts and ./primary.ts (primary keys, the EK's policy session), shapes and
 * templates in ./model.ts, object bookkeeping in ./esys.ts.
 */
import { type EkAlgorithm, ekTemplate } from './ek.js';
import * as enrollOps from './enroll.js';
import { TpmError } from './errors.js';
import { freeAll, type Loaded, LoadedAk, LoadedEk, ptr } from './esys.js';
import {
  ESYS_TR_NONE,
  fromStruct,
  type NativePtr,
  rcError,
  TPM2_RC_INITIALIZE,
  TPM2_SU_CLEAR,
  tss,
} from './lib.js';
import {
  type AkAlgorithm,
  type AkBlobs,
  akTemplate,
  isHandleAbsent,
  type NvPublic,
  type ReadPublicResult,
  TPM_RH_ENDORSEMENT,
  type TpmAk,
  type TpmEk,
  type TpmQuote,
} from './model.js';
import * as nvOps from './nv.js';
import * as pcrOps from './pcr.js';
import * as primaryOps from './primary.js';
import { hierarchyQualifiedName, nameOfPublic } from './public.js';
import { unwrap2b } from './wire.js';

export {
  type AkAlgorithm,
  type AkBlobs,
  akTemplate,
  isHandleAbsent,
  type NvPublic,
  type ReadPublicResult,
  TPM_RH_ENDORSEMENT,
  type TpmAk,
  type TpmEk,
  type TpmQuote,
} from './model.js';

/**
 * One ESYS context over one TCTI connection. Not safe to share between concurrent callers (calls
 * are synchronous, so within one Node thread they cannot interleave).
 */
export class Tpm {
  private esys: NativePtr | null;
  private tcti: NativePtr | null;
  private readonly loaded = new Set<Loaded>();
  private lost: TpmError | null = null;
  /** An ESYS command is running on koffi's worker thread ({@link esysAsync}). */
  private busy = false;
  /** close() was called while busy: done when the command returns. */
  private closeDeferred = false;

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

  /** @internal (for ./nv.ts, ./enroll.ts, ./pcr.ts, ./primary.ts) */
  ctx(): NativePtr {
    if (this.esys === null || this.closeDeferred) throw new TpmError('TPM_CLOSED', 'TPM is closed');
    // An ESYS context is not thread-safe: nothing may touch it while a command runs on koffi's
    // worker thread (callers serialise: src/tee/tpm-provider.ts; this refuses if one did not).
    if (this.busy) {
      throw new TpmError(
        'TPM_BUSY',
        'an ESYS command is in flight on this TPM context; commands must be serialised',
      );
    }
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

  /**
   * @internal (for ./pcr.ts) Runs one ESYS command on koffi's worker thread (`func.async`), so
   * the event loop is free while the TPM works; the context is marked busy until it returns (any
   * other use of it meanwhile throws TPM_BUSY) and a close() requested meanwhile waits for it.
   * @param fn a koffi function of {@link tss}; `args` gets the ESYS context.
   * @throws TpmError as {@link check}; TPM_BUSY, TPM_CLOSED.
   */
  async esysAsync(what: string, fn: unknown, args: (ctx: NativePtr) => unknown[]): Promise<void> {
    const callArgs = args(this.ctx());
    this.busy = true;
    let rc: number;
    try {
      rc = await new Promise<number>((resolve, reject) => {
        (fn as { async: (...a: unknown[]) => void }).async(...callArgs, (err: unknown, res: number) =>
          err ? reject(err) : resolve(res),
        );
      });
    } finally {
      this.busy = false;
      if (this.closeDeferred) {
        this.closeDeferred = false;
        this.close();
      }
    }
    if (this.esys === null) throw new TpmError('TPM_CLOSED', 'TPM was closed during the command');
    this.check(what, rc);
  }

  /** @internal (for ./nv.ts, ./enroll.ts, ./pcr.ts, ./primary.ts) */
  check(what: string, rc: number): void {
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

  /** @internal (for ./primary.ts) The context for a clean-up flush: null once closed, never throws. */
  rawCtx(): NativePtr | null {
    return this.esys;
  }

  /**
   * Creates an attestation key as a primary key of the endorsement hierarchy (TPM2_CreatePrimary,
   * Part 3 §24.1; template {@link akTemplate}). The endorsement hierarchy is used because TPMS_ATTEST
   * from keys outside the endorsement/platform hierarchies has resetCount, restartCount and
   * firmwareVersion obfuscated (Part 3 §18.1), and the planned EK-parented AK lives there too. The
   * key is deterministic for the TPM's endorsement seed and template (`authPolicy`, default empty). Flush it
   * (or {@link close}): a raw swtpm socket holds only 3 transient objects.
   * @throws TpmError TPM_RC, TPM_UNREACHABLE, TPM_CLOSED
   */
  createAk(alg: AkAlgorithm, authPolicy?: Buffer): TpmAk {
    const { handle, publicArea, name } = primaryOps.createPrimary(this, akTemplate(alg, authPolicy), 'AK');
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
    const { handle, publicArea, name } = primaryOps.createPrimary(this, ekTemplate(alg), 'EK');
    const ek = new LoadedEk(this, handle, alg, publicArea, name);
    this.loaded.add(ek);
    return ek;
  }

  /**
   * An ESYS_TR for a TPM handle (persistent object or NV index), or null when the TPM has
   * nothing there (TPM_RC_HANDLE). Release it with Esys_TR_Close.
   */
  /** @internal (for ./nv.ts, ./enroll.ts, ./pcr.ts, ./primary.ts) */
  trFromTpm(tpmHandle: number): number | null {
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

  /** @internal (for ./nv.ts, ./enroll.ts, ./pcr.ts, ./primary.ts) */
  trClose(tr: number): void {
    if (this.esys === null || this.lost) return;
    const h: [number] = [tr];
    tss().Esys_TR_Close(this.esys, h);
  }

  /**
   * TPM2_NV_ReadPublic (Part 3 §31.6) of an NV index, or null when the index is not defined.
   * @throws TpmError TPM_RC, TPM_UNREACHABLE, TPM_BAD_RESPONSE
   */
  nvPublic(index: number): NvPublic | null {
    return nvOps.nvPublic(this, index);
  }

  /**
   * Reads a whole NV index with its own (empty) authorization (TPM2_NV_Read, Part 3 §31.13), in
   * chunks. Returns null when the index is not defined. EK and platform certificate indices are
   * AUTHREAD with an empty authValue.
   * @throws TpmError TPM_RC (e.g. not readable), TPM_UNREACHABLE
   */
  readNv(index: number): Buffer | null {
    return nvOps.readNv(this, index);
  }

  /**
   * Defines an owner-authorized NV index (empty authValue, AUTHREAD|AUTHWRITE|OWNERREAD|OWNERWRITE|NO_DA)
   * and writes `data` into it. Used to stage platform certificates (e.g. a cloud AK certificate)
   * on a software TPM; a real platform provisions these itself.
   * @throws TpmError TPM_RC (e.g. NV_DEFINED), TPM_UNREACHABLE
   */
  writeNewNv(index: number, data: Buffer): void {
    nvOps.writeNewNv(this, index, data);
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

  /** @internal (for ./nv.ts, ./enroll.ts, ./pcr.ts, ./primary.ts) */
  readPublicTr(tr: number): ReadPublicResult {
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
   * Runs `fn` with the authorization session the EK's USER role needs (./primary.ts).
   */
  /** @internal (for ./nv.ts, ./enroll.ts, ./pcr.ts, ./primary.ts) */
  withEkAuth<T>(ek: LoadedEk, fn: (session: number) => T): T {
    return primaryOps.withEkAuth(this, ek, fn);
  }

  /** @internal (for ./nv.ts, ./enroll.ts, ./pcr.ts, ./primary.ts) */
  ekHandle(ek: TpmEk): LoadedEk {
    if (!(ek instanceof LoadedEk) || ek.owner !== this) {
      throw new TpmError('TPM_BAD_INPUT', 'EK was not created by this Tpm');
    }
    if (ek.handle === null) throw new TpmError('TPM_CLOSED', 'EK has been flushed');
    return ek;
  }

  /** @internal (for ./nv.ts, ./enroll.ts, ./pcr.ts, ./primary.ts) */
  akHandle(ak: TpmAk): LoadedAk & { handle: number } {
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
    return enrollOps.createAkUnderEk(this, ekIn, alg);
  }

  /**
   * Loads AK blobs under the EK (TPM2_Load, Part 3 §12.2). Refuses a public area that is not
   * a restricted signing key fixed to this TPM and parent.
   * @throws TpmError TPM_BAD_INPUT (not an acceptable AK), TPM_RC (e.g. blobs of another EK)
   */
  loadAkUnderEk(ekIn: TpmEk, blobs: AkBlobs): TpmAk {
    return enrollOps.loadAkUnderEk(this, ekIn, blobs);
  }

  /**
   * TPM2_ActivateCredential (Part 3 §12.5): the TPM decrypts the credential blob with the EK and
   * releases the credential only if it was made for the Name of `ak`, which must be loaded.
   * @param credentialBlob TPM2B_ID_OBJECT wire bytes; @param secret TPM2B_ENCRYPTED_SECRET wire bytes.
   * @throws TpmError TPM_RC (TPM_RC_INTEGRITY etc. when the credential was not made for this AK/EK)
   */
  activateCredential(akIn: TpmAk, ekIn: TpmEk, credentialBlob: Buffer, secret: Buffer): Buffer {
    return enrollOps.activateCredential(this, akIn, ekIn, credentialBlob, secret);
  }

  /**
   * Makes a loaded transient AK persistent at `persistentHandle` (TPM2_EvictControl, Part 3
   * §28.5, owner authorization with the empty password). Returns the persistent AK; the
   * transient one stays loaded (flush it).
   * @throws TpmError TPM_BAD_INPUT (handle outside the owner range), TPM_RC (NV_DEFINED when occupied)
   */
  persistAk(akIn: TpmAk, persistentHandle: number): TpmAk {
    return enrollOps.persistAk(this, akIn, persistentHandle);
  }

  /**
   * Removes the persistent object at `persistentHandle` (TPM2_EvictControl). Returns false when
   * nothing was there.
   */
  evictPersistent(persistentHandle: number): boolean {
    return enrollOps.evictPersistent(this, persistentHandle);
  }

  /**
   * Opens the persistent AK at `persistentHandle` for quoting. `parentQualifiedName` is the QN
   * of its parent (the EK's QN for an enrolled AK, a hierarchy handle for a primary one); it
   * must reproduce the Qualified Name the TPM reports, or the key is refused (it would sign
   * quotes whose qualifiedSigner a verifier cannot reproduce). Returns null when the handle is empty.
   * @throws TpmError TPM_BAD_INPUT (not an acceptable AK, or wrong parent), TPM_RC, TPM_UNREACHABLE
   */
  loadPersistentAk(persistentHandle: number, parentQualifiedName: Buffer): TpmAk | null {
    return enrollOps.loadPersistentAk(this, persistentHandle, parentQualifiedName);
  }

  /** @internal Registers a loaded object so {@link close} releases it. */
  track(obj: Loaded): void {
    this.loaded.add(obj);
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
    return pcrOps.readPcrs(this, pcrs);
  }

  /**
   * TPM2_Quote (Part 3 §18.4) over sha256-bank PCRs with the AK's own scheme. The PCR values are
   * read just before the quote and must hash to its pcrDigest (TPMS_QUOTE_INFO, Part 2 §10.12.1);
   * if a PCR changed in between, the pair is retried (up to 3 times) so the result is consistent.
   * @param qualifyingData at most 32 bytes (always 32 in cMCP: SHA-256 of REPORT_DATA, docs/spec/binding.md).
   * @throws TpmError TPM_BAD_INPUT, TPM_CLOSED, TPM_RC, TPM_UNREACHABLE, PCR_CHANGED, TPM_BAD_RESPONSE
   */
  quote(ak: TpmAk, qualifyingData: Buffer, pcrs: number[]): TpmQuote {
    return pcrOps.quote(this, ak, qualifyingData, pcrs);
  }

  /**
   * {@link quote} with TPM2_PCR_Read and TPM2_Quote run on koffi's worker thread, so the event
   * loop is not held while the TPM signs (tens of ms on a hardware TPM). One command at a time:
   * the context is busy meanwhile (TPM_BUSY for anything else that tries to use it).
   * @throws TpmError as {@link quote}; TPM_BUSY.
   */
  quoteAsync(ak: TpmAk, qualifyingData: Buffer, pcrs: number[]): Promise<TpmQuote> {
    return pcrOps.quoteAsync(this, ak, qualifyingData, pcrs);
  }

  /**
   * TPM2_PCR_Extend (Part 3 §22.2) of the sha256 bank with empty PCR auth: new = SHA-256(old || digest).
   * PCRs 17-22 need a higher locality than a userspace caller has; the TPM refuses those.
   * @throws TpmError TPM_BAD_INPUT, TPM_RC, TPM_UNREACHABLE
   */
  extendPcr(pcr: number, digest: Buffer): void {
    pcrOps.extendPcr(this, pcr, digest);
  }

  /**
   * Flushes every AK still loaded (errors ignored: the TPM may be gone), then Esys_Finalize and
   * Tss2_TctiLdr_Finalize. Idempotent.
   */
  close(): void {
    if (this.esys === null) return;
    if (this.busy) {
      this.closeDeferred = true;
      return;
    }
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
