/**
 * Errors raised by the native TPM layer. `code` is a stable machine code registered in the
 * error registry (native/errors.ts, NATIVE_ERRORS); `rc` is the raw TSS2_RC when the
 * failure came from tpm2-tss or the TPM, else null.
 */
import { CmcpError } from '../errors.js';

/** Stable machine codes carried by {@link TpmError}. */
export type TpmErrorCode =
  /** libtss2-* shared libraries could not be loaded (run the setup script). */
  | 'TSS_LIBRARY_MISSING'
  /** Tss2_TctiLdr_Initialize failed: bad TCTI string or nothing listening. */
  | 'TCTI_INIT_FAILED'
  /** The TCTI layer failed mid-session (TPM process gone, socket closed, I/O error). */
  | 'TPM_UNREACHABLE'
  /** The TPM or an ESYS/MU layer returned a non-success TSS2_RC (see message for the decoded text). */
  | 'TPM_RC'
  /** The caller passed something the layer refuses before talking to the TPM. */
  | 'TPM_BAD_INPUT'
  /** The Tpm (or the key's Tpm) has been closed, or the key was flushed. */
  | 'TPM_CLOSED'
  /** The PCR values kept changing between PCR_Read and Quote. */
  | 'PCR_CHANGED'
  /** The TPM answered with something inconsistent with what was asked. */
  | 'TPM_BAD_RESPONSE'
  /** The ESYS context was used while an asynchronous command was in flight on it. */
  | 'TPM_BUSY';

export class TpmError extends CmcpError {
  declare readonly code: TpmErrorCode;
  readonly rc: number | null;

  constructor(code: TpmErrorCode, message: string, rc: number | null = null, options?: { cause?: unknown }) {
    super(code, message, rc === null ? {} : { rc });
    this.name = 'TpmError';
    this.rc = rc;
    if (options && 'cause' in options) this.cause = options.cause;
  }
}

/** `0x` + 8 hex digits, the way tpm2-tools prints return codes. */
export function rcHex(rc: number): string {
  return `0x${(rc >>> 0).toString(16).padStart(8, '0')}`;
}
