/**
 * koffi bindings to tpm2-tss (tctildr, esys, mu, rc). Every TPM2B, TPMT and TPML struct is an
 * opaque `void *`: inputs are built by Tss2_MU_<TYPE>_Unmarshal from wire bytes into a generously sized
 * zeroed Buffer, outputs are read back with Tss2_MU_<TYPE>_Marshal. Struct sizes differ between
 * tpm2-tss versions; the wire format (TPM 2.0 Part 2) does not.
 */
import koffi, { type LibraryHandle } from 'koffi';
import { rcHex, TpmError } from './errors.js';

/** ESYS_TR constants (tss2_esys.h). */
export const ESYS_TR_NONE = 0xfff;
export const ESYS_TR_PASSWORD = 0x0ff;
export const ESYS_TR_RH_OWNER = 0x101;
export const ESYS_TR_RH_NULL = 0x107;
export const ESYS_TR_RH_ENDORSEMENT = 0x10b;
export const ESYS_TR_RH_PLATFORM = 0x10c;
/** TPM2_SE_POLICY (Part 2 §6.14): a policy session. */
export const TPM2_SE_POLICY = 0x01;
/** ESYS_TR_PCR0 .. ESYS_TR_PCR31 are 0 .. 31. */
export const ESYS_TR_PCR0 = 0;

export const TPM2_SU_CLEAR = 0x0000;
/** TPM_RC_INITIALIZE: TPM2_Startup was already done (swtpm --flags startup-clear, or firmware). */
export const TPM2_RC_INITIALIZE = 0x100;

/** Layer field of a TSS2_RC (bits 16..23), tss2_common.h. */
export const TSS2_TCTI_RC_LAYER = 10 << 16;
export const TSS2_RC_LAYER_MASK = 0xff << 16;

/**
 * Room for any TPM2B_/TPMT_/TPML_ struct the layer unmarshals or marshals. tpm2-tss 3.2.1 has
 * TPM2B_ATTEST at 2306 bytes, the largest used here; 16 KiB leaves room for future versions.
 */
export const STRUCT_BUF_SIZE = 16 * 1024;

/** A pointer handed out by ESYS (koffi 3 represents pointers as bigint). */
export type NativePtr = bigint;
/** An input struct: a Buffer holding the tpm2-tss C struct, or null for an optional argument. */
type In = Buffer | null;
type Out<T> = [T | null];

