/**
 * The error codes of the native attestation layer: the TPM (tpm2-tss) and the configfs-tsm /
 * sev-guest providers. Registered next to the verifier's codes when this module loads; the
 * error classes of native/ import {@link CmcpError} from here so that is always so.
 *
 * JSON-RPC codes: -32090 (TPM), -32091 (configfs-tsm), -32092 (sev-guest).
 */
import { CmcpError, type ErrorSpec, registerErrors } from '@cmcp/verify/errors';

const hw = (http: number, rpc: number, summary: string): ErrorSpec => ({ http, rpc, summary });

/** The gateway's own attestation hardware. */
export const NATIVE_ERRORS = registerErrors('native', {
  TSS_LIBRARY_MISSING: hw(503, -32090, 'The libtss2-* shared libraries could not be loaded.'),
  TCTI_INIT_FAILED: hw(503, -32090, 'Tss2_TctiLdr_Initialize failed: bad TCTI string or nothing listening.'),
  TPM_UNREACHABLE: hw(503, -32090, 'The TCTI layer failed mid-session (TPM gone, socket closed, I/O error).'),
  TPM_RC: hw(500, -32090, 'The TPM or a tpm2-tss layer returned a non-success TSS2_RC.'),
  TPM_BAD_INPUT: hw(400, -32090, 'The TPM layer refused its input before talking to the TPM.'),
  TPM_CLOSED: hw(500, -32090, 'The TPM connection or key was closed or flushed.'),
  PCR_CHANGED: hw(503, -32090, 'PCR values kept changing between TPM2_PCR_Read and TPM2_Quote.'),
  TPM_BAD_RESPONSE: hw(500, -32090, 'The TPM answered with something inconsistent with the request.'),
  TPM_BUSY: hw(
    500,
    -32090,
    'An ESYS context was used while an asynchronous TPM command was in flight on it (a caller did not serialise).',
  ),
  TSM_ABSENT: hw(503, -32091, 'No configfs-tsm report directory (no TSM provider loaded).'),
  TSM_ENTRY_FAILED: hw(500, -32091, 'mkdir of the configfs-tsm report entry failed.'),
  TSM_WRITE_REFUSED: hw(500, -32091, 'The kernel refused the configfs-tsm inblob write.'),
  TSM_READ_FAILED: hw(500, -32091, 'Reading a configfs-tsm attribute failed, or the report was empty.'),
  TSM_GENERATION_CHANGED: hw(503, -32091, 'Another writer raced the configfs-tsm report entry.'),
  TSM_PROVIDER_MISMATCH: hw(500, -32091, 'The configfs-tsm provider is not the one asked for.'),
  TSM_TIMEOUT: hw(503, -32091, 'The configfs-tsm report did not appear within the timeout.'),
  CERT_TABLE_MALFORMED: hw(500, -32092, 'The SEV-SNP certificate table from the host does not parse.'),
  SEV_GUEST_IOCTL_FAILED: hw(500, -32092, 'An SNP_GET_REPORT / SNP_GET_EXT_REPORT ioctl failed.'),
  SEV_GUEST_ABSENT: hw(503, -32092, 'The /dev/sev-guest device cannot be opened.'),
} as const satisfies Record<string, ErrorSpec>);

declare module '@cmcp/verify/errors' {
  interface ErrorRegistry extends Readonly<Record<keyof typeof NATIVE_ERRORS, ErrorSpec>> {}
}

export { CmcpError };
