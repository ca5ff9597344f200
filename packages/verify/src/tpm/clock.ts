/**
 * Rollback across quotes: TPMS_CLOCK_INFO (TPM 2.0 Part 2 §10.11.1) of this quote against an
 * earlier quote by the same AK. Within one TPM reset (resetCount) and restart (restartCount)
 * `clock` only moves forward; resetCount and restartCount never decrease (Part 1 §36.2 "Clock",
 * §36.4 resetCount/restartCount). A lower resetCount, a lower restartCount within one reset, or a
 * lower clock within one reset and restart is a rollback (state restored, or a replayed quote
 * presented as newer). `safe = 0` (the clock may have been reported lower than a value the TPM
 * already reported) and a changed firmwareVersion are reported, not refused.
 *
 * A rollback needs the order in which the two quotes were taken. A `--previous-quote` is taken
 * as earlier by the relying party's word. A previous claim's is earlier only when this session
 * opened after that claim was issued (the preimage's `opened_after_claim`, bound in this quote):
 * claims are numbered in close order and their quotes are taken at session open, so otherwise
 * the previous claim's quote is later than this one whenever the sessions overlapped, and a
 * quote before it is `not-applicable` (QUOTE_ORDER_UNKNOWN), never a rollback.
 */
import { parseTpmsAttest, type TpmsAttestQuote } from '../abi/tpm/attest.js';
import { type CheckResult, check, fail, pass } from '../result.js';

const ID = 'tpm.clock';

function describe(a: TpmsAttestQuote): string {
  const c = a.clockInfo;
  return `clock ${c.clock} ms, resetCount ${c.resetCount}, restartCount ${c.restartCount}, safe ${c.safe ? 1 : 0}`;
}

/**
 * How `previous` is known to relate to this quote in time:
 * - `earlier`: taken before this quote (a relying party's `--previous-quote`, or the previous
 *   claim's quote when this session opened after that claim was issued);
 * - `close-order`: the quote of the claim closed before this one, taken at that session's open,
 *   which may be before or after this quote (overlapping sessions).
 */
export type PreviousQuoteOrder = 'earlier' | 'close-order';

/**
 * `tpm.clock`: compares this quote's TPMS_CLOCK_INFO (TPM 2.0 Part 2 §10.11.1) with `previous`
 * (TPMS_ATTEST bytes of another quote by the same AK); pushes the `safe = 0` and firmwareVersion
 * notes to `notes`. `order` says whether `previous` is known to be the earlier quote.
 * - no previous: `not-applicable` (NO_PREVIOUS_QUOTE), the clock info in the detail;
 * - previous does not parse: `fail` PREVIOUS_QUOTE_MALFORMED;
 * - previous is by another signer: a relying party's quote, `fail` PREVIOUS_QUOTE_OTHER_SIGNER; a
 *   previous claim's (`fromClaim`: another replica's TPM, or a recreated AK), `not-applicable`
 *   with that reason — nothing to compare, nothing wrong;
 * - before `previous`: with `earlier`, `fail` TPM_CLOCK_ROLLBACK; with `close-order`,
 *   `not-applicable` QUOTE_ORDER_UNKNOWN (an overlapping session or a rollback: claims in close
 *   order do not say which);
 * - otherwise `pass`.
 */
export function clockCheck(
  current: TpmsAttestQuote | undefined,
  previous: Uint8Array | undefined,
  notes: string[],
  order: PreviousQuoteOrder = 'earlier',
  fromClaim = false,
): CheckResult {
  if (!current) return fail(ID, 'DEPENDENCY_FAILED', 'TPMS_ATTEST did not parse');
  if (!current.clockInfo.safe) {
    notes.push(
      `TPMS_CLOCK_INFO.safe = 0: the TPM clock may have been reported lower than a value it reported before (${describe(current)}).`,
    );
  }
  if (previous === undefined) {
    return check(
      ID,
      'not-applicable',
      'NO_PREVIOUS_QUOTE',
      `${describe(current)}; no previous quote to compare`,
    );
  }
  let prev: TpmsAttestQuote;
  try {
    prev = parseTpmsAttest(previous);
  } catch (err) {
    return fail(
      ID,
      'PREVIOUS_QUOTE_MALFORMED',
      `the previous quote does not parse (${(err as Error).message.slice(0, 80)})`,
    );
  }
  if (!prev.qualifiedSigner.equals(current.qualifiedSigner)) {
    if (fromClaim) {
      return check(
        ID,
        'not-applicable',
        'PREVIOUS_QUOTE_OTHER_SIGNER',
        "the previous claim's quote is by another AK (another replica's TPM, or a new AK): its clock says nothing of this one",
      );
    }
    return fail(
      ID,
      'PREVIOUS_QUOTE_OTHER_SIGNER',
      'the previous quote is by another key: its clock says nothing of this one',
    );
  }
  if (prev.firmwareVersion !== current.firmwareVersion) {
    notes.push(
      `TPM firmwareVersion changed since the previous quote: 0x${prev.firmwareVersion.toString(16)} → 0x${current.firmwareVersion.toString(16)}.`,
    );
  }
  const p = prev.clockInfo;
  const c = current.clockInfo;
  const was = `previous ${describe(prev)}`;
  const back =
    c.resetCount < p.resetCount
      ? 'resetCount went back'
      : c.resetCount === p.resetCount && c.restartCount < p.restartCount
        ? 'restartCount went back within one reset'
        : c.resetCount === p.resetCount && c.restartCount === p.restartCount && c.clock < p.clock
          ? 'clock went back within one reset and restart'
          : null;
  if (back && order === 'close-order') {
    return check(
      ID,
      'not-applicable',
      'QUOTE_ORDER_UNKNOWN',
      `this quote is before the previous claim's (${describe(current)}; ${was}): the previous claim closed first, but this session opened before it was issued (opened_after_claim), so its session may have opened after this one; compare with --previous-quote, a quote known to be earlier`,
    );
  }
  if (back) return fail(ID, 'TPM_CLOCK_ROLLBACK', `${back}: ${describe(current)}; ${was}`);
  const how =
    c.resetCount > p.resetCount
      ? 'after a TPM reset'
      : c.restartCount > p.restartCount
        ? 'after a restart'
        : 'clock forward';
  return pass(ID, `${describe(current)}: not before the previous quote (${how}; ${was})`);
}
