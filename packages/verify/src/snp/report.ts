/**
 * SEV-SNP report verification (claims and raw evidence): signature and chain
 * (./signature.ts) → REPORT_DATA binding → appraisal against reference values (./appraise.ts).
 */
import type { SnpReport } from '../abi/snp/report.js';
import type { SnpProduct } from '../abi/snp/tcb.js';
import type { AnchorUsed, CheckResult } from '../result.js';
import type { ReferenceValues } from '../trust.js';
import { appraiseSnpReport, snpBindingCheck } from './appraise.js';
import { type SnpSignatureInput, type VerifiedSnpReport, verifySnpSignature } from './signature.js';

/** Input of {@link verifySnpReport}. */
export interface SnpInput extends SnpSignatureInput {
  /** Expected REPORT_DATA (64 bytes), compared exactly; null/undefined ⇒ not-applicable. */
  expectedReportData?: Uint8Array | null;
  referenceValues?: ReferenceValues;
}

/** Result of {@link verifySnpReport}. */
export interface SnpResult {
  checks: CheckResult[];
  anchors: AnchorUsed[];
  report?: SnpReport;
  product?: SnpProduct;
  verified?: VerifiedSnpReport;
}

/**
 * Verifies a SEV-SNP report and returns one check per property, in this order (ids stable):
 * `snp.report_parse`, `snp.signature_algo`, `snp.signing_key`, `snp.certs_parse`, `snp.product`,
 * `evidence.signature`, `evidence.anchor`, `snp.signer`, `snp.hwid`, `snp.tcb`,
 * `evidence.binding`, `snp.debug`, `snp.vmpl`, `snp.minimum_tcb`, `snp.measurement`,
 * `snp.host_data`. A check whose input did not parse fails; it is never skipped.
 */
export function verifySnpReport(input: SnpInput): SnpResult {
  const s = verifySnpSignature(input);
  const checks = [
    ...s.checks,
    snpBindingCheck(s.report, input.expectedReportData),
    ...appraiseSnpReport(s.report, s.product, input.referenceValues),
  ];
  return {
    checks,
    anchors: s.anchors,
    ...(s.report ? { report: s.report } : {}),
    ...(s.product ? { product: s.product } : {}),
    ...(s.verified ? { verified: s.verified } : {}),
  };
}
