/**
 * Primary keys and the EK's authorization for {@link Tpm}: TPM2_CreatePrimary in the endorsement
 * hierarchy (TPM 2.0 Part 3 §24.1) with the Name checked against H(TPMT_PUBLIC), and the policy
 * session PolicySecret(TPM_RH_ENDORSEMENT) (Part 3 §23.4) the low-range EK templates need.
 */
import { EK_PROFILES } from './ek.js';
import { TpmError } from './errors.js';
import { freeAll, type LoadedEk, ptr } from './esys.js';
import {
  ESYS_TR_NONE,
  ESYS_TR_PASSWORD,
  ESYS_TR_RH_ENDORSEMENT,
  fromStruct,
  type NativePtr,
  TPM2_SE_POLICY,
  toStruct,
  tss,
} from './lib.js';
import { nameOfPublic } from './public.js';
import type { Tpm } from './tpm.js';
import { TPM2_ALG_NULL, TPM2_ALG_SHA256, unwrap2b, WireWriter } from './wire.js';

/**
 * What TPM2_Create and TPM2_CreatePrimary share (Part 3 §12.1, §24.1): the inputs for an object
 * from `template` with no sensitive data, outside info or creation PCRs, and the four creation
 * outputs ({@link Creation.free} releases them).
 */
export interface Creation {
  /** inSensitive, inPublic, outsideInfo, creationPCR, in the commands' order. */
  ins: [Buffer, Buffer, Buffer, Buffer];
  /** outPublic, creationData, creationHash, creationTicket, in the commands' order. */
  outs: [[NativePtr | null], [NativePtr | null], [NativePtr | null], [NativePtr | null]];
  outPublic: [NativePtr | null];
  free(): void;
}

/** {@link Creation} for `template` (a TPMT_PUBLIC). */
export function creation(template: Buffer): Creation {
  const outs: Creation['outs'] = [[null], [null], [null], [null]];
  return {
    ins: [
      toStruct('TPM2B_SENSITIVE_CREATE', new WireWriter().u16(4).u16(0).u16(0).done()),
      toStruct('TPM2B_PUBLIC', new WireWriter().tpm2b(template).done()),
      toStruct('TPM2B_DATA', new WireWriter().u16(0).done()),
      toStruct('TPML_PCR_SELECTION', new WireWriter().u32(0).done()),
    ],
    outs,
    outPublic: outs[0],
    free: () => freeAll(...outs),
  };
}

/**
 * TPM2_CreatePrimary in the endorsement hierarchy (Part 3 §24.1); returns the transient handle,
 * public area and Name.
 * @throws TpmError TPM_RC, TPM_UNREACHABLE, TPM_CLOSED, TPM_BAD_RESPONSE (ESYS's Name differs)
 */
export function createPrimary(
  tpm: Tpm,
  template: Buffer,
  what: string,
): { handle: number; publicArea: Buffer; name: Buffer } {
  const ctx = tpm.ctx();
  const lib = tss();
  const c = creation(template);
  const handle: [number] = [ESYS_TR_NONE];
  let created = false;
  try {
    tpm.check(
      `TPM2_CreatePrimary(${what})`,
      lib.Esys_CreatePrimary(
        ctx,
        ESYS_TR_RH_ENDORSEMENT,
        ESYS_TR_PASSWORD,
        ESYS_TR_NONE,
        ESYS_TR_NONE,
        ...c.ins,
        handle,
        ...c.outs,
      ),
    );
    created = true;
    const publicArea = unwrap2b(
      fromStruct('TPM2B_PUBLIC', ptr(c.outPublic, 'TPM2_CreatePrimary outPublic')),
      'TPM2B_PUBLIC',
    );
    const name = nameOfPublic(publicArea);
    // ESYS computes the name from the response too; disagreeing means a marshalling bug.
    if (!esysName(tpm, handle[0]).equals(name)) {
      throw new TpmError('TPM_BAD_RESPONSE', `${what} name from ESYS differs from H(TPMT_PUBLIC)`);
    }
    return { handle: handle[0], publicArea, name };
  } catch (err) {
    if (created && !tpm.unreachable) lib.Esys_FlushContext(ctx, handle[0]);
    throw err;
  } finally {
    c.free();
  }
}

function esysName(tpm: Tpm, handle: number): Buffer {
  const out: [NativePtr | null] = [null];
  try {
    tpm.check('Esys_TR_GetName', tss().Esys_TR_GetName(tpm.ctx(), handle, out));
    return unwrap2b(fromStruct('TPM2B_NAME', ptr(out, 'Esys_TR_GetName')), 'TPM2B_NAME');
  } finally {
    freeAll(out);
  }
}

/**
 * Runs `fn` with the authorization session the EK's USER role needs: a policy session
 * satisfied with PolicySecret(TPM_RH_ENDORSEMENT) (Part 3 §23.4) for the low-range templates
 * (userWithAuth clear), or the empty password for the high-range ones. The session is flushed.
 */
export function withEkAuth<T>(tpm: Tpm, ek: LoadedEk, fn: (session: number) => T): T {
  if (!EK_PROFILES[ek.algorithm].needsPolicy) return fn(ESYS_TR_PASSWORD);
  const ctx = tpm.ctx();
  const lib = tss();
  const sess: [number] = [ESYS_TR_NONE];
  tpm.check(
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
    tpm.check(
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
    const live = tpm.unreachable ? null : tpm.rawCtx();
    if (live !== null) lib.Esys_FlushContext(live, sess[0]);
  }
}
