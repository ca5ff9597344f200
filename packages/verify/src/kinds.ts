/**
 * The one registry of evidence kinds. Claim verification (claim.ts, by `evidence.provider`) and
 * raw-evidence verification (evidence.ts, the CLI) both dispatch through it, so each kind's glue
 * exists once: adding a platform (e.g. the Azure HCL path, NVIDIA GPU evidence) is one folder
 * with an `evidence.ts` exporting an {@link EvidenceKind}, plus one line here.
 */
import { AZURE_CVM_KIND, type RawAzureEvidence } from './azure/evidence.js';
import type { EvidenceKind } from './common/kind.js';
import { type RawSnpEvidence, SNP_KIND } from './snp/evidence.js';
import { type RawTdxEvidence, TDX_KIND } from './tdx/evidence.js';
import { type RawTpmEvidence, TPM_KIND } from './tpm/evidence.js';

/** Raw evidence input per kind. */
export interface RawEvidenceByKind {
  tpm: RawTpmEvidence;
  'sev-snp': RawSnpEvidence;
  tdx: RawTdxEvidence;
  'azure-cvm': RawAzureEvidence;
}

/** Evidence kinds by claim `evidence.provider` / TEE type. */
export const EVIDENCE_KINDS: { readonly [K in keyof RawEvidenceByKind]: EvidenceKind<RawEvidenceByKind[K]> } =
  {
    tpm: TPM_KIND,
    'sev-snp': SNP_KIND,
    tdx: TDX_KIND,
    'azure-cvm': AZURE_CVM_KIND,
  };

/** The kind registered for a provider name, or undefined. */
export function evidenceKind(provider: string): EvidenceKind<unknown> | undefined {
  return Object.hasOwn(EVIDENCE_KINDS, provider)
    ? (EVIDENCE_KINDS[provider as keyof RawEvidenceByKind] as EvidenceKind<unknown>)
    : undefined;
}
