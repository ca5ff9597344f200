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
 * A REPORT_DATA-bound kind's claim entry: `verify` runs on the evidence decoded from the claim and
 * the claim's REPORT_DATA (each empty when missing, so the checks that need them fail); evidence
 * that was not base64url fails `parse.id` (EVIDENCE_MALFORMED, "<field> is not base64url"), then
 * {@link finishTeeClaim}.
 */
export function teeClaim(
  provider: string,
  decoded: Buffer | null,
  expectedReportData: Buffer | null,
  parse: { id: string; field: string },
  verify: (evidence: Buffer, expectedReportData: Buffer) => KindResult,
): KindResult {
  const r = verify(decoded ?? Buffer.alloc(0), expectedReportData ?? Buffer.alloc(0));
  if (!decoded) {
    replaceCheck(r.checks, parse.id, fail(parse.id, 'EVIDENCE_MALFORMED', `${parse.field} is not base64url`));
  }
  return finishTeeClaim(provider, r, expectedReportData);
}

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
