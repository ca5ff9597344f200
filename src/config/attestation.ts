/**
 * The `attestation` section of the gateway configuration: one schema per provider (tpm,
 * software, sev-snp, tdx, azure-cvm, auto) with `minimum_tier`, and the resolution of its file
 * paths against the config file's folder (src/tee/ reads it).
 */
import { z } from 'zod';

/** A TPM persistent handle in the owner range, as a number or `0x…` text. */
const persistentHandle = z
  .union([z.number().int(), z.string().regex(/^0x[0-9a-fA-F]{1,8}$/, 'must be 0x followed by hex digits')])
  .transform((v) => (typeof v === 'string' ? Number.parseInt(v, 16) : v))
  .pipe(
    z
      .number()
      .int()
      .min(0x81000000)
      .max(0x817fffff, 'must be an owner persistent handle 0x81000000–0x817FFFFF'),
  );

/** `cmcp tpm enroll` inputs and the record the gateway loads at start-up (paths relative to the config). */
const tpmEnrollment = z.strictObject({
  /** Enrollment record (JSON) written by `cmcp tpm enroll` and read at start-up. */
  record: z.string().min(1),
  /** Persistent handle the enrolled AK is kept at. */
  ak_handle: persistentHandle.default(0x81000101),
  /** Which EK (and EK certificate NV index) enrollment uses. */
  ek_algorithm: z.enum(['rsa2048', 'ecc-p256', 'ecc-p384']).default('rsa2048'),
  /** Pinned TPM manufacturer roots (PEM/DER files) the EK certificate must chain to. */
  ek_roots: z.array(z.string().min(1)).default([]),
  /** Intermediate CA certificates between EK certificates and those roots. */
  ek_intermediates: z.array(z.string().min(1)).default([]),
  /** The operator's AK CA: private key and certificate (PEM). Used by `cmcp tpm enroll` only. */
  ak_ca_key: z.string().min(1).optional(),
  ak_ca_cert: z.string().min(1).optional(),
  /** Certificates above the AK CA certificate, carried in claims. */
  ak_ca_chain: z.array(z.string().min(1)).default([]),
  ak_cert_days: z.number().int().min(1).max(36_500).default(825),
});

const tpmFields = {
  /** tpm2-tss TCTI string, e.g. `swtpm:host=127.0.0.1,port=2321` or `device:/dev/tpmrm0`. */
  tcti: z.string().min(1),
  ak_algorithm: z.enum(['ecc-p256', 'rsa2048']).default('ecc-p256'),
  /** sha256-bank PCRs included in every quote (the measurement PCR is always added). */
  pcrs: z.array(z.number().int().min(0).max(23)).min(1).default([0, 1, 2, 7]),
  /** PCR the gateway measurement is extended into at start-up; null: do not extend. */
  measurement_pcr: z.number().int().min(0).max(23).nullable().default(15),
  /**
   * The measurement PCR's event log, shared by every gateway on this TPM (relative to the
   * config; default under the OS temp folder, per TCTI and PCR; src/measure/pcr-event-log.ts).
   */
  measurement_event_log: z.string().min(1).optional(),
  /** Enrolled AK (absent: a cloud platform AK if present, else an ephemeral, unanchored AK). */
  enrollment: tpmEnrollment.optional(),
  /** Use a cloud platform AK (Azure: 0x81000003 with its certificate at NV 0x01C101D0) when present. */
  platform_ak: z.boolean().default(true),
  /** Certificates above the platform AK certificate (e.g. Azure Virtual TPM CA 03), carried in claims. */
  platform_ak_chain: z.array(z.string().min(1)).default([]),
};

const tsmFields = {
  /** configfs-tsm report directory. */
  tsm_path: z.string().min(1).default('/sys/kernel/config/tsm/report'),
  /** SEV-SNP guest device (ioctl fallback when configfs-tsm is missing). */
  sev_guest_device: z.string().min(1).default('/dev/sev-guest'),
  /** Time limit of one configfs-tsm report. */
  tsm_timeout_ms: z.number().int().min(100).max(120_000).default(10_000),
};

