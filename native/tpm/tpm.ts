/**
 * Synchronous TPM 2.0 access through tpm2-tss ESYS (koffi): attestation keys, PCR reads and
 * extends, and quotes. Sources: TCG TPM 2.0 Library spec Parts 1-3 (rev 1.59); tpm2-tss 3.x ESYS.
 */
import { createHash } from 'node:crypto';
import { TpmError } from './errors.js';
import {
  ESYS_TR_NONE,
  ESYS_TR_PASSWORD,
  ESYS_TR_PCR0,
  ESYS_TR_RH_ENDORSEMENT,
  fromStruct,
  type NativePtr,
  rcError,
  TPM2_RC_INITIALIZE,
  TPM2_SU_CLEAR,
  toStruct,
  tss,
} from './lib.js';
import {
  MAX_PCR_INDEX,
  parseDigestList,
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
  WireReader,
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
  /** The hierarchy the AK is a primary key of (TPM_RH_ENDORSEMENT, 0x4000000B). */
  readonly hierarchy: number;
  /** TPM2_FlushContext (Part 3 §28.4). Idempotent; also done by {@link Tpm.close}. */
  flush(): void;
}

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

function nameOf(publicArea: Buffer): Buffer {
  return Buffer.concat([new WireWriter().u16(TPM2_ALG_SHA256).done(), sha256(publicArea)]);
}

function qualifiedNameOf(hierarchy: number, name: Buffer): Buffer {
  const parentQn = new WireWriter().u32(hierarchy).done();
  return Buffer.concat([new WireWriter().u16(TPM2_ALG_SHA256).done(), sha256(parentQn, name)]);
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

class LoadedAk implements TpmAk {
  /** ESYS_TR of the loaded key; null once flushed. */
  handle: number | null;

  constructor(
    readonly owner: Tpm,
    handle: number,
    readonly algorithm: AkAlgorithm,
    readonly publicArea: Buffer,
    readonly name: Buffer,
    readonly qualifiedName: Buffer,
    readonly hierarchy: number,
  ) {
    this.handle = handle;
  }

  flush(): void {
    this.owner.flushAk(this);
  }
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
  private readonly loaded = new Set<LoadedAk>();
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
    const ctx = this.ctx();
    const template = akTemplate(alg);
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
    const nameOut: [NativePtr | null] = [null];
    let created = false;
    try {
      this.check(
        'TPM2_CreatePrimary',
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
      const pub2b = fromStruct('TPM2B_PUBLIC', ptr(outPublic, 'TPM2_CreatePrimary outPublic'));
      const r = new WireReader(pub2b, 'TPM2B_PUBLIC');
      const publicArea = r.tpm2b();
      r.end();
      const name = nameOf(publicArea);
      // ESYS computes the name from the response too; disagreeing means a marshalling bug.
      this.check('Esys_TR_GetName', lib.Esys_TR_GetName(ctx, handle[0], nameOut));
      const esysName = new WireReader(
        fromStruct('TPM2B_NAME', ptr(nameOut, 'Esys_TR_GetName')),
        'TPM2B_NAME',
      );
      if (!esysName.tpm2b().equals(name)) {
        throw new TpmError('TPM_BAD_RESPONSE', 'AK name from ESYS differs from SHA-256 of its TPMT_PUBLIC');
      }
      const ak = new LoadedAk(
        this,
        handle[0],
        alg,
        publicArea,
        name,
        qualifiedNameOf(TPM_RH_ENDORSEMENT, name),
        TPM_RH_ENDORSEMENT,
      );
      this.loaded.add(ak);
      return ak;
    } catch (err) {
      if (created && !this.lost) lib.Esys_FlushContext(ctx, handle[0]);
      throw err;
    } finally {
      freeAll(outPublic, creationData, creationHash, creationTicket, nameOut);
    }
  }

  /** @internal Used by {@link TpmAk.flush}. */
  flushAk(ak: LoadedAk): void {
    if (ak.handle === null) return;
    const handle = ak.handle;
    ak.handle = null;
    this.loaded.delete(ak);
    if (this.esys === null || this.lost) return;
    this.check('TPM2_FlushContext', tss().Esys_FlushContext(this.esys, handle));
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
        const sel = new WireReader(
          fromStruct('TPML_PCR_SELECTION', ptr(selOut, 'PCR_Read selection')),
          'sel',
        );
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
    if (!(ak instanceof LoadedAk) || ak.owner !== this) {
      throw new TpmError('TPM_BAD_INPUT', 'AK was not created by this Tpm');
    }
    if (ak.handle === null) throw new TpmError('TPM_CLOSED', 'AK has been flushed');
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
            ak.handle,
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
        const a = new WireReader(
          fromStruct('TPM2B_ATTEST', ptr(quoted, 'TPM2_Quote quoted')),
          'TPM2B_ATTEST',
        );
        attest = a.tpm2b();
        a.end();
        signature = fromStruct('TPMT_SIGNATURE', ptr(sigOut, 'TPM2_Quote signature'));
      } finally {
        freeAll(quoted, sigOut);
      }
      const parsed = parseQuoteAttest(attest);
      const selected = parsed.pcrSelection.get(TPM2_ALG_SHA256) ?? [];
      if (
        parsed.magic !== TPM2_GENERATED_VALUE ||
        !parsed.extraData.equals(qd) ||
        !parsed.qualifiedSigner.equals(ak.qualifiedName) ||
        parsed.pcrSelection.size !== 1 ||
        selected.join(',') !== want.join(',')
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
    for (const ak of this.loaded) {
      if (ak.handle !== null && !this.lost) lib.Esys_FlushContext(this.esys, ak.handle);
      ak.handle = null;
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
