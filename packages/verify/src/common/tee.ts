/**
 * Glue shared by the REPORT_DATA-bound kinds (SEV-SNP, TDX) when their evidence comes in a
 * claim: the report / quote must carry exactly the claim's REPORT_DATA; collateral is not
 * carried in claims.
 */
import { type CheckResult, fail, HARDWARE_ANCHOR_CHECK, HARDWARE_BINDING_CHECK } from '../result.js';
import { type KindContext, type KindResult, replaceCheck } from './kind.js';

/** The trust store, verification time and reference values of `ctx`, as a TEE verifier's input takes them. */
export function teeContextInput(ctx: KindContext): KindContext {
  return {
    trustStore: ctx.trustStore,
    at: ctx.at,
    ...(ctx.referenceValues ? { referenceValues: ctx.referenceValues } : {}),
  };
}

/**
 * Finishes a claim's TEE result: the parse check `unreadable.id` fails (EVIDENCE_MALFORMED) when
 * the claim's evidence bytes were not base64url, `evidence.binding` fails when the claim's
 * REPORT_DATA could not be computed, and an unanchored signing key gets a note.
 */
export function finishTeeClaim(
  provider: string,
  r: KindResult,
  expectedReportData: Buffer | null,
  unreadable?: { id: string; field: string },
): KindResult {
  if (unreadable) {
    replaceCheck(
      r.checks,
      unreadable.id,
      fail(unreadable.id, 'EVIDENCE_MALFORMED', `${unreadable.field} is not base64url`),
    );
  }
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