export interface TssBindings {
  Tss2_TctiLdr_Initialize(conf: string, ctx: Out<NativePtr>): number;
  Tss2_TctiLdr_Finalize(ctx: Out<NativePtr>): void;
  Esys_Initialize(ctx: Out<NativePtr>, tcti: NativePtr, abi: null): number;
  Esys_Finalize(ctx: Out<NativePtr>): void;
  Esys_Free(ptr: NativePtr): void;
  Esys_Startup(ctx: NativePtr, su: number): number;
  Esys_FlushContext(ctx: NativePtr, handle: number): number;
  Esys_TR_GetName(ctx: NativePtr, handle: number, name: Out<NativePtr>): number;
  Esys_CreatePrimary(
    ctx: NativePtr,
    primaryHandle: number,
    s1: number,
    s2: number,
    s3: number,
    inSensitive: In,
    inPublic: In,
    outsideInfo: In,
    creationPcr: In,
    objectHandle: [number],
    outPublic: Out<NativePtr>,
    creationData: Out<NativePtr>,
    creationHash: Out<NativePtr>,
    creationTicket: Out<NativePtr>,
  ): number;
  Esys_Quote(
    ctx: NativePtr,
    signHandle: number,
    s1: number,
    s2: number,
    s3: number,
    qualifyingData: In,
    inScheme: In,
    pcrSelect: In,
    quoted: Out<NativePtr>,
    signature: Out<NativePtr>,
  ): number;
  Esys_PCR_Read(
    ctx: NativePtr,
    s1: number,
    s2: number,
    s3: number,
    pcrSelectionIn: In,
    updateCounter: [number],
    pcrSelectionOut: Out<NativePtr>,
    pcrValues: Out<NativePtr>,
  ): number;
  Esys_PCR_Extend(ctx: NativePtr, pcrHandle: number, s1: number, s2: number, s3: number, digests: In): number;
  Esys_TR_FromTPMPublic(
    ctx: NativePtr,
    tpmHandle: number,
    s1: number,
    s2: number,
    s3: number,
    object: [number],
  ): number;
  Esys_TR_Close(ctx: NativePtr, object: [number]): number;
  Esys_ReadPublic(
    ctx: NativePtr,
    objectHandle: number,
    s1: number,
    s2: number,
    s3: number,
    outPublic: Out<NativePtr>,
    name: Out<NativePtr>,
    qualifiedName: Out<NativePtr>,
  ): number;
  Esys_NV_ReadPublic(
    ctx: NativePtr,
    nvIndex: number,
    s1: number,
    s2: number,
    s3: number,
    nvPublic: Out<NativePtr>,
    nvName: Out<NativePtr>,
  ): number;
  Esys_NV_Read(
    ctx: NativePtr,
    authHandle: number,
    nvIndex: number,
    s1: number,
    s2: number,
    s3: number,
    size: number,
    offset: number,
    data: Out<NativePtr>,
  ): number;
  Esys_NV_DefineSpace(
    ctx: NativePtr,
    authHandle: number,
    s1: number,
    s2: number,
    s3: number,
    auth: In,
    publicInfo: In,
    nvHandle: [number],
  ): number;
  Esys_NV_Write(
    ctx: NativePtr,
    authHandle: number,
    nvIndex: number,
    s1: number,
    s2: number,
    s3: number,
    data: In,
    offset: number,
  ): number;
  Esys_Create(
    ctx: NativePtr,
    parent: number,
    s1: number,
    s2: number,
    s3: number,
    inSensitive: In,
    inPublic: In,
    outsideInfo: In,
    creationPcr: In,
    outPrivate: Out<NativePtr>,
    outPublic: Out<NativePtr>,
    creationData: Out<NativePtr>,
    creationHash: Out<NativePtr>,
    creationTicket: Out<NativePtr>,
  ): number;
  Esys_Load(
    ctx: NativePtr,
    parent: number,
    s1: number,
    s2: number,
    s3: number,
    inPrivate: In,
    inPublic: In,
    objectHandle: [number],
  ): number;
  Esys_StartAuthSession(
    ctx: NativePtr,
    tpmKey: number,
    bind: number,
    s1: number,
    s2: number,
    s3: number,
    nonceCaller: In,
    sessionType: number,
    symmetric: In,
    authHash: number,
    sessionHandle: [number],
  ): number;
  Esys_PolicySecret(
    ctx: NativePtr,
    authHandle: number,
    policySession: number,
    s1: number,
    s2: number,
    s3: number,
    nonceTPM: In,
    cpHashA: In,
    policyRef: In,
    expiration: number,
    timeout: Out<NativePtr>,
    policyTicket: Out<NativePtr>,
  ): number;
  Esys_ActivateCredential(
    ctx: NativePtr,
    activateHandle: number,
    keyHandle: number,
    s1: number,
    s2: number,
    s3: number,
    credentialBlob: In,
    secret: In,
    certInfo: Out<NativePtr>,
  ): number;
  Esys_EvictControl(
    ctx: NativePtr,
    auth: number,
    objectHandle: number,
    s1: number,
    s2: number,
    s3: number,
    persistentHandle: number,
    newObjectHandle: [number],
  ): number;
  Esys_GetCapability(
    ctx: NativePtr,
    s1: number,
    s2: number,
    s3: number,
    capability: number,
    property: number,
    propertyCount: number,
    moreData: [number],
    capabilityData: Out<NativePtr>,
  ): number;
  Tss2_RC_Decode(rc: number): string;
  marshal: Record<MuType, (src: NativePtr | Buffer, buf: Buffer, size: number, off: [number]) => number>;
  unmarshal: Record<MuType, (buf: Buffer, size: number, off: [number], dest: Buffer) => number>;
}

