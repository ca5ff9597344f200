/**
 * TCG2 event-log replay and checks, for relying parties that compare a boot log with quoted
 * PCRs. The log is parsed by abi/eventlog (TCG PC Client Platform Firmware Profile §10).
 *
 * Replay: every bank starts at zero, except PCR 0 whose initial value is 0…0‖locality when a
 * StartupLocality EV_NO_ACTION event precedes its first extend (PFP §10.4.5.3); for every event
 * that is not EV_NO_ACTION, PCR[i] = H(PCR[i] ‖ digest) in each bank.
 */
import { AbiError } from './abi/errors.js';
import { EV_NO_ACTION, type EventLog, hex4, parseEventLog } from './abi/eventlog/tcg2.js';
import { TPM_ALG } from './abi/tpm/constants.js';
import { digest, type HashName } from './crypto/hash.js';
import { type CheckResult, check, type EventLogSummary, fail, pass } from './result.js';
import type { PcrValue } from './tpm/pcr.js';

export {
  EV_NO_ACTION,
  type EventLog,
  type EventLogAlgorithm,
  type EventLogEvent,
  parseEventLog,
} from './abi/eventlog/tcg2.js';

/** Banks this verifier replays (hash name and digest size). */
export const EVENTLOG_BANKS: Readonly<Record<number, { name: HashName; size: number }>> = {
  [TPM_ALG.SHA1]: { name: 'sha1', size: 20 },
  [TPM_ALG.SHA256]: { name: 'sha256', size: 32 },
  [TPM_ALG.SHA384]: { name: 'sha384', size: 48 },
  [TPM_ALG.SHA512]: { name: 'sha512', size: 64 },
};

/** Replayed PCR values of one bank: PCR index → value (only PCRs the log touches). */
export type ReplayedBank = Map<number, Buffer>;

/** Result of {@link replayEventLog}. */
export interface EventLogReplay {
  /** Per replayed bank (TPM_ALG_ID): the final PCR values. */
  banks: Map<number, ReplayedBank>;
  /** PCRs the log covers: extended at least once (or PCR 0 with a StartupLocality event). */
  covered: number[];
  /** Algorithms declared by the header that this verifier cannot replay. */
  unreplayed: number[];
}

/** Replays every non-EV_NO_ACTION event into each bank, from zero (PFP §10.4.5.3 for PCR 0). */
export function replayEventLog(log: EventLog): EventLogReplay {
  const banks = new Map<number, ReplayedBank>();
  const unreplayed: number[] = [];
  const covered = new Set<number>();
  for (const a of log.algorithms) {
    const bank = EVENTLOG_BANKS[a.algId];
    if (!bank) {
      unreplayed.push(a.algId);
      continue;
    }
    const pcrs: ReplayedBank = new Map();
    const initial = (i: number): Buffer => {
      const b = Buffer.alloc(bank.size);
      if (i === 0 && log.startupLocality !== null) b[bank.size - 1] = log.startupLocality;
      return b;
    };
    if (log.startupLocality !== null) pcrs.set(0, initial(0));
    for (const e of log.events.slice(1)) {
      if (e.type === EV_NO_ACTION) continue;
      const d = e.digests.get(a.algId) as Buffer;
      const before = pcrs.get(e.pcr) ?? initial(e.pcr);
      pcrs.set(e.pcr, digest(bank.name, before, d));
    }
    banks.set(a.algId, pcrs);
  }
  if (log.startupLocality !== null) covered.add(0);
  for (const e of log.events.slice(1)) if (e.type !== EV_NO_ACTION) covered.add(e.pcr);
  return { banks, covered: [...covered].sort((x, y) => x - y), unreplayed };
}

/** Bank name for a TPM_ALG_ID (`sha256`), or its hex id. */
export function bankName(algId: number): string {
  return EVENTLOG_BANKS[algId]?.name ?? hex4(algId);
}

/** The summary of a parsed and replayed log. */
export function summarizeEventLog(log: EventLog, replay: EventLogReplay): EventLogSummary {
  const pcrs: Record<string, Record<string, string>> = {};
  for (const [alg, bank] of replay.banks) {
    const out: Record<string, string> = {};
    for (const i of [...bank.keys()].sort((x, y) => x - y))
      out[String(i)] = (bank.get(i) as Buffer).toString('hex');
    pcrs[bankName(alg)] = out;
  }
  return {
    events: log.events.length,
    algorithms: log.algorithms.map((a) => ({ alg: bankName(a.algId), digest_size: a.digestSize })),
    startup_locality: log.startupLocality,
    covered_pcrs: replay.covered,
    pcrs,
  };
}

