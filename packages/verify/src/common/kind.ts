/**
 * What every evidence kind (TPM, SEV-SNP, TDX, …) provides to the registry (../kinds.ts), and
 * the small helpers their entries share. A kind verifies its evidence from a claim and as raw
 * evidence with the same code: bytes → abi parse → signature and chain → binding → appraisal.
 */
import type { ClaimEvidence } from '../claim-schema.js';
import { fromB64u } from '../format/canonical.js';
import type { AnchorUsed, CheckResult, EventLogSummary } from '../result.js';
import type { PreviousQuoteOrder } from '../tpm/clock.js';
import type { ReferenceValues, TeeType, TrustStore } from '../trust.js';
import type { FieldSource } from './fields.js';

/** The relying party's context for one verification. */
export interface KindContext {
  trustStore: TrustStore;
  /** Verification time (certificate validity, collateral windows). */
  at: Date;
  referenceValues?: ReferenceValues;
}

/** Claim-only options a kind may use. */
export interface ClaimKindContext extends KindContext {
  /** Required PCR selection policy (TPM): the quote must select exactly these SHA-256 PCRs. */
  requiredPcrs?: number[];
  /** TPMS_ATTEST of the previous claim's TPM quote, for the clock comparison (`tpm.clock`). */
  previousTpmAttest?: Uint8Array;
  /**
   * Whether that quote is known to precede this one (`earlier`: this session opened after the
   * previous claim was issued), or not (`close-order`: claims are in close order, quotes taken
   * at open). Default `close-order`.
   */
  previousTpmAttestOrder?: PreviousQuoteOrder;
}

/** What a kind's entry returns. */
export interface KindResult {
  checks: CheckResult[];
  anchors: AnchorUsed[];
  notes: string[];
  eventLog?: EventLogSummary;
  /** The appraised fields, before they are marked verified (./fields.ts). */
  fields?: FieldSource[];
}

/** One evidence kind. */
export interface EvidenceKind<Raw> {
  /** The TEE type reference values name (`allowed_tee_types`). */
  tee: TeeType;
  /** Whether a bound claim of this provider carries this kind's evidence member. */
  inClaim(ev: ClaimEvidence): boolean;
  /**
   * Verifies the claim's evidence: it must carry `expectedReportData` (the claim's REPORT_DATA;
   * null when the claim's binding could not be computed, which fails `evidence.binding`).
   */
  fromClaim(ev: ClaimEvidence, expectedReportData: Buffer | null, ctx: ClaimKindContext): KindResult;
  /** Verifies raw evidence (no claim). */
  fromRaw(e: Raw, ctx: KindContext): KindResult;
}

/** Decodes base64url, or null when it is not. */
export function tryB64u(text: string): Buffer | null {
  try {
    return fromB64u(text);
  } catch {
    return null;
  }
}

/** Replaces the check with `id` (or appends it). */
export function replaceCheck(checks: CheckResult[], id: string, replacement: CheckResult): void {
  const i = checks.findIndex((c) => c.id === id);
  if (i >= 0) checks[i] = replacement;
  else checks.push(replacement);
}
