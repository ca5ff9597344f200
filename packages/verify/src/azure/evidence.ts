/**
 * The Azure confidential VM evidence entry (`azure-cvm`), for claims (`evidence.tpm` +
 * `evidence.azure_hcl`) and raw evidence: HCL report → runtime data → HCLAkPub → vTPM quote →
 * qualifyingData, with the hardware report verified by its own platform verifier. Every link
 * is one check; a broken link fails with its own reason code. Ids, in order: `azure.hcl_parse`,
 * `azure.runtime_data`, `azure.report_data`, the hardware checks (see ./signature.ts), for TDX
 * `azure.td_report`, then the quote checks of verifyTpmQuote (`azure.quote_signature` for its
 * signature), `azure.ak_match`, and `tpm.pcr_values` when the reference values pin PCRs.
 */

import { TPM_ALG } from '../abi/tpm/constants.js';
import type { PcrSelection } from '../abi/tpm/pcr.js';
import type { ClaimEvidence } from '../claim-schema.js';
import {
  type ClaimKindContext,
  type EvidenceKind,
  type KindContext,
  type KindResult,
  tryB64u,
} from '../common/kind.js';
import type { RawEvidenceOptions } from '../common/raw.js';
import { finishTeeClaim } from '../common/tee.js';
import { tpmQualifyingData } from '../format/binding.js';
import { fail } from '../result.js';
import { pcrPinsCheck } from '../tpm/appraise.js';
import type { PcrValue } from '../tpm/pcr.js';
import { akMatchCheck, reportDataCheck, tdReportCheck } from './appraise.js';
import { type AzureHardwareInput, hardwareChecks, parseHclChecks, quoteChecks } from './signature.js';

/** Input of {@link verifyAzureHcl}. */
export interface AzureHclInput extends AzureHardwareInput {
  /** The NV index 0x01400001 contents. */
  hclReport: Uint8Array;
  /** The vTPM quote: TPMS_ATTEST as signed. */
  attest: Uint8Array;
  /** TPMT_SIGNATURE. */
  signature: Uint8Array;
  /** The AK's TPMT_PUBLIC, when presented (must be HCLAkPub); otherwise HCLAkPub is used directly. */
  akPublic?: Uint8Array;
  /** Qualified Name of the AK's parent (with `akPublic`). */
  akParentQualifiedName?: Uint8Array;
  /** Expected qualifyingData; null/undefined ⇒ `evidence.binding` not-applicable. */
  expectedExtraData?: Uint8Array | null;
  expectedExtraDataLabel?: string;
  pcrValues?: readonly PcrValue[];
  declaredSelection?: readonly PcrSelection[];
  requiredSelection?: readonly PcrSelection[];
}

/** Verifies the whole Azure CVM chain. Never throws for bad input (each link is a check). */
export function verifyAzureHcl(input: AzureHclInput, ctx: KindContext): KindResult {
  const p = parseHclChecks(input.hclReport);
  const hw = hardwareChecks(p.hcl, input, ctx);
  const checks = [...p.checks, reportDataCheck(p.hcl), ...hw.checks];
  if (p.hcl?.kind === 'tdx' && input.tdxQuote) checks.push(tdReportCheck(p.hcl, hw.tdQuote));
  const q = quoteChecks(p.akKey, {
    attest: input.attest,
    signature: input.signature,
    ...(input.akPublic ? { akPublic: input.akPublic } : {}),
    ...(input.akParentQualifiedName ? { akParentQualifiedName: input.akParentQualifiedName } : {}),
    expectedExtraData: input.expectedExtraData ?? null,
    expectedExtraDataLabel: input.expectedExtraDataLabel ?? 'the expected nonce',
    ...(input.pcrValues ? { pcrValues: input.pcrValues } : {}),
    ...(input.declaredSelection ? { declaredSelection: input.declaredSelection } : {}),
    ...(input.requiredSelection ? { requiredSelection: input.requiredSelection } : {}),
  });
  checks.push(...q.checks, akMatchCheck(p.akKey, q.akPublic?.key, input.akPublic !== undefined));
  // PCR pins of the reference values apply to the vTPM quote as to any TPM quote
  const pins = ctx.referenceValues?.tpm?.pcrs;
  if (pins) checks.push(pcrPinsCheck(pins, input.pcrValues ?? [], checks));
  const notes = [...hw.notes];
  if (p.runtime?.vmConfiguration)
    notes.push(
      `HCL vm-configuration (informational, covered by REPORT_DATA): ${JSON.stringify(p.runtime.vmConfiguration).slice(0, 200)}`,
    );
  return { checks, anchors: hw.anchors, notes };
}

