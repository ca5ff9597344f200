/**
 * The one parse error of hardware byte layouts (TPM 2.0, SEV-SNP, TDX, TCG2 event log). Its
 * `code` is registered in the error registry (ABI_ERRORS) and is also the reason code a failed
 * `*_parse` check reports; `structure`, `field` and `offset` say where parsing stopped.
 */

import type { ABI_ERRORS } from '../errors/codes.js';
import { CmcpError } from '../errors/index.js';

/** A registered byte-layout parse error code (e.g. TPM_ATTEST_TRUNCATED, SNP_REPORT_MALFORMED). */
export type AbiErrorCode = keyof typeof ABI_ERRORS;

/** Bytes that do not parse as their layout. Thrown by every parser under `abi/`. */
export class AbiError extends CmcpError {
  declare readonly code: AbiErrorCode;

  constructor(
    code: AbiErrorCode,
    message: string,
    /** The structure being parsed, e.g. `TPMS_ATTEST`, `ATTESTATION_REPORT`. */
    readonly structure: string,
    /** The field where parsing stopped, when known (e.g. `extraData.size`). */
    readonly field: string | null = null,
    /** Byte offset (from the start of the parsed input) where parsing stopped, when known. */
    readonly offset: number | null = null,
  ) {
    super(code, message, { structure, field, offset });
    this.name = 'AbiError';
  }
}
