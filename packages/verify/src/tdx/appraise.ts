/**
 * TDX binding and appraisal: REPORTDATA against the expected 64 bytes (`evidence.binding`),
 * then the TD report against the reference values: TD_ATTRIBUTES.DEBUG, MRTD, RTMR[0..3],
 * MRCONFIGID, and bytes after the declared signature data. Source: Intel TDX Module ABI
 * (TDREPORT, TD_ATTRIBUTES bit 0 DEBUG); DCAP Quoting Library API Appendix A.
 */
import type { TdxQuote } from '../abi/tdx/quote.js';
import {
  type CheckResult,
  check,
  fail,
  HARDWARE_BINDING_CHECK,
  NOT_FRESH_NO_NONCE,
  pass,
} from '../result.js';
import type { ReferenceValues } from '../trust.js';

/** `evidence.binding`: REPORTDATA equals the expected 64 bytes; null/undefined ⇒ not-applicable. */
export function tdxBindingCheck(q: TdxQuote, expected: Uint8Array | null | undefined): CheckResult {
  if (expected == null) {
    return check(HARDWARE_BINDING_CHECK, 'not-applicable', 'NOT_SUPPLIED', NOT_FRESH_NO_NONCE);
  }
  const want = Buffer.from(expected);
  return want.length === 64 && q.body.reportData.equals(want)
    ? pass(HARDWARE_BINDING_CHECK, 'REPORTDATA equals the expected 64 bytes')
    : fail(
        HARDWARE_BINDING_CHECK,
        'EVIDENCE_BINDING_MISMATCH',
        `REPORTDATA is not the expected ${want.length}-byte value`,
      );
}

function pin(id: string, name: string, value: Buffer, allowed: string[] | undefined): CheckResult {
  const hex = value.toString('hex');
  if (!allowed) return check(id, 'not-applicable', 'NO_POLICY', `${name} ${hex}; no expected value`);
  return allowed.includes(hex)
    ? pass(id, `${name} ${hex} is expected`)
    : fail(id, 'MEASUREMENT_NOT_ALLOWED', `${name} ${hex} is not an expected value`);
}

function rtmrCheck(q: TdxQuote, pins: NonNullable<ReferenceValues['tdx']>['rtmr'] | undefined): CheckResult {
  const keys = pins ? (Object.keys(pins) as ('0' | '1' | '2' | '3')[]) : [];
  if (!pins || keys.length === 0)
    return check('tdx.rtmr', 'not-applicable', 'NO_POLICY', 'no expected RTMR values');
  const bad = keys.filter((k) => !(pins[k] ?? []).includes(q.body.rtmr[Number(k)]?.toString('hex') ?? ''));
  return bad.length
    ? fail('tdx.rtmr', 'MEASUREMENT_NOT_ALLOWED', `RTMR ${bad.join(', ')} not an expected value`)
    : pass('tdx.rtmr', `RTMR ${keys.join(', ')} expected`);
}

function trailingCheck(q: TdxQuote, refuse: boolean | undefined, notes: string[]): CheckResult {
  if (q.trailing === 0) return pass('tdx.trailing_data', 'no bytes after the declared signature data');
  if (refuse)
    return fail(
      'tdx.trailing_data',
      'TDX_TRAILING_BYTES',
      `${q.trailing} byte(s) after the declared signature data`,
    );
  notes.push(
    `The quote has ${q.trailing} byte(s) after its declared signature data; nothing signs them and they were ignored.`,
  );
  return pass(
    'tdx.trailing_data',
    `${q.trailing} unsigned byte(s) after the declared signature data (length ${q.end - q.signedRegion.length - 4}) were ignored`,
  );
}

/**
 * Appraisal checks, in order (ids stable): `tdx.debug`, `tdx.mrtd`, `tdx.rtmr`,
 * `tdx.mrconfigid`, `tdx.trailing_data`. Notes (ignored trailing bytes) go to `notes`.
 */
export function appraiseTdxQuote(
  q: TdxQuote,
  referenceValues: ReferenceValues | undefined,
  notes: string[],
): CheckResult[] {
  const rv = referenceValues?.tdx;
  const attrs = q.body.tdAttributes.toString('hex');
  const debug = ((q.body.tdAttributes[0] ?? 0) & 1) !== 0;
  return [
    !debug
      ? pass('tdx.debug', `TD_ATTRIBUTES ${attrs}: DEBUG clear`)
      : rv?.allow_debug
        ? pass('tdx.debug', 'TD_ATTRIBUTES.DEBUG is set; the reference values allow debug')
        : fail('tdx.debug', 'TDX_DEBUG_ENABLED', `TD_ATTRIBUTES ${attrs} has DEBUG set`),
    pin('tdx.mrtd', 'MRTD', q.body.mrTd, rv?.mrtd),
    rtmrCheck(q, rv?.rtmr),
    pin('tdx.mrconfigid', 'MRCONFIGID', q.body.mrConfigId, rv?.mrconfigid),
    trailingCheck(q, rv?.reject_trailing_bytes, notes),
  ];
}