/** The TPM types the layer converts with Tss2_MU_<TYPE>_(Un)marshal. */
export const MU_TYPES = [
  'TPM2B_PUBLIC',
  'TPM2B_SENSITIVE_CREATE',
  'TPM2B_DATA',
  'TPM2B_NAME',
  'TPM2B_ATTEST',
  'TPMT_SIGNATURE',
  'TPMT_SIG_SCHEME',
  'TPML_PCR_SELECTION',
  'TPML_DIGEST',
  'TPML_DIGEST_VALUES',
  'TPM2B_PRIVATE',
  'TPM2B_DIGEST',
  'TPM2B_NONCE',
  'TPM2B_AUTH',
  'TPM2B_ID_OBJECT',
  'TPM2B_ENCRYPTED_SECRET',
  'TPMT_SYM_DEF',
  'TPM2B_NV_PUBLIC',
  'TPM2B_MAX_NV_BUFFER',
  'TPMS_CAPABILITY_DATA',
] as const;
export type MuType = (typeof MU_TYPES)[number];

let cached: TssBindings | null = null;

function load(name: string): LibraryHandle {
  try {
    return koffi.load(name);
  } catch (err) {
    throw new TpmError(
      'TSS_LIBRARY_MISSING',
      `cannot load ${name} (tpm2-tss): ${(err as Error).message}; run the setup script (scripts/setup.sh installs libtss2-dev)`,
      null,
      { cause: err },
    );
  }
}