/**
 * `minimum_tier`: refuse to start when the chosen provider is below this tier (software < tpm <
 * tee), or when it cannot reach it at start-up; a session that cannot be bound is refused
 * (SESSION_BINDING_REQUIRED). `on_unavailable: serve_unbound` instead serves such sessions
 * signed-only (the behaviour before minimum_tier could refuse). Absent means `refuse` (src/tee/tier.ts).
 */
const minimumTier = {
  minimum_tier: z.enum(['software', 'tpm', 'tee']).optional(),
  on_unavailable: z.enum(['refuse', 'serve_unbound']).optional(),
};

const tpmAttestation = z.strictObject({ provider: z.literal('tpm'), ...tpmFields, ...minimumTier });
const softwareAttestation = z.strictObject({ provider: z.literal('software'), ...minimumTier });
const sevSnpAttestation = z.strictObject({ provider: z.literal('sev-snp'), ...tsmFields, ...minimumTier });
const tdxAttestation = z.strictObject({ provider: z.literal('tdx'), ...tsmFields, ...minimumTier });
/** Azure CVM (src/tee/azure-provider.ts): what verifies the HCL report's hardware report. */
const azureFields = {
  /** SEV-SNP CVM: the VCEK, ASK and ARK certificate files (from the Azure IMDS THIM endpoint). */
  vcek_chain: z.array(z.string().min(1)).default([]),
  /** TDX CVM: the TD quote of the HCL report's TD report (from the Azure IMDS `acc/tdquote`). */
  td_quote: z.string().min(1).optional(),
};
const azureCvmAttestation = z.strictObject({
  provider: z.literal('azure-cvm'),
  tcti: z.string().min(1).default('device:/dev/tpmrm0'),
  pcrs: tpmFields.pcrs,
  measurement_pcr: tpmFields.measurement_pcr,
  measurement_event_log: tpmFields.measurement_event_log,
  ...azureFields,
  ...minimumTier,
});
/** `auto`: sev-snp, then tdx, then azure-cvm (HCL report in the vTPM), then tpm; never software. */
const autoAttestation = z.strictObject({
  provider: z.literal('auto'),
  ...tsmFields,
  ...tpmFields,
  ...azureFields,
  tcti: z.string().min(1).default('device:/dev/tpmrm0'),
  ...minimumTier,
});

export type AttestationConfig = z.infer<typeof attestationSchema>;
export const attestationSchema = z.discriminatedUnion('provider', [
  tpmAttestation,
  softwareAttestation,
  sevSnpAttestation,
  tdxAttestation,
  azureCvmAttestation,
  autoAttestation,
]);

/** Resolves the attestation section's file paths against the config file's folder. */
export function resolveAttestationPaths(a: AttestationConfig, abs: (p: string) => string): void {
  if (a.provider === 'tpm' || a.provider === 'auto') a.platform_ak_chain = a.platform_ak_chain.map(abs);
  if (
    (a.provider === 'tpm' || a.provider === 'auto' || a.provider === 'azure-cvm') &&
    a.measurement_event_log
  )
    a.measurement_event_log = abs(a.measurement_event_log);
  if (a.provider === 'azure-cvm' || a.provider === 'auto') {
    a.vcek_chain = a.vcek_chain.map(abs);
    if (a.td_quote) a.td_quote = abs(a.td_quote);
  }
  if ((a.provider === 'tpm' || a.provider === 'auto') && a.enrollment) {
    const e = a.enrollment;
    e.record = abs(e.record);
    e.ek_roots = e.ek_roots.map(abs);
    e.ek_intermediates = e.ek_intermediates.map(abs);
    e.ak_ca_chain = e.ak_ca_chain.map(abs);
    if (e.ak_ca_key) e.ak_ca_key = abs(e.ak_ca_key);
    if (e.ak_ca_cert) e.ak_ca_cert = abs(e.ak_ca_cert);
  }
}
