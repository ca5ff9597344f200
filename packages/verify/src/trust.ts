/**
 * Trust store (pinned roots by SHA-256 fingerprint) and reference values (expected
 * measurements, PCRs, minimum TCB, allowed TEE types): YAML files validated with zod.
 *
 * The trust store holds facts only — names, fingerprints, sources. Vendor certificates travel
 * with the evidence; a chain is anchored when it ends at a certificate whose SHA-256
 * fingerprint is pinned here for the right purpose (and product, for AMD).
 *
 * Parsing only (from YAML text), so the browser bundle can use it; the file loaders and
 * `defaultAttestationDir` are Node-only and live in ./trust-files.ts.
 */
import { parse as parseYaml } from 'yaml';
import { z } from 'zod';
import { SNP_PRODUCTS, type SnpProduct } from './abi/snp/tcb.js';
import { CmcpError } from './errors/index.js';

/** What a pinned root may anchor. */
export const ROOT_PURPOSES = [
  /** AMD SEV-SNP ARK (per product); anchors VCEK (via ASK) and VLEK (via ASVK). */
  'amd-ark',
  /** Intel SGX Root CA; anchors TDX PCK certificates and PCS collateral signers. */
  'intel-sgx-root',
  /** TPM manufacturer EK roots. */
  'tpm-manufacturer',
  /** Cloud vTPM AK/EK roots (e.g. Azure Virtual TPM Root 2023). */
  'cloud-vtpm',
  /** An operator's own AK certificate authority. */
  'tpm-ak-root',
] as const;
export type RootPurpose = (typeof ROOT_PURPOSES)[number];

/** AMD SEV-SNP products whose ARK is pinned separately. */
export { SNP_PRODUCTS, type SnpProduct };

const fingerprint = z
  .string()
  .transform((s) => s.replace(/:/g, '').toLowerCase())
  .pipe(z.string().regex(/^[0-9a-f]{64}$/, 'not a SHA-256 fingerprint (64 hex digits, colons allowed)'));

/** zod schema of one pinned root. */
export const trustRootSchema = z.strictObject({
  name: z.string().min(1).max(200),
  purpose: z.enum(ROOT_PURPOSES),
  /** Required for `amd-ark`. */
  product: z.enum(SNP_PRODUCTS).optional(),
  /** SHA-256 of the certificate DER. */
  sha256: fingerprint,
  /** SHA-256 of the SubjectPublicKeyInfo DER (informational). */
  spki_sha256: fingerprint.optional(),
  /** Where the fact comes from. */
  source: z.string().min(1),
  /** How it was confirmed, or why it was not. */
  verified: z.string().optional(),
  /**
   * `intermediate`: this entry may anchor although it is not self-signed (the relying party
   * trusts the CA below the vendor root; reported as a warning). Default: an entry anchors only
   * when its certificate is self-signed.
   */
  anchor: z.enum(['root', 'intermediate']).optional(),
});
export type TrustRoot = z.infer<typeof trustRootSchema>;

/** zod schema of the trust store file. */
export const trustStoreSchema = z
  .strictObject({
    version: z.literal(1),
    roots: z.array(trustRootSchema),
    /**
     * The Intel TD Quoting Enclave's identity (Intel PCS QE identity `mrsigner`, `isvprodid`): a
     * TDX quote verified without collateral must have a QE report with these values.
     */
    intel_qe_identity: z
      .strictObject({
        mrsigner: z
          .string()
          .transform((x) => x.toLowerCase())
          .pipe(z.string().regex(/^[0-9a-f]{64}$/, 'not 32 bytes of hex')),
        isvprodid: z.number().int().min(0).max(0xffff),
        source: z.string().min(1),
      })
      .optional(),
  })
  .superRefine((ts, ctx) => {
    ts.roots.forEach((r, i) => {
      if (r.purpose === 'amd-ark' && !r.product) {
        ctx.addIssue({ code: 'custom', path: ['roots', i, 'product'], message: 'amd-ark needs a product' });
      }
    });
  });
export type TrustStore = z.infer<typeof trustStoreSchema>;

/** An empty trust store: nothing is anchored. */
export const EMPTY_TRUST_STORE: TrustStore = { version: 1, roots: [] };

/** A trust store or reference values file that does not validate. */
export class PolicyFileError extends CmcpError {
  declare readonly code: 'TRUST_STORE_INVALID' | 'REFERENCE_VALUES_INVALID';

  constructor(code: 'TRUST_STORE_INVALID' | 'REFERENCE_VALUES_INVALID', message: string) {
    super(code, message);
    this.name = 'PolicyFileError';
  }
}

function firstIssue(err: z.ZodError): string {
  const i = err.issues[0];
  return i ? `${i.path.join('.') || '(root)'}: ${i.message}`.slice(0, 200) : 'invalid';
}

function parseYamlText(text: string, code: PolicyFileError['code']): unknown {
  try {
    return parseYaml(text, { maxAliasCount: 0 });
  } catch (err) {
    throw new PolicyFileError(code, `not YAML: ${(err instanceof Error ? err.message : '').slice(0, 120)}`);
  }
}

/** Parses and validates trust store YAML text. @throws PolicyFileError TRUST_STORE_INVALID */
export function parseTrustStore(text: string): TrustStore {
  const r = trustStoreSchema.safeParse(parseYamlText(text, 'TRUST_STORE_INVALID'));
  if (!r.success) throw new PolicyFileError('TRUST_STORE_INVALID', `trust store: ${firstIssue(r.error)}`);
  return r.data;
}