/** Loads the tpm2-tss libraries once per process. Throws TpmError TSS_LIBRARY_MISSING. */
export function tss(): TssBindings {
  if (cached) return cached;
  // tpm2-tss logs every failure to stderr; errors reach callers as TpmError instead. Set
  // TSS2_LOG yourself (e.g. all+error) to see them. Read lazily by tpm2-tss on first log.
  if (process.env.TSS2_LOG === undefined) process.env.TSS2_LOG = 'all+NONE';
  const tctildr = load('libtss2-tctildr.so.0');
  const esys = load('libtss2-esys.so.0');
  const mu = load('libtss2-mu.so.0');
  const rc = load('libtss2-rc.so.0');

  const marshal = {} as TssBindings['marshal'];
  const unmarshal = {} as TssBindings['unmarshal'];
  for (const t of MU_TYPES) {
    marshal[t] = mu.func(
      `uint32_t Tss2_MU_${t}_Marshal(const void *src, void *buf, size_t size, _Inout_ size_t *off)`,
    );
    unmarshal[t] = mu.func(
      `uint32_t Tss2_MU_${t}_Unmarshal(const void *buf, size_t size, _Inout_ size_t *off, void *dest)`,
    );
  }

  cached = {
    Tss2_TctiLdr_Initialize: tctildr.func(
      'uint32_t Tss2_TctiLdr_Initialize(const char *conf, _Out_ void **ctx)',
    ),
    Tss2_TctiLdr_Finalize: tctildr.func('void Tss2_TctiLdr_Finalize(_Inout_ void **ctx)'),
    Esys_Initialize: esys.func('uint32_t Esys_Initialize(_Out_ void **ctx, void *tcti, void *abi)'),
    Esys_Finalize: esys.func('void Esys_Finalize(_Inout_ void **ctx)'),
    Esys_Free: esys.func('void Esys_Free(void *ptr)'),
    Esys_Startup: esys.func('uint32_t Esys_Startup(void *ctx, uint16_t su)'),
    Esys_FlushContext: esys.func('uint32_t Esys_FlushContext(void *ctx, uint32_t handle)'),
    Esys_TR_GetName: esys.func('uint32_t Esys_TR_GetName(void *ctx, uint32_t handle, _Out_ void **name)'),
    Esys_CreatePrimary: esys.func(
      'uint32_t Esys_CreatePrimary(void *ctx, uint32_t primary, uint32_t s1, uint32_t s2, uint32_t s3, ' +
        'const void *inSensitive, const void *inPublic, const void *outsideInfo, const void *creationPcr, ' +
        '_Out_ uint32_t *objectHandle, _Out_ void **outPublic, _Out_ void **creationData, ' +
        '_Out_ void **creationHash, _Out_ void **creationTicket)',
    ),
    Esys_Quote: esys.func(
      'uint32_t Esys_Quote(void *ctx, uint32_t sign, uint32_t s1, uint32_t s2, uint32_t s3, ' +
        'const void *qualifyingData, const void *inScheme, const void *pcrSelect, ' +
        '_Out_ void **quoted, _Out_ void **signature)',
    ),
    Esys_PCR_Read: esys.func(
      'uint32_t Esys_PCR_Read(void *ctx, uint32_t s1, uint32_t s2, uint32_t s3, const void *selIn, ' +
        '_Out_ uint32_t *updateCounter, _Out_ void **selOut, _Out_ void **values)',
    ),
    Esys_PCR_Extend: esys.func(
      'uint32_t Esys_PCR_Extend(void *ctx, uint32_t pcr, uint32_t s1, uint32_t s2, uint32_t s3, const void *digests)',
    ),
    Esys_TR_FromTPMPublic: esys.func(
      'uint32_t Esys_TR_FromTPMPublic(void *ctx, uint32_t tpmHandle, uint32_t s1, uint32_t s2, uint32_t s3, ' +
        '_Out_ uint32_t *object)',
    ),
    Esys_TR_Close: esys.func('uint32_t Esys_TR_Close(void *ctx, _Inout_ uint32_t *object)'),
    Esys_ReadPublic: esys.func(
      'uint32_t Esys_ReadPublic(void *ctx, uint32_t object, uint32_t s1, uint32_t s2, uint32_t s3, ' +
        '_Out_ void **outPublic, _Out_ void **name, _Out_ void **qualifiedName)',
    ),
    Esys_NV_ReadPublic: esys.func(
      'uint32_t Esys_NV_ReadPublic(void *ctx, uint32_t nvIndex, uint32_t s1, uint32_t s2, uint32_t s3, ' +
        '_Out_ void **nvPublic, _Out_ void **nvName)',
    ),
    Esys_NV_Read: esys.func(
      'uint32_t Esys_NV_Read(void *ctx, uint32_t auth, uint32_t nvIndex, uint32_t s1, uint32_t s2, uint32_t s3, ' +
        'uint16_t size, uint16_t offset, _Out_ void **data)',
    ),
    Esys_NV_DefineSpace: esys.func(
      'uint32_t Esys_NV_DefineSpace(void *ctx, uint32_t auth, uint32_t s1, uint32_t s2, uint32_t s3, ' +
        'const void *authValue, const void *publicInfo, _Out_ uint32_t *nvHandle)',
    ),
    Esys_NV_Write: esys.func(
      'uint32_t Esys_NV_Write(void *ctx, uint32_t auth, uint32_t nvIndex, uint32_t s1, uint32_t s2, uint32_t s3, ' +
        'const void *data, uint16_t offset)',
    ),
    Esys_Create: esys.func(
      'uint32_t Esys_Create(void *ctx, uint32_t parent, uint32_t s1, uint32_t s2, uint32_t s3, ' +
        'const void *inSensitive, const void *inPublic, const void *outsideInfo, const void *creationPcr, ' +
        '_Out_ void **outPrivate, _Out_ void **outPublic, _Out_ void **creationData, ' +
        '_Out_ void **creationHash, _Out_ void **creationTicket)',
    ),
    Esys_Load: esys.func(
      'uint32_t Esys_Load(void *ctx, uint32_t parent, uint32_t s1, uint32_t s2, uint32_t s3, ' +
        'const void *inPrivate, const void *inPublic, _Out_ uint32_t *objectHandle)',
    ),
    Esys_StartAuthSession: esys.func(
      'uint32_t Esys_StartAuthSession(void *ctx, uint32_t tpmKey, uint32_t bind, uint32_t s1, uint32_t s2, ' +
        'uint32_t s3, const void *nonceCaller, uint8_t sessionType, const void *symmetric, uint16_t authHash, ' +
        '_Out_ uint32_t *sessionHandle)',
    ),
    Esys_PolicySecret: esys.func(
      'uint32_t Esys_PolicySecret(void *ctx, uint32_t authHandle, uint32_t policySession, uint32_t s1, ' +
        'uint32_t s2, uint32_t s3, const void *nonceTPM, const void *cpHashA, const void *policyRef, ' +
        'int32_t expiration, _Out_ void **timeout, _Out_ void **policyTicket)',
    ),
    Esys_ActivateCredential: esys.func(
      'uint32_t Esys_ActivateCredential(void *ctx, uint32_t activateHandle, uint32_t keyHandle, uint32_t s1, ' +
        'uint32_t s2, uint32_t s3, const void *credentialBlob, const void *secret, _Out_ void **certInfo)',
    ),
    Esys_EvictControl: esys.func(
      'uint32_t Esys_EvictControl(void *ctx, uint32_t auth, uint32_t object, uint32_t s1, uint32_t s2, ' +
        'uint32_t s3, uint32_t persistentHandle, _Out_ uint32_t *newObjectHandle)',
    ),
    Esys_GetCapability: esys.func(
      'uint32_t Esys_GetCapability(void *ctx, uint32_t s1, uint32_t s2, uint32_t s3, uint32_t capability, ' +
        'uint32_t property, uint32_t propertyCount, _Out_ uint8_t *moreData, _Out_ void **capabilityData)',
    ),
    Tss2_RC_Decode: rc.func('const char *Tss2_RC_Decode(uint32_t rc)'),
    marshal,
    unmarshal,
  };
  return cached;
}

