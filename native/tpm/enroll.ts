/**
 * AK enrollment under the EK for {@link Tpm}: TPM2_Create / TPM2_Load under the EK (Part 3
 * §12.1, §12.2), TPM2_ActivateCredential (§12.5) with the EK's PolicySecret session, and
 * persistence (TPM2_EvictControl, §28.5).
 */
import { TpmError } from './errors.js';
import { akAlgorithmOf, freeAll, LoadedAk, ptr } from './esys.js';
import {
  ESYS_TR_NONE,
  ESYS_TR_PASSWORD,
  ESYS_TR_RH_OWNER,
  fromStruct,
  type NativePtr,
  toStruct,
  tss,
} from './lib.js';
import {
  type AkAlgorithm,
  type AkBlobs,
  akTemplate,
  TPM_RH_ENDORSEMENT,
  type TpmAk,
  type TpmEk,
} from './model.js';
import { creation } from './primary.js';
import { akAttributeProblem, nameOfPublic, parsePublic, qualifiedNameOf } from './public.js';
import type { Tpm } from './tpm.js';
import { unwrap2b, WireWriter } from './wire.js';

/** {@link Tpm.createAkUnderEk} (see its TSDoc). */
export function createAkUnderEk(t: Tpm, ekIn: TpmEk, alg: AkAlgorithm): AkBlobs {
  const ek = t.ekHandle(ekIn);
  const ctx = t.ctx();
  const lib = tss();
  const c = creation(akTemplate(alg));
  const outPrivate: [NativePtr | null] = [null];
  try {
    t.withEkAuth(ek, (session) =>
      t.check(
        'TPM2_Create(AK under EK)',
        lib.Esys_Create(
          ctx,
          ek.handle as number,
          session,
          ESYS_TR_NONE,
          ESYS_TR_NONE,
          ...c.ins,
          outPrivate,
          ...c.outs,
        ),
      ),
    );
    const privateBlob = fromStruct('TPM2B_PRIVATE', ptr(outPrivate, 'Create outPrivate'));
    const publicArea = unwrap2b(
      fromStruct('TPM2B_PUBLIC', ptr(c.outPublic, 'Create outPublic')),
      'TPM2B_PUBLIC',
    );
    const problem = akAttributeProblem(parsePublic(publicArea).attributes);
    if (problem) throw new TpmError('TPM_BAD_RESPONSE', problem);
    return { privateBlob, publicArea };
  } finally {
    freeAll(outPrivate);
    c.free();
  }
}

/** {@link Tpm.loadAkUnderEk} (see its TSDoc). */
export function loadAkUnderEk(t: Tpm, ekIn: TpmEk, blobs: AkBlobs): TpmAk {
  const ek = t.ekHandle(ekIn);
  const problem = akAttributeProblem(parsePublic(blobs.publicArea).attributes);
  if (problem) throw new TpmError('TPM_BAD_INPUT', problem);
  const alg = akAlgorithmOf(blobs.publicArea);
  if (!alg) throw new TpmError('TPM_BAD_INPUT', 'AK is neither RSA-2048 nor ECC P-256');
  const ctx = t.ctx();
  const lib = tss();
  const handle: [number] = [ESYS_TR_NONE];
  t.withEkAuth(ek, (session) =>
    t.check(
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
    t,
    handle[0],
    alg,
    Buffer.from(blobs.publicArea),
    name,
    ek.qualifiedName,
    TPM_RH_ENDORSEMENT,
    null,
  );
  t.track(ak);
  return ak;
}

/** {@link Tpm.activateCredential} (see its TSDoc). */
export function activateCredential(
  t: Tpm,
  akIn: TpmAk,
  ekIn: TpmEk,
  credentialBlob: Buffer,
  secret: Buffer,
): Buffer {
  const ak = t.akHandle(akIn);
  const ek = t.ekHandle(ekIn);
  const ctx = t.ctx();
  const lib = tss();
  const out: [NativePtr | null] = [null];
  try {
    t.withEkAuth(ek, (session) =>
      t.check(
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

/** {@link Tpm.persistAk} (see its TSDoc). */
export function persistAk(t: Tpm, akIn: TpmAk, persistentHandle: number): TpmAk {
  const ak = t.akHandle(akIn);
  if (persistentHandle < 0x81000000 || persistentHandle > 0x817fffff) {
    throw new TpmError('TPM_BAD_INPUT', 'persistent handle must be in 0x81000000..0x817FFFFF (owner range)');
  }
  const newHandle: [number] = [ESYS_TR_NONE];
  t.check(
    'TPM2_EvictControl(persist)',
    tss().Esys_EvictControl(
      t.ctx(),
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
    t,
    newHandle[0],
    ak.algorithm,
    ak.publicArea,
    ak.name,
    ak.parentQualifiedName,
    ak.hierarchy,
    persistentHandle >>> 0,
  );
  t.track(p);
  return p;
}

/** {@link Tpm.evictPersistent} (see its TSDoc). */
export function evictPersistent(t: Tpm, persistentHandle: number): boolean {
  const tr = t.trFromTpm(persistentHandle);
  if (tr === null) return false;
  const out: [number] = [ESYS_TR_NONE];
  // On success ESYS invalidates `tr` itself; on failure release it.
  const rc = tss().Esys_EvictControl(
    t.ctx(),
    ESYS_TR_RH_OWNER,
    tr,
    ESYS_TR_PASSWORD,
    ESYS_TR_NONE,
    ESYS_TR_NONE,
    persistentHandle >>> 0,
    out,
  );
  if (rc !== 0) {
    t.trClose(tr);
    t.check('TPM2_EvictControl(evict)', rc);
  }
  return true;
}

/** {@link Tpm.loadPersistentAk} (see its TSDoc). */
export function loadPersistentAk(
  t: Tpm,
  persistentHandle: number,
  parentQualifiedName: Buffer,
): TpmAk | null {
  const tr = t.trFromTpm(persistentHandle);
  if (tr === null) return null;
  try {
    const pub = t.readPublicTr(tr);
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
      t,
      tr,
      alg,
      pub.publicArea,
      pub.name,
      parentQualifiedName,
      // a primary key's parent QN is its hierarchy handle; an EK child lives in the endorsement hierarchy
      parentQualifiedName.length === 4 ? parentQualifiedName.readUInt32BE(0) : TPM_RH_ENDORSEMENT,
      persistentHandle >>> 0,
    );
    t.track(ak);
    return ak;
  } catch (err) {
    t.trClose(tr);
    throw err;
  }
}
