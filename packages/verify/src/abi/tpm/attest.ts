/**
 * TPMS_ATTEST of a quote (TPM 2.0 Part 2 §10.12 "Attestation Structures": TPMS_ATTEST §10.12.12,
 * TPMS_CLOCK_INFO §10.11.1, TPMS_QUOTE_INFO §10.12.4) and its TPM2B_ATTEST wrapper (§10.12.13).
 */
import { ByteReader } from '../reader.js';
import { MAX_DIGEST, MAX_TPMT_HA, TPM_GENERATED_VALUE, TPM_ST_ATTEST_QUOTE } from './constants.js';
import { type PcrSelection, readPcrSelection } from './pcr.js';

/** TPMS_CLOCK_INFO (Part 2 §10.11.1). */
export interface TpmsClockInfo {
  clock: bigint;
  resetCount: number;
  restartCount: number;
  safe: boolean;
}

/** Parsed TPMS_ATTEST of a quote. */
export interface TpmsAttestQuote {
  /** TPM_GENERATED_VALUE. */
  magic: number;
  /** TPM_ST_ATTEST_QUOTE. */
  type: number;
  /** TPM2B_NAME of the signing key: nameAlg (2 bytes) ‖ digest. */
  qualifiedSigner: Buffer;
  /** TPM2B_DATA: the caller's qualifyingData, exact bytes. */
  extraData: Buffer;
  clockInfo: TpmsClockInfo;
  firmwareVersion: bigint;
  /** TPML_PCR_SELECTION in marshalled order. */
  pcrSelect: PcrSelection[];
  /** TPM2B_DIGEST: hash (of the signing scheme's hash algorithm) over the selected PCRs. */
  pcrDigest: Buffer;
}

const CODES = {
  truncated: 'TPM_ATTEST_TRUNCATED',
  malformed: 'TPM_ATTEST_MALFORMED',
  trailing: 'TPM_ATTEST_TRAILING_BYTES',
} as const;

/**
 * Parses a bare TPMS_ATTEST produced by TPM2_Quote — the exact bytes the AK signed, without
 * the TPM2B_ATTEST size prefix (use {@link unwrapTpm2bAttest} first if you have one).
 *
 * Layout (big-endian): magic u32 = 0xff544347, type u16 = 0x8018, qualifiedSigner TPM2B_NAME,
 * extraData TPM2B_DATA, clockInfo {clock u64, resetCount u32, restartCount u32, safe u8 ∈ {0,1}},
 * firmwareVersion u64, TPMS_QUOTE_INFO {TPML_PCR_SELECTION {count u32 ≤ 16, count ×
 * {hash u16, sizeofSelect u8 ≤ 4, pcrSelect[sizeofSelect]}}, pcrDigest TPM2B_DIGEST ≤ 64}.
 * Source: TPM 2.0 Library Part 2 §10.12 (TPMS_ATTEST), §10.6 (PCR selection).
 *
 * @throws AbiError TPM_ATTEST_BAD_MAGIC, TPM_ATTEST_NOT_QUOTE, TPM_ATTEST_TRUNCATED,
 *   TPM_ATTEST_MALFORMED or TPM_ATTEST_TRAILING_BYTES.
 */
export function parseTpmsAttest(bytes: Uint8Array): TpmsAttestQuote {
  const r = new ByteReader(bytes, { structure: 'TPMS_ATTEST', ...CODES });
  const magic = r.u32('magic');
  if (magic !== TPM_GENERATED_VALUE) {
    throw r.error('TPM_ATTEST_BAD_MAGIC', `TPMS_ATTEST: magic 0x${magic.toString(16)}`, 'magic', 0);
  }
  const type = r.u16('type');
  if (type !== TPM_ST_ATTEST_QUOTE) {
    throw r.error(
      'TPM_ATTEST_NOT_QUOTE',
      `TPMS_ATTEST: type 0x${type.toString(16)} is not a quote`,
      'type',
      4,
    );
  }
  const qualifiedSigner = r.tpm2b('qualifiedSigner', MAX_TPMT_HA);
  const extraData = r.tpm2b('extraData', MAX_TPMT_HA);
  const clock = r.u64('clockInfo.clock');
  const resetCount = r.u32('clockInfo.resetCount');
  const restartCount = r.u32('clockInfo.restartCount');
  const safe = r.u8('clockInfo.safe');
  if (safe > 1)
    throw r.error('TPM_ATTEST_MALFORMED', `TPMS_ATTEST: clockInfo.safe = ${safe}`, 'clockInfo.safe');
  const firmwareVersion = r.u64('firmwareVersion');
  const pcrSelect = readPcrSelection(r, 'pcrSelect');
  const pcrDigest = r.tpm2b('pcrDigest', MAX_DIGEST);
  r.end();
  return {
    magic,
    type,
    qualifiedSigner,
    extraData,
    clockInfo: { clock, resetCount, restartCount, safe: safe === 1 },
    firmwareVersion,
    pcrSelect,
    pcrDigest,
  };
}

/**
 * Strips the TPM2B_ATTEST wrapper ({u16 size, size bytes}) and returns the TPMS_ATTEST bytes.
 * The size must match the remaining input exactly. Source: Part 2 §10.12.13 (TPM2B_ATTEST).
 * @throws AbiError TPM_ATTEST_TRUNCATED (size too large / short input) or
 *   TPM_ATTEST_TRAILING_BYTES (bytes after the declared size).
 */
export function unwrapTpm2bAttest(bytes: Uint8Array): Buffer {
  const r = new ByteReader(bytes, { structure: 'TPM2B_ATTEST', ...CODES });
  const size = r.u16('size');
  const body = r.bytes(size, 'attestationData');
  r.end();
  return body;
}
