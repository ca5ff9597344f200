/**
 * TPM 2.0 wire format for the native layer, on top of the verifier package's layouts
 * (`@cmcp/verify/abi/tpm`): the writer for the few command parameters built by hand, and
 * decoders of ESYS outputs that turn a layout error into TpmError TPM_BAD_RESPONSE. C struct
 * layouts are never mirrored: tpm2-tss MU functions convert between wire format and its structs.
 */
import {
  AbiError,
  parseDigestList as abiDigestList,
  parseNvPublic as abiNvPublic,
  parsePcrSelection as abiPcrSelection,
  ByteWriter,
  parseTpmsAttest,
  TPM_ALG,
  TPM_ECC_CURVE,
  TPM_GENERATED_VALUE,
  TPM_ST_ATTEST_QUOTE,
  type TpmsAttestQuote,
  type TpmsNvPublic,
  unwrapTpm2b,
} from '@cmcp/verify/abi';
import { TpmError } from './errors.js';

export { pcrSelectionSha256, TPMA_OBJECT } from '@cmcp/verify/abi';

/** Algorithm and constant identifiers, TPM 2.0 Part 2 §6 (TPM_ALG_ID, TPM_ECC_CURVE, TPM_ST). */
export const TPM2_ALG_RSA = TPM_ALG.RSA;
export const TPM2_ALG_SHA256 = TPM_ALG.SHA256;
export const TPM2_ALG_NULL = TPM_ALG.NULL;
export const TPM2_ALG_RSASSA = TPM_ALG.RSASSA;
export const TPM2_ALG_ECDSA = TPM_ALG.ECDSA;
export const TPM2_ALG_ECC = TPM_ALG.ECC;
export const TPM2_ECC_NIST_P256 = TPM_ECC_CURVE.NIST_P256;
export const TPM2_GENERATED_VALUE = TPM_GENERATED_VALUE;
export const TPM2_ST_ATTEST_QUOTE = TPM_ST_ATTEST_QUOTE;

/** Highest PCR index expressible with a 4-byte pcrSelect bitmap. */
export const MAX_PCR_INDEX = 31;

/** Big-endian writer of TPM wire bytes (the abi ByteWriter). */
export class WireWriter extends ByteWriter {}

/** Runs an abi decoder on bytes the TPM returned; a layout error is TPM_BAD_RESPONSE. */
export function decoded<T>(what: string, fn: () => T): T {
  try {
    return fn();
  } catch (err) {
    if (err instanceof AbiError)
      throw new TpmError('TPM_BAD_RESPONSE', `${what}: ${err.message}`, null, { cause: err });
    throw err;
  }
}

/** The contents of a TPM2B wire value (drops the 2-byte size, checks nothing trails). */
export function unwrap2b(wire: Buffer, what: string): Buffer {
  return decoded(what, () => unwrapTpm2b(wire, what));
}

/** Parses TPML_PCR_SELECTION wire bytes into bank → ascending PCR indices. */
export function parsePcrSelection(wire: Buffer): Map<number, number[]> {
  const out = new Map<number, number[]>();
  for (const s of decoded('TPML_PCR_SELECTION', () => abiPcrSelection(wire))) {
    out.set(s.hashAlg, [...(out.get(s.hashAlg) ?? []), ...s.pcrs]);
  }
  return out;
}

/** Parses TPML_DIGEST wire bytes (Part 2 §10.9.2). */
export function parseDigestList(wire: Buffer): Buffer[] {
  return decoded('TPML_DIGEST', () => abiDigestList(wire));
}

/** Parses TPMS_NV_PUBLIC wire bytes (Part 2 §13.5). */
export function parseNvPublic(wire: Buffer): TpmsNvPublic {
  return decoded('TPMS_NV_PUBLIC', () => abiNvPublic(wire));
}

/** Parses the TPMS_ATTEST of a quote (Part 2 §10.12.12) the TPM just returned. */
export function parseQuoteAttest(attest: Buffer): TpmsAttestQuote {
  return decoded('TPMS_ATTEST', () => parseTpmsAttest(attest));
}