/** Tss2_RC_Decode text, e.g. "tpm:parameter(1):value is out of range or is not correct for the context". */
export function decodeRc(rc: number): string {
  try {
    return tss().Tss2_RC_Decode(rc >>> 0);
  } catch {
    return 'unknown';
  }
}

/** Builds a TpmError for a failed tpm2-tss call: message = what + decoded text + hex rc. */
export function rcError(what: string, rc: number): TpmError {
  const code = ((rc >>> 0) & TSS2_RC_LAYER_MASK) === TSS2_TCTI_RC_LAYER ? 'TPM_UNREACHABLE' : 'TPM_RC';
  return new TpmError(code, `${what} failed: ${decodeRc(rc)} (rc ${rcHex(rc)})`, rc >>> 0);
}

export function check(what: string, rc: number): void {
  if (rc !== 0) throw rcError(what, rc);
}

/** Wire bytes → tpm2-tss struct in a fresh zeroed Buffer (Tss2_MU_<TYPE>_Unmarshal). */
export function toStruct(type: MuType, wire: Buffer): Buffer {
  const dest = Buffer.alloc(STRUCT_BUF_SIZE);
  const off: [number] = [0];
  const rc = tss().unmarshal[type](wire, wire.length, off, dest);
  if (rc !== 0) {
    throw new TpmError(
      'TPM_BAD_INPUT',
      `Tss2_MU_${type}_Unmarshal failed: ${decodeRc(rc)} (rc ${rcHex(rc)})`,
      rc,
    );
  }
  if (Number(off[0]) !== wire.length) {
    throw new TpmError('TPM_BAD_INPUT', `${type}: ${wire.length - Number(off[0])} trailing bytes`);
  }
  return dest;
}

/** tpm2-tss struct (pointer from ESYS) → wire bytes (Tss2_MU_<TYPE>_Marshal). */
export function fromStruct(type: MuType, src: NativePtr | Buffer): Buffer {
  const buf = Buffer.alloc(STRUCT_BUF_SIZE);
  const off: [number] = [0];
  const rc = tss().marshal[type](src, buf, buf.length, off);
  if (rc !== 0) {
    throw new TpmError(
      'TPM_BAD_RESPONSE',
      `Tss2_MU_${type}_Marshal failed: ${decodeRc(rc)} (rc ${rcHex(rc)})`,
      rc,
    );
  }
  return Buffer.from(buf.subarray(0, Number(off[0])));
}
