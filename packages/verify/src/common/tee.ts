/**
 * Glue shared by the REPORT_DATA-bound kinds (SEV-SNP, TDX) when their evidence comes in a
 * claim: the report / quote must carry exactly the claim's REPORT_DATA; collateral is not
 * carried in claims.
 */
import { type CheckResult, fail, HARDWARE_ANCHOR_CHECK, HARDWARE_BINDING_CHECK } from '../result.js';
import { type KindResult, replaceCheck } from './kind.js';

/**
 * Finishes a claim's TEE result: `evidence.binding` fails when the claim's REPORT_DATA could not
 * be computed, and an unanchored signing key gets a note.
 */
export function finishTeeClaim(
  provider: string,
  r: KindResult,
  expectedReportData: Buffer | null,
): KindResult {
  if (!expectedReportData) {
    replaceCheck(
      r.checks,
      HARDWARE_BINDING_CHECK,
      fail(HARDWARE_BINDING_CHECK, 'DEPENDENCY_FAILED', 'REPORT_DATA could not be computed from the claim'),
    );
  }
  const anchor = r.checks.find((c: CheckResult) => c.id === HARDWARE_ANCHOR_CHECK);
  if (anchor && anchor.status !== 'pass') {
    r.notes.push(
      `The ${provider} signing key is NOT anchored to a pinned root (${anchor.reason_code}): the verdict is hardware-unanchored at best.`,
    );
  }
  return r;
}
