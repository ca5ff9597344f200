/**
 * PCR selections and digest lists (TPM 2.0 Part 2 §10.6.2 TPMS_PCR_SELECTION, §10.9.7
 * TPML_PCR_SELECTION, §10.9.2 TPML_DIGEST) and the other small TPM structures the native layer
 * reads from ESYS outputs (TPM2B_* wrappers, TPMS_NV_PUBLIC §13.5).
 */
import { ByteReader, ByteWriter } from '../reader.js';
import { MAX_DIGEST, MAX_PCR_BANKS, MAX_PCR_SELECT, TPM_ALG } from './constants.js';

/** One TPMS_PCR_SELECTION with its selected PCR indices (ascending). */
export interface PcrSelection {
  /** TPMI_ALG_HASH of the PCR bank. */
  hashAlg: number;
  /** Selected PCR indices, ascending (bit i of byte j ⇒ PCR 8j + i). */
  pcrs: number[];
  /** sizeofSelect as marshalled (0 when built by a caller). */
  sizeofSelect?: number;
}

const STRUCT = {
  truncated: 'TPM_STRUCTURE_MALFORMED',
  malformed: 'TPM_STRUCTURE_MALFORMED',
  trailing: 'TPM_STRUCTURE_MALFORMED',
} as const;

function decodeSelect(select: Uint8Array): number[] {
  const pcrs: number[] = [];
  select.forEach((byte, j) => {
    for (let i = 0; i < 8; i++) if (byte & (1 << i)) pcrs.push(8 * j + i);
  });
  return pcrs;
}

/**
 * Reads a TPML_PCR_SELECTION (count u32 ≤ 16, count × {hash u16, sizeofSelect u8 ≤ 4,
 * pcrSelect[sizeofSelect]}) from `r`, raising the reader's `malformed` code on a bound.
 */
export function readPcrSelection(r: ByteReader, field: string): PcrSelection[] {
  const count = r.u32(`${field}.count`);
  if (count > MAX_PCR_BANKS) throw r.invalid(`${field}.count ${count} > ${MAX_PCR_BANKS}`, `${field}.count`);
  const out: PcrSelection[] = [];
  for (let i = 0; i < count; i++) {
    const hashAlg = r.u16(`${field}[${i}].hash`);
    const sizeofSelect = r.u8(`${field}[${i}].sizeofSelect`);
    if (sizeofSelect > MAX_PCR_SELECT) {
      throw r.invalid(
        `${field}[${i}].sizeofSelect ${sizeofSelect} > ${MAX_PCR_SELECT}`,
        `${field}[${i}].sizeofSelect`,
      );
    }
    const select = r.bytes(sizeofSelect, `${field}[${i}].pcrSelect`);
    out.push({ hashAlg, pcrs: decodeSelect(select), sizeofSelect });
  }
  return out;
}

/** Parses TPML_PCR_SELECTION wire bytes exactly. @throws AbiError TPM_STRUCTURE_MALFORMED */
export function parsePcrSelection(bytes: Uint8Array): PcrSelection[] {
  const r = new ByteReader(bytes, { structure: 'TPML_PCR_SELECTION', ...STRUCT });
  const sel = readPcrSelection(r, 'pcrSelections');
  r.end();
  return sel;
}

/**
 * TPML_PCR_SELECTION with one SHA-256 TPMS_PCR_SELECTION (Part 2 §10.6.2, §10.9.7).
 * sizeofSelect is at least 3 (PCR_SELECT_MIN for 24 PCRs), 4 when a PCR above 23 is named.
 */
export function pcrSelectionSha256(pcrs: readonly number[]): Buffer {
  const size = pcrs.some((p) => p > 23) ? 4 : 3;
  const bitmap = new Uint8Array(size);
  for (const p of pcrs) bitmap[p >> 3] = (bitmap[p >> 3] ?? 0) | (1 << (p & 7));
  return new ByteWriter().u32(1).u16(TPM_ALG.SHA256).u8(size).bytes(bitmap).done();
}

/** Parses TPML_DIGEST wire bytes exactly (count u32 ≤ 8, TPM2B_DIGEST each). @throws AbiError */
export function parseDigestList(bytes: Uint8Array): Buffer[] {
  const r = new ByteReader(bytes, { structure: 'TPML_DIGEST', ...STRUCT });
  const count = r.u32('count');
  if (count > 8) throw r.error('TPM_STRUCTURE_MALFORMED', `TPML_DIGEST: count ${count} > 8`, 'count');
  const out: Buffer[] = [];
  for (let i = 0; i < count; i++) out.push(r.tpm2b(`digests[${i}]`, MAX_DIGEST));
  r.end();
  return out;
}

/** The contents of a TPM2B_* wire value (u16 size, size bytes; nothing may trail). @throws AbiError */
export function unwrapTpm2b(bytes: Uint8Array, structure: string): Buffer {
  const r = new ByteReader(bytes, { structure, ...STRUCT });
  const v = r.tpm2b('buffer');
  r.end();
  return v;
}

/** TPMS_NV_PUBLIC (Part 2 §13.5). */
export interface TpmsNvPublic {
  nvIndex: number;
  nameAlg: number;
  /** TPMA_NV bits. */
  attributes: number;
  authPolicy: Buffer;
  dataSize: number;
}

/** Parses TPMS_NV_PUBLIC wire bytes exactly. @throws AbiError TPM_STRUCTURE_MALFORMED */
export function parseNvPublic(bytes: Uint8Array): TpmsNvPublic {
  const r = new ByteReader(bytes, { structure: 'TPMS_NV_PUBLIC', ...STRUCT });
  const nvIndex = r.u32('nvIndex');
  const nameAlg = r.u16('nameAlg');
  const attributes = r.u32('attributes');
  const authPolicy = r.tpm2b('authPolicy', MAX_DIGEST);
  const dataSize = r.u16('dataSize');
  r.end();
  return { nvIndex, nameAlg, attributes, authPolicy, dataSize };
}
