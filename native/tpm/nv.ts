/**
 * NV indices (TPM 2.0 Part 3 §31: TPM2_NV_ReadPublic, TPM2_NV_Read, TPM2_NV_DefineSpace and
 * TPM2_NV_Write) for {@link Tpm}: EK certificates and templates live there.
 */
import { TpmError } from './errors.js';
import { freeAll, ptr } from './esys.js';
import {
  ESYS_TR_NONE,
  ESYS_TR_PASSWORD,
  ESYS_TR_RH_OWNER,
  fromStruct,
  type NativePtr,
  toStruct,
  tss,
} from './lib.js';
import { NV_CHUNK, type NvPublic } from './model.js';
import type { Tpm } from './tpm.js';
import { parseNvPublic, TPM2_ALG_SHA256, unwrap2b, WireWriter } from './wire.js';

/** {@link Tpm.nvPublic} (see its TSDoc). */
export function nvPublic(t: Tpm, index: number): NvPublic | null {
  const tr = t.trFromTpm(index);
  if (tr === null) return null;
  const pubOut: [NativePtr | null] = [null];
  const nameOut: [NativePtr | null] = [null];
  try {
    t.check(
      'TPM2_NV_ReadPublic',
      tss().Esys_NV_ReadPublic(t.ctx(), tr, ESYS_TR_NONE, ESYS_TR_NONE, ESYS_TR_NONE, pubOut, nameOut),
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
    t.trClose(tr);
  }
}

/** {@link Tpm.readNv} (see its TSDoc). */
export function readNv(t: Tpm, index: number): Buffer | null {
  const pub = t.nvPublic(index);
  if (pub === null) return null;
  const tr = t.trFromTpm(index);
  if (tr === null) return null;
  const parts: Buffer[] = [];
  try {
    for (let off = 0; off < pub.size; off += NV_CHUNK) {
      const n = Math.min(NV_CHUNK, pub.size - off);
      const out: [NativePtr | null] = [null];
      try {
        t.check(
          `TPM2_NV_Read(0x${index.toString(16)})`,
          tss().Esys_NV_Read(t.ctx(), tr, tr, ESYS_TR_PASSWORD, ESYS_TR_NONE, ESYS_TR_NONE, n, off, out),
        );
        const chunk = unwrap2b(fromStruct('TPM2B_MAX_NV_BUFFER', ptr(out, 'NV_Read')), 'TPM2B_MAX_NV_BUFFER');
        if (chunk.length !== n) throw new TpmError('TPM_BAD_RESPONSE', 'NV_Read returned a short chunk');
        parts.push(chunk);
      } finally {
        freeAll(out);
      }
    }
  } finally {
    t.trClose(tr);
  }
  return Buffer.concat(parts);
}

/** {@link Tpm.writeNewNv} (see its TSDoc). */
export function writeNewNv(t: Tpm, index: number, data: Buffer): void {
  const ctx = t.ctx();
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
  t.check(
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
      t.check(
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
    t.trClose(nvTr[0]);
  }
}
