/**
 * TPM files as tpm2-tools writes them, recognised by their layout (never by file name):
 *
 * - TPM2B_PUBLIC (`tpm2_createak -u`, `tpm2_createek -u`, `tpm2_readpublic -f tss`): u16 size ‖
 *   TPMT_PUBLIC; TPMT_PUBLIC (`tpm2_readpublic -f tpmt`) on its own (Part 2 §12.2.5, §12.2.4).
 * - TPMS_ATTEST (`tpm2_quote -m`) or TPM2B_ATTEST; TPMT_SIGNATURE (`tpm2_quote -s`, default).
 * - PCR values: `-F serialized` (the default of `tpm2_quote -o`) is a host-memory dump of the
 *   tpm2-tss structures — TPML_PCR_SELECTION {count u32, 16 × TPMS_PCR_SELECTION {hash u16,
 *   sizeofSelect u8, pcrSelect[4], 1 padding byte}}, then u32 n, then n × TPML_DIGEST {count u32,
 *   8 × TPM2B_DIGEST {size u16, buffer[64]}} — all little-endian (x86/ARM hosts), 132 + 4 + 532·n
 *   bytes (tpm2-tools lib/pcr.c pcr_fwrite_serialized). `-F values` (the default of
 *   `tpm2_pcrread -o`) is the selected values concatenated, banks in selection order and PCRs
 *   ascending, nothing else: it can only be read against the quote's selection.
 *
 * Unused slots and padding must be zero, as tpm2-tools writes them: a byte that carries nothing
 * is still not allowed to differ.
 */
import { AbiError } from '../errors.js';
import { ByteReader } from '../reader.js';
import {
  algName,
  MAX_DIGEST,
  MAX_PCR_BANKS,
  MAX_PCR_SELECT,
  TPM_DIGEST_SIZE,
  TPM_GENERATED_VALUE,
} from './constants.js';
import type { PcrSelection } from './pcr.js';
import { parseTpmtPublic } from './public.js';
import { parseTpmtSignature } from './signature.js';

/** Size of the serialized tpm2-tss TPML_PCR_SELECTION (count + 16 padded selections). */
const SERIALIZED_SELECTION_SIZE = 4 + MAX_PCR_BANKS * 8;
/** Size of one serialized TPML_DIGEST (count + 8 × {size u16, buffer[64]}). */
const SERIALIZED_DIGEST_LIST_SIZE = 4 + 8 * (2 + MAX_DIGEST);

const ok = (fn: () => unknown): boolean => {
  try {
    fn();
    return true;
  } catch {
    return false;
  }
};

/**
 * What a TPM input file looks like, for refusal messages: `TPMS_ATTEST`, `TPM2B_ATTEST`,
 * `TPMT_SIGNATURE`, `TPM2B_PUBLIC`, `TPMT_PUBLIC`, `PEM <label>`, `DER`, `tpm2-tools serialized
 * PCR values`, or null when none of these layouts parses.
 */
export function tpmFileLayout(bytes: Uint8Array): string | null {
  const b = Buffer.from(bytes);
  const pem = /^-----BEGIN ([A-Z0-9 ]+)-----/.exec(b.subarray(0, 64).toString('latin1'));
  if (pem) return `PEM ${pem[1]}`;
  if (b.length >= 4 && b.readUInt32BE(0) === TPM_GENERATED_VALUE) return 'TPMS_ATTEST';
  if (b.length >= 6 && b.readUInt16BE(0) === b.length - 2 && b.readUInt32BE(2) === TPM_GENERATED_VALUE)
    return 'TPM2B_ATTEST';
  if (ok(() => parseTpmtSignature(b))) return 'TPMT_SIGNATURE';
  if (b.length >= 2 && b.readUInt16BE(0) === b.length - 2 && ok(() => parseTpmtPublic(b.subarray(2))))
    return 'TPM2B_PUBLIC';
  if (ok(() => parseTpmtPublic(b))) return 'TPMT_PUBLIC';
  if (ok(() => parseSerializedPcrs(b))) return 'tpm2-tools serialized PCR values';
  if (b[0] === 0x30) return 'DER';
  return null;
}

