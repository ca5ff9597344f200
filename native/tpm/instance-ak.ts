/**
 * The gateway instance's own attestation key, crash-proof (docs/spec/tpm.md#instance-ak).
 *
 * A raw TPM (swtpm, or a TPM without a resource manager) keeps every transient object until it is
 * flushed; a SIGKILLed gateway cannot flush, and after three kills TPM2_CreatePrimary fails with
 * TPM_RC_OBJECT_MEMORY. So the AK an instance would otherwise create afresh at every start is
 * **made persistent per instance** (TPM2_EvictControl, Part 3 §28.5), rather than recording
 * transient handles in the database: a persistent object occupies no transient slot, so in the
 * steady state the gateway holds no transient object at all and a kill at any moment leaves
 * nothing behind; nothing has to be written before a handle exists, and the record cannot drift
 * from the TPM (cleared TPM, restored database).
 *
 * The AK's template carries an **instance tag** in `authPolicy` (TPMT_PUBLIC, Part 2 §12.2.4):
 * SHA-256("cmcp.instance-ak" ‖ 0x00 ‖ instance_id). It is part of the public area, so (a) each
 * instance derives its own key from the endorsement seed, and (b) any object can be told apart
 * by ReadPublic: at start-up, transient objects carrying this instance's tag — left by a kill
 * between TPM2_CreatePrimary and TPM2_EvictControl, or by a TPM that refused persistence — are
 * flushed, and objects of another instance (another tag, or none) never are. The tag is no
 * satisfiable policy (it is not a policy-session digest anyone can reach); the key is used with
 * userWithAuth and the empty password as before.
 *
 * The persistent handle is 0x817F0000 | the tag's first 16 bits (owner range, Part 2 §7.3.4),
 * clear of the handles enrollment (0x81010001…) and Azure (0x81000003) use; a key there with
 * another tag (a collision) is left alone and this instance stays transient.
 */
import { createHash } from 'node:crypto';
import { TpmError } from './errors.js';
import { freeAll, ptr } from './esys.js';
import { fromStruct, type NativePtr, tss } from './lib.js';
import { type AkAlgorithm, TPM_RH_ENDORSEMENT } from './model.js';
import { akAttributeProblem, hierarchyQualifiedName, parsePublic } from './public.js';
import type { Tpm, TpmAk } from './tpm.js';

/** TPM_CAP_HANDLES (Part 2 §6.12) and the first transient handle (Part 2 §7.2, TPM_HT_TRANSIENT). */
const TPM_CAP_HANDLES = 0x00000001;
const TRANSIENT_FIRST = 0x80000000;
const TRANSIENT_LAST = 0x80ffffff;
/** Base of the instance AK handles (owner persistent range 0x81000000..0x817FFFFF). */
export const INSTANCE_AK_BASE = 0x817f0000;

/** The instance tag: SHA-256("cmcp.instance-ak" ‖ 0x00 ‖ UTF-8 instance_id), 32 bytes. */
export function instanceTag(instanceId: string): Buffer {
  return createHash('sha256').update('cmcp.instance-ak\0').update(instanceId, 'utf8').digest();
}

/** The persistent handle of an instance's AK: 0x817F0000 | first two bytes of its tag. */
export function instanceAkHandle(instanceId: string): number {
  return (INSTANCE_AK_BASE | instanceTag(instanceId).readUInt16BE(0)) >>> 0;
}

/**
 * Transient object handles the TPM holds now (TPM2_GetCapability(TPM_CAP_HANDLES), Part 3 §30.2),
 * following moreData. Wire layout: TPMS_CAPABILITY_DATA = capability u32, TPML_HANDLE count u32,
 * handles u32[] (Part 2 §10.10.2, §10.9.3).
 * @throws TpmError TPM_RC, TPM_UNREACHABLE
 */
export function transientHandles(t: Tpm): number[] {
  const out: number[] = [];
  let next = TRANSIENT_FIRST;
  for (let round = 0; round < 64; round++) {
    const more: [number] = [0];
    const data: [NativePtr | null] = [null];
    try {
      t.check(
        'TPM2_GetCapability(handles)',
        tss().Esys_GetCapability(t.ctx(), 0xfff, 0xfff, 0xfff, TPM_CAP_HANDLES, next, 64, more, data),
      );
      const wire = fromStruct('TPMS_CAPABILITY_DATA', ptr(data, 'TPM2_GetCapability capabilityData'));
      const count = wire.readUInt32BE(4);
      if (wire.length < 8 + 4 * count) throw new TpmError('TPM_BAD_RESPONSE', 'TPML_HANDLE is truncated');
      for (let i = 0; i < count; i++) {
        const h = wire.readUInt32BE(8 + 4 * i);
        if (h >= TRANSIENT_FIRST && h <= TRANSIENT_LAST) out.push(h);
      }
      const last = out[out.length - 1];
      if (!more[0] || count === 0 || last === undefined) break;
      next = last + 1;
    } finally {
      freeAll(data);
    }
  }
  return out;
}

