/**
 * TDX CC event log (CCEL) checks: the ACPI CCEL table, the log (abi/eventlog/ccel.ts) and its
 * replay into RTMR0..3, compared with the RTMRs of a TD quote.
 *
 * Replay (UEFI 2.10 §38.4.1; Intel TDX Module ABI, TDG.MR.RTMR.EXTEND): every RTMR starts at 48
 * zero bytes; for each event that is not EV_NO_ACTION and has CC MR index i in 1..4,
 * RTMR[i-1] = SHA-384(RTMR[i-1] ‖ SHA-384 digest of the event). MR index 0 is MRTD, which the TDX
 * module measures at build time; an extended event for it cannot be replayed and is refused.
 */
import { AbiError } from '../abi/errors.js';
import { type CcelTable, parseCcelLog, parseCcelTable } from '../abi/eventlog/ccel.js';
import { EV_NO_ACTION, type EventLog } from '../abi/eventlog/tcg2.js';
import { TPM_ALG } from '../abi/tpm/constants.js';
import { digest } from '../crypto/hash.js';
import { type CheckResult, check, fail, pass } from '../result.js';

/** RTMR size (SHA-384). */
export const RTMR_SIZE = 48;

/** Result of {@link replayCcel}. */
export interface CcelReplay {
  /** Replayed RTMR0..3. */
  rtmrs: [Buffer, Buffer, Buffer, Buffer];
  /** RTMR numbers (0..3) at least one event extended. */
  covered: number[];
  /** Events including the Spec ID header. */
  events: number;
}

/**
 * Replays a parsed CC event log into RTMR0..3 (see the module comment).
 * @throws AbiError CCEL_EVENT_MALFORMED when the log has no SHA-384 bank or extends MRTD
 */
export function replayCcel(log: EventLog): CcelReplay {
  if (!log.algorithms.some((a) => a.algId === TPM_ALG.SHA384)) {
    throw new AbiError(
      'CCEL_EVENT_MALFORMED',
      'the Spec ID header declares no SHA-384 digests: RTMRs cannot be replayed (at byte 0)',
      'CC event log',
      null,
      0,
    );
  }
  const rtmrs: [Buffer, Buffer, Buffer, Buffer] = [0, 1, 2, 3].map(() => Buffer.alloc(RTMR_SIZE)) as [
    Buffer,
    Buffer,
    Buffer,
    Buffer,
  ];
  const covered = new Set<number>();
  for (const e of log.events.slice(1)) {
    if (e.type === EV_NO_ACTION) continue;
    if (e.pcr === 0) {
      throw new AbiError(
        'CCEL_EVENT_MALFORMED',
        `event ${e.index}: extends MR index 0 (MRTD), which is not extended at run time (at byte ${e.offset})`,
        'CC event log',
        null,
        e.offset,
      );
    }
    const i = e.pcr - 1;
    rtmrs[i] = digest('sha384', rtmrs[i] as Buffer, e.digests.get(TPM_ALG.SHA384) as Buffer);
    covered.add(i);
  }
  return { rtmrs, covered: [...covered].sort((a, b) => a - b), events: log.events.length };
}

/** Input of {@link verifyCcel}. */
export interface CcelCheckInput {
  /** The log area (as /sys/firmware/acpi/tables/data/CCEL gives it, 0xFF fill included). */
  log: Uint8Array;
  /** The ACPI CCEL table (/sys/firmware/acpi/tables/CCEL); undefined ⇒ `ccel.table` not-applicable. */
  table?: Uint8Array;
  /** RTMR0..3 of the TD quote; undefined ⇒ `ccel.rtmrs` not-applicable. */
  rtmrs?: readonly Uint8Array[];
  /** Whether those RTMRs are covered by a verified quote signature. */
  rtmrsQuoted?: boolean;
  /**
   * RTMRs (0..3) extended after the firmware log by another log (the launcher's CEL): their
   * quoted value is compared by that log's check, starting from this replay.
   */
  extendedLater?: readonly number[];
}

/** Result of {@link verifyCcel}. */
export interface CcelCheckResult {
  checks: CheckResult[];
  table?: CcelTable;
  replay?: CcelReplay;
  notes: string[];
}

const rtmrList = (xs: readonly number[]) => xs.map((i) => `RTMR${i}`).join(', ');