/** The refusal for a file whose layout is not one its flag accepts. */
export function layoutMismatch(what: string, accepted: string, bytes: Uint8Array): AbiError {
  const is = tpmFileLayout(bytes);
  return new AbiError(
    'TPM_FILE_LAYOUT_MISMATCH',
    `${what} is ${is ? `a ${is}` : `not a layout this verifier knows (${bytes.length} bytes)`}, not ${accepted}`,
    what,
  );
}

/** A TPM public area file: which layout it had and the TPMT_PUBLIC bytes inside. */
export interface TpmPublicFile {
  layout: 'TPM2B_PUBLIC' | 'TPMT_PUBLIC';
  tpmtPublic: Buffer;
}

/**
 * Reads a public area as tpm2-tools writes it: TPM2B_PUBLIC (its u16 size equals the rest of the
 * file and the rest parses as TPMT_PUBLIC) or a bare TPMT_PUBLIC. Nothing may trail.
 * @throws AbiError TPM_FILE_LAYOUT_MISMATCH naming what the file is instead (e.g. a TPMT_SIGNATURE)
 */
export function readTpmPublicFile(bytes: Uint8Array, what = 'the AK file'): TpmPublicFile {
  const b = Buffer.from(bytes);
  if (b.length >= 2 && b.readUInt16BE(0) === b.length - 2 && ok(() => parseTpmtPublic(b.subarray(2)))) {
    return { layout: 'TPM2B_PUBLIC', tpmtPublic: Buffer.from(b.subarray(2)) };
  }
  if (ok(() => parseTpmtPublic(b))) return { layout: 'TPMT_PUBLIC', tpmtPublic: b };
  throw layoutMismatch(what, 'a TPM2B_PUBLIC or TPMT_PUBLIC', b);
}

/** PCR values read from a tpm2-tools file: (bank, index, value) in selection order. */
export interface TpmPcrEntry {
  hashAlg: number;
  index: number;
  value: Buffer;
}

function decodeSelect(select: Uint8Array): number[] {
  const pcrs: number[] = [];
  select.forEach((byte, j) => {
    for (let i = 0; i < 8; i++) if (byte & (1 << i)) pcrs.push(8 * j + i);
  });
  return pcrs;
}

const zeros = (r: ByteReader, n: number, field: string) => {
  const at = r.absolute;
  if (r.bytes(n, field).some((x) => x !== 0))
    throw r.error('PCR_FILE_MALFORMED', `${field} is not zero`, field, at);
};

/**
 * Parses `-F serialized` PCR values (see the module comment) exactly.
 * @returns the selection (banks in file order) and its values in selection order.
 * @throws AbiError PCR_FILE_MALFORMED (wrong size, counts, unknown bank, a digest of the wrong
 *   size, values that do not match the selection, non-zero padding or unused slots)
 */