/** True when `publicArea` is an AK (attributes) carrying `tag` as its authPolicy. */
function carriesTag(publicArea: Buffer, tag: Buffer): boolean {
  try {
    const p = parsePublic(publicArea);
    return p.authPolicy.equals(tag) && akAttributeProblem(p.attributes) === null;
  } catch {
    return false; // not an AK we can read: not ours
  }
}

/**
 * Flushes every transient object carrying this instance's tag (left by an earlier process of this
 * instance); objects of anyone else are only read. Objects that vanish meanwhile are skipped.
 * @returns how many were flushed.
 * @throws TpmError TPM_RC, TPM_UNREACHABLE
 */
export function flushInstanceLeftovers(t: Tpm, instanceId: string): number {
  const tag = instanceTag(instanceId);
  let flushed = 0;
  for (const h of transientHandles(t)) {
    const tr = t.trFromTpm(h);
    if (tr === null) continue;
    let ours = false;
    try {
      ours = carriesTag(t.readPublicTr(tr).publicArea, tag);
    } finally {
      if (!ours) t.trClose(tr);
    }
    if (ours) {
      t.check(`TPM2_FlushContext(0x${h.toString(16)})`, tss().Esys_FlushContext(t.ctx(), tr));
      flushed++;
    }
  }
  return flushed;
}

/** The instance AK and how it was obtained. */
export interface InstanceAk {
  ak: TpmAk;
  /** True when the key is persistent at {@link instanceAkHandle} (else transient, flushed at close). */
  persistent: boolean;
  /** True when it was created (and persisted) by this call. */
  created: boolean;
  /** Why the key is transient, when it is. */
  note: string | null;
}

/**
 * Opens this instance's persistent AK (call {@link flushInstanceLeftovers} first) — creating and persisting it
 * when absent (or when it is of another algorithm than `alg`: evicted and recreated). When the
 * TPM refuses persistence (owner authorization set, no NV room) or the handle holds another
 * instance's key, the AK stays transient, tagged, so the next start still flushes it.
 * @throws TpmError TPM_RC, TPM_UNREACHABLE, TPM_CLOSED
 */
export function openInstanceAk(t: Tpm, alg: AkAlgorithm, instanceId: string): InstanceAk {
  const tag = instanceTag(instanceId);
  const handle = instanceAkHandle(instanceId);
  const hex = `0x${handle.toString(16)}`;
  let existing: TpmAk | null = null;
  try {
    existing = t.loadPersistentAk(handle, hierarchyQualifiedName(TPM_RH_ENDORSEMENT));
  } catch (e) {
    if (!(e instanceof TpmError && e.code === 'TPM_BAD_INPUT')) throw e;
    const ak = t.createAk(alg, tag);
    return { ak, persistent: false, created: true, note: `${hex} holds another key: AK kept transient` };
  }
  if (existing && carriesTag(existing.publicArea, tag)) {
    if (existing.algorithm === alg) return { ak: existing, persistent: true, created: false, note: null };
    existing.flush();
    t.evictPersistent(handle); // ours, of another algorithm: the configuration changed
  } else if (existing) {
    existing.flush();
    const ak = t.createAk(alg, tag);
    return {
      ak,
      persistent: false,
      created: true,
      note: `${hex} holds another instance's AK: AK kept transient`,
    };
  }
  const transient = t.createAk(alg, tag);
  try {
    const persisted = t.persistAk(transient, handle);
    transient.flush();
    return { ak: persisted, persistent: true, created: true, note: null };
  } catch (e) {
    if (!(e instanceof TpmError) || e.code === 'TPM_UNREACHABLE') throw e;
    return {
      ak: transient,
      persistent: false,
      created: true,
      note: `TPM2_EvictControl refused (${e.message.slice(0, 100)}): AK kept transient`,
    };
  }
}
