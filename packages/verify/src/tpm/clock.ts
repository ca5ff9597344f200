/**
 * Rollback across quotes: TPMS_CLOCK_INFO (TPM 2.0 Part 2 §10.11.1) of this quote against an
 * earlier quote by the same AK. Within one TPM reset (resetCount) and restart (restartCount)
 * `clock` only moves forward; resetCount and restartCount never decrease (Part 1 §36.2 "Clock",
 * §36.4 resetCount/restartCount). A lower resetCount, a lower restartCount within one reset, or a
 * lower clock within one reset and restart is a rollback (state restored, or a replayed quote
 * presented as newer). `safe = 0` (the clock may have been reported lower than a value the TPM
 * already reported) and a changed firmwareVersion are reported, not refused.
 */
import { parseTpmsAttest, type TpmsAttestQuote } from '../abi/tpm/attest.js';
import { type CheckResult, check, fail, pass } from '../result.js';

const ID = 'tpm.clock';

function describe(a: TpmsAttestQuote): string {
  const c = a.clockInfo;
  return `clock ${c.clock} ms, resetCount ${c.resetCount}, restartCount ${c.restartCount}, safe ${c.safe ? 1 : 0}`;
}

/**
 * `tpm.clock`: compares this quote's TPMS_CLOCK_INFO with `previous` (TPMS_ATTEST bytes of an
 * earlier quote); pushes the `safe = 0` and firmwareVersion notes to `notes`.
 * - no previous: `not-applicable` (NO_PREVIOUS_QUOTE), the clock info in the detail;
 * - previous does not parse, or is by another signer: `fail` PREVIOUS_QUOTE_MALFORMED /
 *   PREVIOUS_QUOTE_OTHER_SIGNER;
 * - rollback: `fail` TPM_CLOCK_ROLLBACK; otherwise `pass`.
 */
export function clockCheck(
  current: TpmsAttestQuote | undefined,
  previous: Uint8Array | undefined,
  notes: string[],
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
  if (c.resetCount < p.resetCount) {
    return fail(ID, 'TPM_CLOCK_ROLLBACK', `resetCount went back: ${describe(current)}; ${was}`);
  }
  if (c.resetCount === p.resetCount && c.restartCount < p.restartCount) {
    return fail(
      ID,
      'TPM_CLOCK_ROLLBACK',
      `restartCount went back within one reset: ${describe(current)}; ${was}`,
    );
  }
  if (c.resetCount === p.resetCount && c.restartCount === p.restartCount && c.clock < p.clock) {
    return fail(
      ID,
      'TPM_CLOCK_ROLLBACK',
      `clock went back within one reset and restart: ${describe(current)}; ${was}`,
    );
  }
  const how =
    c.resetCount > p.resetCount
      ? 'after a TPM reset'
      : c.restartCount > p.restartCount
        ? 'after a restart'
        : 'clock forward';
  return pass(ID, `${describe(current)}: not before the previous quote (${how}; ${was})`);
}