export function parseSerializedPcrs(bytes: Uint8Array): { selection: PcrSelection[]; values: TpmPcrEntry[] } {
  const r = new ByteReader(bytes, {
    structure: 'tpm2-tools serialized PCR values',
    littleEndian: true,
    truncated: 'PCR_FILE_MALFORMED',
    malformed: 'PCR_FILE_MALFORMED',
    trailing: 'PCR_FILE_MALFORMED',
  });
  const n = bytes.length - SERIALIZED_SELECTION_SIZE - 4;
  if (n < 0 || n % SERIALIZED_DIGEST_LIST_SIZE !== 0) {
    throw r.error(
      'PCR_FILE_MALFORMED',
      `${bytes.length} bytes is not 136 + 532·n (tpm2-tools -F serialized)`,
    );
  }
  const count = r.u32('pcrSelections.count');
  if (count === 0 || count > MAX_PCR_BANKS)
    throw r.invalid(`pcrSelections.count ${count}`, 'pcrSelections.count');
  const selection: PcrSelection[] = [];
  for (let i = 0; i < MAX_PCR_BANKS; i++) {
    const f = `pcrSelections[${i}]`;
    if (i >= count) {
      zeros(r, 8, `${f} (unused)`);
      continue;
    }
    const hashAlg = r.u16(`${f}.hash`);
    const sizeofSelect = r.u8(`${f}.sizeofSelect`);
    if (TPM_DIGEST_SIZE[hashAlg] === undefined || sizeofSelect === 0 || sizeofSelect > MAX_PCR_SELECT) {
      throw r.invalid(`${f}: bank ${algName(hashAlg)}, sizeofSelect ${sizeofSelect}`, f);
    }
    const select = r.bytes(MAX_PCR_SELECT, `${f}.pcrSelect`);
    if (select.subarray(sizeofSelect).some((x) => x !== 0))
      throw r.invalid(`${f}.pcrSelect beyond sizeofSelect`, f);
    zeros(r, 1, `${f} padding`);
    selection.push({ hashAlg, pcrs: decodeSelect(select.subarray(0, sizeofSelect)), sizeofSelect });
  }
  const lists = r.u32('pcr_values.count');
  const wanted = selection.flatMap((s) => s.pcrs.map((index) => ({ hashAlg: s.hashAlg, index })));
  if (lists !== n / SERIALIZED_DIGEST_LIST_SIZE || lists !== Math.ceil(wanted.length / 8)) {
    throw r.invalid(
      `${lists} digest lists for ${wanted.length} selected PCRs in ${bytes.length} bytes`,
      'pcr_values.count',
    );
  }
  const values: TpmPcrEntry[] = [];
  for (let l = 0; l < lists; l++) {
    const inList = r.u32(`pcr_values[${l}].count`);
    if (inList !== Math.min(8, wanted.length - 8 * l)) throw r.invalid(`pcr_values[${l}].count ${inList}`);
    for (let d = 0; d < 8; d++) {
      const f = `pcr_values[${l}].digests[${d}]`;
      if (d >= inList) {
        zeros(r, 2 + MAX_DIGEST, `${f} (unused)`);
        continue;
      }
      const want = wanted[8 * l + d] as { hashAlg: number; index: number };
      const size = r.u16(`${f}.size`);
      if (size !== TPM_DIGEST_SIZE[want.hashAlg]) {
        throw r.invalid(`${f}: ${size} bytes for ${algName(want.hashAlg)} PCR ${want.index}`, `${f}.size`);
      }
      values.push({ ...want, value: r.bytes(size, `${f}.buffer`) });
      zeros(r, MAX_DIGEST - size, `${f}.buffer beyond size`);
    }
  }
  r.end();
  return { selection, values };
}

/**
 * Splits `-F values` PCR values (the selected values concatenated) by `selection`, which must
 * account for every byte.
 * @throws AbiError PCR_FILE_MALFORMED when the length is not the selection's exactly
 */
export function splitPcrValues(bytes: Uint8Array, selection: readonly PcrSelection[]): TpmPcrEntry[] {
  const b = Buffer.from(bytes);
  const wanted = selection.flatMap((s) => s.pcrs.map((index) => ({ hashAlg: s.hashAlg, index })));
  const sizes = wanted.map((w) => TPM_DIGEST_SIZE[w.hashAlg]);
  const total = sizes.reduce<number>((a, s) => a + (s ?? Number.NaN), 0);
  if (!(total === b.length) || wanted.length === 0) {
    throw new AbiError(
      'PCR_FILE_MALFORMED',
      `PCR values file: ${b.length} bytes, the quote selects ${wanted.length} PCR(s) of ${Number.isNaN(total) ? 'an unknown bank' : `${total} bytes`}`,
      'tpm2-tools PCR values',
    );
  }
  let off = 0;
  return wanted.map((w, i) => {
    const size = sizes[i] as number;
    const value = Buffer.from(b.subarray(off, off + size));
    off += size;
    return { ...w, value };
  });
}