/** Raw Azure CVM evidence (`verify-evidence --azure-hcl-report`). */
export interface RawAzureEvidence
  extends RawEvidenceOptions,
    Omit<AzureHclInput, 'expectedExtraData' | 'expectedExtraDataLabel' | 'declaredSelection'> {
  /** The relying party's nonce: extraData must equal it exactly. */
  nonce?: Uint8Array;
}

const sha256Selection = (pcrs: readonly number[]): PcrSelection[] => [
  { hashAlg: TPM_ALG.SHA256, pcrs: [...pcrs] },
];

function fromRaw(e: RawAzureEvidence, ctx: KindContext): KindResult {
  const { trustStore: _t, referenceValues: _r, now: _n, nonce, ...input } = e;
  const required = ctx.referenceValues?.tpm?.required_pcrs;
  return verifyAzureHcl(
    {
      ...input,
      expectedExtraData: nonce ?? null,
      ...(required ? { requiredSelection: sha256Selection([...required].sort((a, b) => a - b)) } : {}),
    },
    ctx,
  );
}

type ClaimAzure = NonNullable<ClaimEvidence['azure_hcl']>;
type ClaimTpm = NonNullable<ClaimEvidence['tpm']>;

function claimPcrValues(tpm: ClaimTpm): PcrValue[] | null {
  const out: PcrValue[] = [];
  for (const [k, v] of Object.entries(tpm.pcr_values)) {
    const bytes = tryB64u(v);
    if (!/^(0|[1-9]\d?)$/.test(k) || Number(k) > 31 || !bytes) return null;
    out.push({ hashAlg: TPM_ALG.SHA256, index: Number(k), value: bytes });
  }
  return out;
}

/** A claim's `evidence.tpm` (the vTPM quote) and `evidence.azure_hcl` (report, hardware evidence). */
function fromClaim(ev: ClaimEvidence, expectedReportData: Buffer | null, ctx: ClaimKindContext): KindResult {
  const az = ev.azure_hcl as ClaimAzure;
  const tpm = ev.tpm as ClaimTpm;
  const bad = Buffer.from('not base64url');
  const pcrValues = claimPcrValues(tpm);
  const rvPcrs = ctx.referenceValues?.tpm?.required_pcrs;
  const requiredPcrs = ctx.requiredPcrs ?? (rvPcrs ? [...rvPcrs].sort((a, b) => a - b) : undefined);
  const tdQuote = az.td_quote !== undefined ? (tryB64u(az.td_quote) ?? bad) : undefined;
  const r = verifyAzureHcl(
    {
      hclReport: tryB64u(az.report) ?? bad,
      attest: tryB64u(tpm.attest) ?? bad,
      signature: tryB64u(tpm.signature) ?? bad,
      akPublic: tryB64u(tpm.ak_public) ?? bad,
      akParentQualifiedName: tryB64u(tpm.ak_parent_qualified_name) ?? bad,
      expectedExtraData: expectedReportData ? tpmQualifyingData(expectedReportData) : Buffer.alloc(0),
      expectedExtraDataLabel: 'SHA-256(REPORT_DATA) of this claim',
      pcrValues: pcrValues ?? [],
      declaredSelection: sha256Selection(tpm.pcr_selection.pcrs),
      ...(requiredPcrs ? { requiredSelection: sha256Selection(requiredPcrs) } : {}),
      snpCerts: az.certs.map((c) => tryB64u(c.der) ?? bad),
      ...(tdQuote ? { tdxQuote: tdQuote } : {}),
    },
    ctx,
  );
  if (!pcrValues)
    r.checks.push(fail('tpm.pcr_values', 'PCR_VALUES_MALFORMED', 'pcr_values is not PCR index → base64url'));
  return finishTeeClaim(ev.provider, r, expectedReportData);
}

/** The Azure confidential VM evidence kind. */
export const AZURE_CVM_KIND: EvidenceKind<RawAzureEvidence> = {
  tee: 'azure-cvm',
  inClaim: (ev) => ev.provider === 'azure-cvm' && ev.tpm !== null && ev.azure_hcl !== undefined,
  fromClaim,
  fromRaw,
};