/** Roots of the store that may anchor `purposes` (and, when given, `product`). */
export function rootsFor(
  store: TrustStore,
  purposes: readonly RootPurpose[],
  product?: SnpProduct,
): TrustRoot[] {
  return store.roots.filter((r) => purposes.includes(r.purpose) && (!product || r.product === product));
}

/** Colon-separated uppercase form of a hex SHA-256, as anchors are printed. */
export function colonFingerprint(hex: string): string {
  return hex.toUpperCase().match(/.{2}/g)?.join(':') ?? hex;
}

// ---------- reference values ----------

const hexBytes = (n: number) =>
  z
    .string()
    .transform((s) => s.toLowerCase())
    .pipe(z.string().regex(new RegExp(`^[0-9a-f]{${2 * n}}$`), `not ${n} bytes of hex`));
const byte = z.number().int().min(0).max(255);

/** Minimum SEV-SNP TCB component SPLs (Milan/Genoa: bootloader, tee, snp, microcode; Turin adds fmc). */
export const snpTcbSchema = z.strictObject({
  bootloader: byte.optional(),
  tee: byte.optional(),
  snp: byte.optional(),
  microcode: byte.optional(),
  fmc: byte.optional(),
});
export type SnpTcbMinimum = z.infer<typeof snpTcbSchema>;

export const TEE_TYPES = ['tpm', 'sev-snp', 'tdx', 'azure-cvm'] as const;
export type TeeType = (typeof TEE_TYPES)[number];

/** TCB statuses Intel PCS reports. */
export const TDX_TCB_STATUSES = [
  'UpToDate',
  'SWHardeningNeeded',
  'ConfigurationNeeded',
  'ConfigurationAndSWHardeningNeeded',
  'OutOfDate',
  'OutOfDateConfigurationNeeded',
  'Revoked',
] as const;

/** zod schema of the reference values file. */
export const referenceValuesSchema = z.strictObject({
  version: z.literal(1),
  /** TEE types the relying party accepts; absent ⇒ all. */
  allowed_tee_types: z.array(z.enum(TEE_TYPES)).min(1).optional(),
  tpm: z
    .strictObject({
      /** PCR bank of the required selection and values. */
      pcr_bank: z.literal('sha256').default('sha256'),
      /** The quote must select exactly these PCRs. */
      required_pcrs: z.array(z.number().int().min(0).max(23)).optional(),
      /** Expected PCR values (index → hex); each listed PCR must equal one of the values. */
      pcrs: z.record(z.string().regex(/^(0|[1-9]\d?)$/), z.array(hexBytes(32)).min(1)).optional(),
    })
    .optional(),
  sev_snp: z
    .strictObject({
      /** Accept reports whose POLICY.DEBUG is set (default false). */
      allow_debug: z.boolean().default(false),
      /** Accepted VMPL values. */
      vmpl: z.array(z.number().int().min(0).max(3)).min(1).optional(),
      /** Minimum REPORTED_TCB per product. */
      minimum_tcb: z.partialRecord(z.enum(['Milan', 'Genoa', 'Turin']), snpTcbSchema).optional(),
      /** Accepted MEASUREMENT values (48 bytes hex). */
      measurements: z.array(hexBytes(48)).min(1).optional(),
      /** Accepted HOST_DATA values (32 bytes hex). */
      host_data: z.array(hexBytes(32)).min(1).optional(),
    })
    .optional(),
  /** The cmcp gateway itself: accepted gateway measurement digests (`cmcp measure` writes them). */
  gateway: z
    .strictObject({
      /** Accepted `gateway_measurement` values, `sha256:<64 lowercase hex>` (docs/attestation.md). */
      measurements: z
        .array(z.string().regex(/^sha256:[0-9a-f]{64}$/, 'not sha256:<64 lowercase hex>'))
        .min(1),
    })
    .optional(),
  tdx: z
    .strictObject({
      /** Accept TDs with TD_ATTRIBUTES.DEBUG set (default false). */
      allow_debug: z.boolean().default(false),
      mrtd: z.array(hexBytes(48)).min(1).optional(),
      /** RTMR index (0-3) → accepted values. */
      rtmr: z.partialRecord(z.enum(['0', '1', '2', '3']), z.array(hexBytes(48)).min(1)).optional(),
      mrconfigid: z.array(hexBytes(48)).min(1).optional(),
      /** TCB statuses accepted when collateral is supplied (default: UpToDate only). */
      accepted_tcb_status: z.array(z.enum(TDX_TCB_STATUSES)).min(1).default(['UpToDate']),
      /** Refuse bytes after the declared quote (default: tolerate and report them). */
      reject_trailing_bytes: z.boolean().default(false),
    })
    .optional(),
});
export type ReferenceValues = z.infer<typeof referenceValuesSchema>;

/** Parses and validates reference values YAML text. @throws PolicyFileError REFERENCE_VALUES_INVALID */
export function parseReferenceValues(text: string): ReferenceValues {
  const r = referenceValuesSchema.safeParse(parseYamlText(text, 'REFERENCE_VALUES_INVALID'));
  if (!r.success) {
    throw new PolicyFileError('REFERENCE_VALUES_INVALID', `reference values: ${firstIssue(r.error)}`);
  }
  return r.data;
}
