/**
 * Attestation providers: each turns a 64-byte REPORT_DATA (design §4) into hardware
 * evidence, or fails with a machine-readable reason. A failure never takes the gateway
 * down: the session records `attestation_binding_failed` and its claim says the binding
 * is absent.
 */
import type { TpmEvidenceJson } from '../format/claim.js';

/** Why a binding could not be made; `reason` is a stable upper-snake code. */
export class BindingError extends Error {
  constructor(
    readonly reason: string,
    message: string,
  ) {
    super(message);
    this.name = 'BindingError';
  }
}

/** Hardware evidence over one REPORT_DATA. */
export interface BoundEvidence {
  tpm: TpmEvidenceJson | null;
}

/** A source of hardware evidence. Implementations serialise their own device access. */
export interface AttestationProvider {
  /** `tpm`, `sev-snp`, `tdx` or `software`. */
  readonly name: string;
  /**
   * Produces evidence covering `reportData` (64 bytes).
   * @throws BindingError with the reason when no evidence can be produced.
   */
  bind(reportData: Buffer): Promise<BoundEvidence>;
  /** Releases device handles; idempotent. */
  close(): void;
}

/** Development-only provider: attests nothing, so every claim it yields is signed-only. */
export class SoftwareProvider implements AttestationProvider {
  readonly name = 'software';
  async bind(): Promise<BoundEvidence> {
    throw new BindingError(
      'SOFTWARE_PROVIDER',
      'the software provider produces no hardware evidence (dev mode)',
    );
  }
  close(): void {}
}