function tableCheck(input: CcelCheckInput, out: CcelCheckResult): void {
  if (input.table === undefined) {
    out.checks.push(check('ccel.table', 'not-applicable', 'NOT_SUPPLIED', 'no ACPI CCEL table supplied'));
    return;
  }
  try {
    const t = parseCcelTable(input.table);
    out.table = t;
    if (BigInt(input.log.length) > t.laml) {
      out.checks.push(
        fail(
          'ccel.table',
          'CCEL_TABLE_MALFORMED',
          `the log is ${input.log.length} bytes, more than the table's LAML ${t.laml}`,
        ),
      );
      return;
    }
    out.checks.push(
      pass('ccel.table', `CCEL rev ${t.revision}, TDX, LAML ${t.laml}, LASA 0x${t.lasa.toString(16)}`),
    );
  } catch (err) {
    const code = err instanceof AbiError ? err.code : 'CCEL_TABLE_MALFORMED';
    out.checks.push(fail('ccel.table', code, (err as Error).message.slice(0, 200)));
  }
}

/**
 * Checks (ids stable): `ccel.table` (the ACPI table parses, is TDX, and its LAML holds the log:
 * CCEL_TABLE_MALFORMED), `ccel.parse` (CCEL_EVENT_TRUNCATED / CCEL_EVENT_MALFORMED) and
 * `ccel.rtmrs`: every RTMR the log extends (except those in `extendedLater`) must equal the
 * quoted RTMR (CCEL_RTMR_MISMATCH); equal values pass only when they are quoted. Never throws.
 */
export function verifyCcel(input: CcelCheckInput): CcelCheckResult {
  const out: CcelCheckResult = { checks: [], notes: [] };
  tableCheck(input, out);
  let replay: CcelReplay;
  try {
    replay = replayCcel(parseCcelLog(input.log));
  } catch (err) {
    const code = err instanceof AbiError ? err.code : 'CCEL_EVENT_MALFORMED';
    out.checks.push(fail('ccel.parse', code, (err as Error).message.slice(0, 200)));
    out.checks.push(
      input.rtmrs
        ? fail('ccel.rtmrs', 'DEPENDENCY_FAILED', 'the CC event log did not parse')
        : check('ccel.rtmrs', 'not-applicable', 'NOT_SUPPLIED', 'no quoted RTMRs to compare'),
    );
    return out;
  }
  out.replay = replay;
  out.checks.push(
    pass('ccel.parse', `${replay.events} events; ${rtmrList(replay.covered) || 'no RTMR'} extended`),
  );
  if (!input.rtmrs) {
    out.checks.push(check('ccel.rtmrs', 'not-applicable', 'NOT_SUPPLIED', 'no quoted RTMRs to compare'));
    out.notes.push(
      'The CC event log was replayed but not compared with a quote: nothing signs a log by itself.',
    );
    return out;
  }
  const later = new Set(input.extendedLater ?? []);
  const compare = replay.covered.filter((i) => !later.has(i));
  const uncovered = [0, 1, 2, 3].filter((i) => !replay.covered.includes(i) && !later.has(i));
  const mismatched = compare.filter(
    (i) => !Buffer.from(input.rtmrs?.[i] ?? []).equals(replay.rtmrs[i] as Buffer),
  );
  const tail = uncovered.length ? `; ${rtmrList(uncovered)} not extended by the log` : '';
  const unexplained = uncovered.filter((i) => Buffer.from(input.rtmrs?.[i] ?? []).some((b) => b !== 0));
  if (unexplained.length) {
    out.notes.push(
      `${rtmrList(unexplained)} ${unexplained.length > 1 ? 'are' : 'is'} not zero in the quote and no supplied log accounts for ${unexplained.length > 1 ? 'them' : 'it'} (give the launcher's CEL with --cel).`,
    );
  }
  if (mismatched.length) {
    out.checks.push(
      fail(
        'ccel.rtmrs',
        'CCEL_RTMR_MISMATCH',
        `replayed ${rtmrList(mismatched)} differ from the quote${tail}`,
      ),
    );
  } else if (!compare.length) {
    out.checks.push(check('ccel.rtmrs', 'not-applicable', 'NOT_SUPPLIED', `no RTMR to compare${tail}`));
  } else if (input.rtmrsQuoted === false) {
    out.checks.push(
      fail(
        'ccel.rtmrs',
        'DEPENDENCY_FAILED',
        'the replay matches RTMR values whose quote signature did not verify',
      ),
    );
  } else {
    out.checks.push(pass('ccel.rtmrs', `replayed ${rtmrList(compare)} equal the quote${tail}`));
  }
  return out;
}
