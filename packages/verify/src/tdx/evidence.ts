/**
 * The TDX evidence entry, for claims (`evidence.tdx`) and raw evidence: quote bytes → TDX quote
 * (abi) → attestation key, QE report and PCK chain → REPORTDATA → TD appraisal → collateral.
 * Collateral is not carried in claims, so a claim's TCB status is reported as unknown.
 */

import { parseCel } from '../abi/eventlog/cel.js';
import type { TdxQuote } from '../abi/tdx/quote.js';
import { replayCel, verifyCel } from '../cel.js';
import type { ClaimEvidence } from '../claim-schema.js';
import { tdxFields } from '../common/fields.js';
import {
  type EvidenceKind,
  type KindContext,
  type KindResult,
  replaceCheck,
  tryB64u,
} from '../common/kind.js';
import type { RawEvidenceOptions } from '../common/raw.js';
import { teeClaim, teeContextInput } from '../common/tee.js';
import { fail, HARDWARE_SIGNATURE_CHECK } from '../result.js';
import { verifyCcel } from './ccel.js';
import { type TdxInput, verifyTdxQuote } from './quote.js';

/** Raw TDX evidence. */
export interface RawTdxEvidence
  extends RawEvidenceOptions,
    Omit<TdxInput, 'trustStore' | 'at' | 'referenceValues'> {
  /** The CC event log area (/sys/firmware/acpi/tables/data/CCEL): checks `ccel.*`. */
  ccel?: Uint8Array;
  /** The ACPI CCEL table (/sys/firmware/acpi/tables/CCEL). */
  ccelTable?: Uint8Array;
  /** A canonical event log (Confidential Space's launcher log, CC MR records): checks `cel.*`. */
  cel?: Uint8Array;
}

/**
 * The event-log checks of raw TDX evidence: the CC event log replayed into RTMR0..3, then the
 * CEL on top of it (RTMR3 in Confidential Space), each compared with the quote's RTMRs, which
 * count as quoted only when the quote signature verified.
 */
function eventLogChecks(e: RawTdxEvidence, r: KindResult, quote: TdxQuote | undefined): void {
  if (e.ccel === undefined && e.cel === undefined) return;
  const rtmrs = quote?.body.rtmr;
  const quoted = r.checks.some((c) => c.id === HARDWARE_SIGNATURE_CHECK && c.status === 'pass');
  let celCovered: number[] = [];
  if (e.cel !== undefined) {
    try {
      celCovered = replayCel(parseCel(e.cel)).rtmrsCovered;
    } catch {
      // verifyCel below reports why
    }
  }
  let start: Buffer[] | undefined;
  if (e.ccel !== undefined) {
    const c = verifyCcel({
      log: e.ccel,
      ...(e.ccelTable === undefined ? {} : { table: e.ccelTable }),
      ...(rtmrs ? { rtmrs, rtmrsQuoted: quoted } : {}),
      extendedLater: celCovered,
    });
    r.checks.push(...c.checks);
    r.notes.push(...c.notes);
    start = c.replay?.rtmrs;
  }
  if (e.cel !== undefined) {
    const c = verifyCel({
      log: e.cel,
      ...(rtmrs ? { rtmrs, quoted } : {}),
      ...(start ? { rtmrStart: start } : {}),
    });
    r.checks.push(...c.checks);
    r.notes.push(...c.notes);
    if (e.ccel !== undefined && !start && c.replay?.rtmrsCovered.length) {
      // the CEL's RTMRs start where the CC event log left them, which is unknown here
      replaceCheck(
        r.checks,
        'cel.replay',
        fail(
          'cel.replay',
          'DEPENDENCY_FAILED',
          'the CC event log did not replay: the RTMR start values are unknown',
        ),
      );
    } else if (e.ccel === undefined && c.replay?.rtmrsCovered.length) {
      r.notes.push(
        'The CEL was replayed from zero RTMRs: give the CC event log (--ccel) when firmware also extends them.',
      );
    }
  }
}

function run(input: Omit<TdxInput, 'trustStore' | 'at' | 'referenceValues'>, ctx: KindContext): KindResult {
  return runQuote(input, ctx).result;
}

function runQuote(
  input: Omit<TdxInput, 'trustStore' | 'at' | 'referenceValues'>,
  ctx: KindContext,
): { result: KindResult; quote?: TdxQuote } {
  const r = verifyTdxQuote({ ...input, ...teeContextInput(ctx) });
  const result = { checks: r.checks, anchors: r.anchors, notes: [...r.notes], fields: tdxFields(r.quote) };
  return r.quote ? { result, quote: r.quote } : { result };
}

function fromClaim(ev: ClaimEvidence, expectedReportData: Buffer | null, ctx: KindContext): KindResult {
  return teeClaim(
    ev.provider,
    tryB64u(ev.tdx?.quote ?? ''),
    expectedReportData,
    { id: 'tdx.quote_parse', field: 'quote' },
    (quote, expected) => run({ quote, expectedReportData: expected }, ctx),
  );
}

/** The TDX evidence kind. */
export const TDX_KIND: EvidenceKind<RawTdxEvidence> = {
  tee: 'tdx',
  inClaim: (ev) => ev.provider === 'tdx' && ev.tdx !== undefined,
  fromClaim,
  fromRaw: (e, ctx) => {
    const { trustStore: _t, referenceValues: _r, now: _n, ccel: _c, ccelTable: _ct, cel: _l, ...input } = e;
    const { result, quote } = runQuote(input, ctx);
    eventLogChecks(e, result, quote);
    return result;
  },
};