/** Input of {@link verifyEventLog}. */
export interface EventLogCheckInput {
  log: Uint8Array;
  /** PCR values that came with a quote; undefined ⇒ `eventlog.pcrs` is not-applicable. */
  pcrValues?: readonly PcrValue[];
  /** Whether those values are the quoted ones (`tpm.pcr_digest` passed). */
  pcrValuesQuoted?: boolean;
}

/**
 * Checks (ids stable): `eventlog.parse` (strict parse: EVENTLOG_TRUNCATED / EVENTLOG_MALFORMED)
 * and `eventlog.pcrs`: for every supplied PCR value of a PCR the log covers, the value replayed
 * in the same bank must be equal (EVENTLOG_PCR_MISMATCH; EVENTLOG_BANK_MISSING when the log has
 * no such bank); equal values pass only when they are the quoted ones. Never throws.
 */
export function verifyEventLog(input: EventLogCheckInput): {
  checks: CheckResult[];
  summary?: EventLogSummary;
  notes: string[];
} {
  const checks: CheckResult[] = [];
  const notes: string[] = [];
  let log: EventLog;
  let replay: EventLogReplay;
  try {
    log = parseEventLog(input.log);
    replay = replayEventLog(log);
  } catch (err) {
    const code = err instanceof AbiError ? err.code : 'EVENTLOG_MALFORMED';
    checks.push(fail('eventlog.parse', code, (err as Error).message.slice(0, 200)));
    checks.push(
      input.pcrValues
        ? fail('eventlog.pcrs', 'DEPENDENCY_FAILED', 'the event log did not parse')
        : check('eventlog.pcrs', 'not-applicable', 'NOT_SUPPLIED', 'no quoted PCR values to compare'),
    );
    return { checks, notes };
  }
  const summary = summarizeEventLog(log, replay);
  checks.push(
    pass(
      'eventlog.parse',
      `${log.events.length} events (Spec ID Event03; ${summary.algorithms.map((a) => `${a.alg}/${a.digest_size}`).join(', ')}); PCRs ${replay.covered.join(', ') || 'none'} covered${log.startupLocality === null ? '' : `; StartupLocality ${log.startupLocality}`}`,
    ),
  );
  if (replay.unreplayed.length) {
    notes.push(
      `The event log declares algorithm(s) ${replay.unreplayed.map(hex4).join(', ')} that were not replayed.`,
    );
  }
  if (!input.pcrValues) {
    checks.push(check('eventlog.pcrs', 'not-applicable', 'NOT_SUPPLIED', 'no quoted PCR values to compare'));
    notes.push(
      'The event log was replayed but not compared with quoted PCRs: nothing signs an event log by itself.',
    );
    return { checks, summary, notes };
  }
  const covered = new Set(replay.covered);
  const compared: string[] = [];
  const uncovered: number[] = [];
  const mismatched: string[] = [];
  const missingBanks = new Set<string>();
  for (const v of input.pcrValues) {
    if (!covered.has(v.index)) {
      uncovered.push(v.index);
      continue;
    }
    const bank = replay.banks.get(v.hashAlg);
    const label = `${bankName(v.hashAlg)}:${v.index}`;
    if (!bank) {
      missingBanks.add(bankName(v.hashAlg));
      continue;
    }
    const want = bank.get(v.index) ?? Buffer.alloc(EVENTLOG_BANKS[v.hashAlg]?.size ?? 0);
    if (Buffer.from(v.value).equals(want)) compared.push(label);
    else mismatched.push(label);
  }
  const tail = uncovered.length ? `; PCR ${[...new Set(uncovered)].join(', ')} not covered by the log` : '';
  if (missingBanks.size) {
    checks.push(
      fail(
        'eventlog.pcrs',
        'EVENTLOG_BANK_MISSING',
        `the log has no ${[...missingBanks].join(', ')} bank to replay for the quoted PCRs`,
      ),
    );
  } else if (mismatched.length) {
    checks.push(
      fail(
        'eventlog.pcrs',
        'EVENTLOG_PCR_MISMATCH',
        `replayed ${mismatched.join(', ')} differ from the quoted value(s)${tail}`,
      ),
    );
  } else if (!compared.length) {
    checks.push(
      check(
        'eventlog.pcrs',
        'not-applicable',
        'NOT_SUPPLIED',
        `no quoted PCR is covered by the log (log covers ${replay.covered.join(', ') || 'none'})${tail}`,
      ),
    );
  } else if (input.pcrValuesQuoted === false) {
    checks.push(
      fail(
        'eventlog.pcrs',
        'DEPENDENCY_FAILED',
        'the replay matches PCR values that are not the quoted ones',
      ),
    );
  } else {
    checks.push(pass('eventlog.pcrs', `replayed ${compared.join(', ')} equal the quoted values${tail}`));
  }
  return { checks, summary, notes };
}
