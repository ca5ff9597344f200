/**
 * Attestation providers: each turns a 64-byte REPORT_DATA (docs/spec/binding.md) into hardware
 * evidence, or fails with a machine-readable reason. A failure never takes the gateway
 * down: the session records `attestation_binding_failed` and its claim says the binding
 * is absent (and with `minimum_tier`, the session is refused: src/tee/tier.ts).
 */

import type {
  AzureHclEvidenceJson,
  MeasurementJson,
  SevSnpEvidenceJson,
  TdxEvidenceJson,
  TpmEvidenceJson,
} from '@cmcp/verify/formats';
import { CmcpError } from '../errors/index.js';
import type { GatewayMeasurement } from '../measure/index.js';

/** Why a binding could not be made (code ATTESTATION_BINDING_FAILED); `reason` is a stable upper-snake word. */
export class BindingError extends CmcpError {
  declare readonly code: 'ATTESTATION_BINDING_FAILED';
  constructor(
    readonly reason: string,
    message: string,
  ) {
    super('ATTESTATION_BINDING_FAILED', message);
    this.name = 'BindingError';
  }
}

/** Hardware evidence over one REPORT_DATA (members are copied into the claim's `evidence`). */
export interface BoundEvidence {
  tpm: TpmEvidenceJson | null;
  sev_snp?: SevSnpEvidenceJson;
  tdx?: TdxEvidenceJson;
  /** Azure CVM (src/tee/azure-provider.ts): the HCL report beside the vTPM quote in `tpm`. */
  azure_hcl?: AzureHclEvidenceJson;
  measurement?: MeasurementJson;
}

/**
 * Assurance tiers for `minimum_tier` (docs/spec/attestation.md#selection-and-tiers): `software` attests nothing, `tpm` is a
 * TPM quote (discrete, firmware or virtual TPM), `tee` is a confidential-VM report (SEV-SNP, TDX)
 * whose signing key belongs to the CPU vendor and which covers the guest's memory.
 */
export type AttestationTier = 'software' | 'tpm' | 'tee';
export const TIER_RANK: Record<AttestationTier, number> = { software: 0, tpm: 1, tee: 2 };

/** A source of hardware evidence. Implementations serialise their own device access. */
export interface AttestationProvider {
  /** `tpm`, `sev-snp`, `tdx` or `software`. */
  readonly name: string;
  readonly tier: AttestationTier;
  /**
   * Start-up work (open the device, load the AK, extend the measurement PCR). Never throws: a
   * failure is returned in the detail (`ok: false`, `reason`) and retried at the next bind.
   * @returns what the gateway chain's `attestation_provider` entry records.
   */
  start?(measurement: GatewayMeasurement | null): Promise<Record<string, unknown>>;
  /**
   * A new gateway measurement after an accepted policy reload (docs/spec/policy.md#operator-controls): bindings
   * requested from now on carry it. The TPM provider extends it into the measurement PCR, in
   * order with quotes (a quote requested before this call still sees the previous state). Never
   * throws: a failure is returned in the detail (`ok: false`, `reason`) and the extend is
   * retried at the next bind.
   * @returns what the gateway chain's `gateway_measurement` entry records about the provider.
   */
  remeasure?(measurement: GatewayMeasurement): Promise<Record<string, unknown>>;
  /**
   * The gateway listens as instance `instance`: the TPM provider extends the measurement PCR
   * only now (a start that fails before listening extends nothing). Never throws.
   * @returns what the gateway chain's `gateway_measurement_extended` entry records.
   */
  listening?(instance: string): Promise<Record<string, unknown>>;
  /** The measurement section a claim carries even when the binding failed (null: none). */
  measurementEvidence?(): MeasurementJson | null;
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
  readonly tier = 'software' as const;
  private measurement: MeasurementJson | null = null;
  async start(measurement: GatewayMeasurement | null): Promise<Record<string, unknown>> {
    this.measurement = measurement?.json ?? null;
    return { ok: true, reason: null };
  }
  async remeasure(measurement: GatewayMeasurement): Promise<Record<string, unknown>> {
    this.measurement = measurement.json;
    return { ok: true, reason: null };
  }
  measurementEvidence(): MeasurementJson | null {
    return this.measurement;
  }
  async bind(): Promise<BoundEvidence> {
    throw new BindingError(
      'SOFTWARE_PROVIDER',
      'the software provider produces no hardware evidence (dev mode)',
    );
  }
  close(): void {}
}
