/**
 * TDX quote verification (claims and raw evidence): signature and chain (./signature.ts) →
 * REPORTDATA binding → TD appraisal (./appraise.ts) → PCS collateral (./collateral.ts).
 */
import type { TdxQuote } from '../abi/tdx/quote.js';
import {
  type AnchorUsed,
  type CheckResult,
  check,
  fail,
  HARDWARE_ANCHOR_CHECK,
  HARDWARE_BINDING_CHECK,
  HARDWARE_SIGNATURE_CHECK,
} from '../result.js';
import type { ReferenceValues, TrustStore } from '../trust.js';
import { appraiseTdxQuote, tdxBindingCheck } from './appraise.js';
import { type TdxCollateral, verifyTdxCollateral } from './collateral.js';
import { type VerifiedTdxQuote, verifyTdxSignature } from './signature.js';

/** Input of {@link verifyTdxQuote}. */
export interface TdxInput {
  quote: Uint8Array;
  /** Expected REPORTDATA (64 bytes), compared exactly; null/undefined ⇒ not-applicable. */
  expectedReportData?: Uint8Array | null;
  referenceValues?: ReferenceValues;
  trustStore: TrustStore;
  at: Date;
  /** Intel PCS collateral; undefined ⇒ the collateral checks are `absent`. */
  collateral?: TdxCollateral;
}

/** Result of {@link verifyTdxQuote}. */
export interface TdxResult {
  checks: CheckResult[];
  anchors: AnchorUsed[];
  notes: string[];
  quote?: TdxQuote;
  tcbStatus?: string;
  verified?: VerifiedTdxQuote;
}

const AFTER_PARSE = [
  'tdx.header',
  'tdx.attestation_key',
  HARDWARE_SIGNATURE_CHECK,
  'tdx.pck_certs_parse',
  'tdx.qe_report_signature',
  'tdx.qe_report_data',
  HARDWARE_ANCHOR_CHECK,
  HARDWARE_BINDING_CHECK,
  'tdx.debug',
  'tdx.mrtd',
  'tdx.rtmr',
  'tdx.mrconfigid',
  'tdx.trailing_data',
];
const COLLATERAL_CHECKS = [
  'tdx.collateral_signer',
  'tdx.tcb_info',
  'tdx.qe_identity',
  'tdx.crl',
  'tdx.tcb_status',
];

/**
 * Verifies a TDX quote and returns one check per property, in this order (ids stable):
 * `tdx.quote_parse`, `tdx.header`, `tdx.attestation_key`, `evidence.signature`,
 * `tdx.pck_certs_parse`, `tdx.qe_report_signature`, `tdx.qe_report_data`, `evidence.anchor`,
 * `evidence.binding`, `tdx.debug`, `tdx.mrtd`, `tdx.rtmr`, `tdx.mrconfigid`, `tdx.trailing_data`,
 * then the collateral checks of {@link verifyTdxCollateral} (`tdx.collateral_signer`,
 * `tdx.tcb_info`, `tdx.qe_identity`, `tdx.crl`, `tdx.tcb_status`).
 */
export function verifyTdxQuote(input: TdxInput): TdxResult {
  const s = verifyTdxSignature(input.quote, input.trustStore, input.at);
  const out: TdxResult = { checks: s.checks, anchors: s.anchors, notes: [] };
  const q = s.quote;
  if (!q) {
    const dep = (id: string) => fail(id, 'DEPENDENCY_FAILED', 'the quote did not parse');
    out.checks.push(...AFTER_PARSE.map(dep));
    out.checks.push(
      ...COLLATERAL_CHECKS.map((id) =>
        input.collateral === undefined
          ? check(id, 'absent', 'COLLATERAL_NOT_SUPPLIED', 'no collateral supplied')
          : dep(id),
      ),
    );
    return out;
  }
  out.quote = q;
  if (s.verified) out.verified = s.verified;
  out.checks.push(
    tdxBindingCheck(q, input.expectedReportData),
    ...appraiseTdxQuote(q, input.referenceValues, out.notes),
  );
  const pckPath = s.pckPath;
  const col = verifyTdxCollateral({
    quote: q,
    pck: pckPath?.[0],
    pckIssuer: pckPath?.[1],
    pckRoot: pckPath?.[pckPath.length - 1],
    ...(input.collateral === undefined ? {} : { collateral: input.collateral }),
    ...(input.referenceValues === undefined ? {} : { referenceValues: input.referenceValues }),
    trustStore: input.trustStore,
    at: input.at,
  });
  out.checks.push(...col.checks);
  out.anchors.push(
    ...col.anchors.filter(
      (a) =>
        !out.anchors.some((b) => b.sha256_fingerprint === a.sha256_fingerprint && b.used_for === a.used_for),
    ),
  );
  out.notes.push(...col.notes);
  if (col.tcbStatus) out.tcbStatus = col.tcbStatus;
  return out;
}
