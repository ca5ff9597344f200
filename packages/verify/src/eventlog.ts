/**
 * TCG2 crypto-agile event logs (TCG PC Client Platform Firmware Profile, §10): strict parsing
 * and replay per PCR bank, for relying parties that compare a boot log with quoted PCRs.
 *
 * Layout (all integers little-endian):
 *  - the first event is a SHA-1-format TCG_PCClientPCREvent (pcrIndex u32, eventType u32,
 *    digest[20], eventSize u32, event) with pcrIndex 0, type EV_NO_ACTION, a zero digest and
 *    the TCG_EfiSpecIdEvent "Spec ID Event03" (platformClass u32, specVersionMinor/Major u8,
 *    errata u8, uintnSize u8, numberOfAlgorithms u32, {algorithmId u16, digestSize u16}[],
 *    vendorInfoSize u8, vendorInfo) filling the event data exactly;
 *  - every later event is a TCG_PCR_EVENT2 (pcrIndex u32, eventType u32, TPML_DIGEST_VALUES
 *    {count u32, {hashAlg u16, digest[size from the header]}[]}, eventSize u32, event).
 *
 * The parser consumes the whole input: a declared size that runs past the end is
 * `EVENTLOG_TRUNCATED`; anything inconsistent (wrong header, digest algorithm not in the header
 * or repeated or missing, PCR index ≥ 24, a misplaced StartupLocality event, sizes out of range)
 * is `EVENTLOG_MALFORMED`. There is no silent early stop.
 *
 * Replay: every bank starts at zero, except PCR 0 whose initial value is 0…0‖locality when a
 * StartupLocality EV_NO_ACTION event precedes its first extend (PFP §10.4.5.3); for every event
 * that is not EV_NO_ACTION, PCR[i] = H(PCR[i] ‖ digest) in each bank.
 *
 * Part of the verifier wing: imports only node built-ins and sibling verifier modules.
 */
import { createHash } from 'node:crypto';
import { type CheckResult, check, type EventLogSummary, fail, pass, type ReasonCode } from './result.js';
import { type PcrValue, TPM_ALG } from './tpm.js';

/** EV_NO_ACTION (PFP §10.4.1): not extended into any PCR. */
export const EV_NO_ACTION = 0x00000003;
/** Number of PCRs of a PC Client TPM. */
const PCR_COUNT = 24;
const SPEC_ID_SIGNATURE = Buffer.from('Spec ID Event03\0', 'latin1');
const STARTUP_LOCALITY_SIGNATURE = Buffer.from('StartupLocality\0', 'latin1');
/** Sanity bounds (a firmware log is at most a few MiB; HASH_COUNT is small). */
const MAX_ALGORITHMS = 16;
const MAX_EVENT_DATA = 16 * 1024 * 1024;

/** Banks this verifier replays (node:crypto hash name and digest size). */
export const EVENTLOG_BANKS: Readonly<Record<number, { name: string; size: number }>> = {
  [TPM_ALG.SHA1]: { name: 'sha1', size: 20 },
  [TPM_ALG.SHA256]: { name: 'sha256', size: 32 },
  [TPM_ALG.SHA384]: { name: 'sha384', size: 48 },
  [TPM_ALG.SHA512]: { name: 'sha512', size: 64 },
};
/** Digest sizes of other algorithms a log may declare (parsed, not replayed). */
const OTHER_SIZES: Readonly<Record<number, number>> = {
  [TPM_ALG.SM3_256]: 32,
  [TPM_ALG.SHA3_256]: 32,
  [TPM_ALG.SHA3_384]: 48,
  41: 64, // TPM_ALG_SHA3_512
};

/** A parse failure with a stable reason code and the byte offset where it was found. */
export class EventLogError extends Error {
  constructor(
    readonly code: Extract<ReasonCode, 'EVENTLOG_TRUNCATED' | 'EVENTLOG_MALFORMED'>,
    readonly offset: number,
    message: string,
  ) {
    super(`${message} (at byte ${offset})`);
    this.name = 'EventLogError';
  }
}

/** One digest algorithm the header declares. */
export interface EventLogAlgorithm {
  algId: number;
  digestSize: number;
}

/** One event of the log (the header event is index 0). */
export interface EventLogEvent {
  /** 0-based position in the log (the Spec ID header is 0). */
  index: number;
  /** Byte offset of the event in the log. */
  offset: number;
  pcr: number;
  type: number;
  /** Digest per TPM_ALG_ID (the header event has only a SHA-1-sized zero digest). */
  digests: Map<number, Buffer>;
  data: Buffer;
}

/** A parsed crypto-agile event log. */
export interface EventLog {
  platformClass: number;
  specVersion: { major: number; minor: number; errata: number };
  uintnSize: number;
  algorithms: EventLogAlgorithm[];
  vendorInfo: Buffer;
  /** All events, the Spec ID header first. */
  events: EventLogEvent[];
  /** Locality of the StartupLocality event, or null when there is none. */
  startupLocality: number | null;
}

class Reader {
  off = 0;
  constructor(readonly buf: Buffer) {}
  get left(): number {
    return this.buf.length - this.off;
  }
  need(n: number, what: string): void {
    if (n > this.left) {
      throw new EventLogError(
        'EVENTLOG_TRUNCATED',
        this.off,
        `${what} needs ${n} byte(s), ${this.left} remain (size insufficient)`,
      );
    }
  }
  u8(what: string): number {
    this.need(1, what);
    return this.buf.readUInt8(this.off++);
  }
  u16(what: string): number {
    this.need(2, what);
    const v = this.buf.readUInt16LE(this.off);
    this.off += 2;
    return v;
  }
  u32(what: string): number {
    this.need(4, what);
    const v = this.buf.readUInt32LE(this.off);
    this.off += 4;
    return v;
  }
  bytes(n: number, what: string): Buffer {
    this.need(n, what);
    const b = Buffer.from(this.buf.subarray(this.off, this.off + n));
    this.off += n;
    return b;
  }
}

const hex8 = (v: number) => `0x${v.toString(16).padStart(8, '0')}`;
const hex4 = (v: number) => `0x${v.toString(16).padStart(4, '0')}`;

function parseSpecId(data: Buffer, base: number): Omit<EventLog, 'events' | 'startupLocality'> {
  const r = new Reader(data);
  const bad = (msg: string) => new EventLogError('EVENTLOG_MALFORMED', base + r.off, msg);
  const sig = r.bytes(16, 'Spec ID signature');
  if (!sig.equals(SPEC_ID_SIGNATURE)) {
    throw new EventLogError(
      'EVENTLOG_MALFORMED',
      base,
      'the first event is not "Spec ID Event03": not a crypto-agile (TCG2) log',
    );
  }
  const platformClass = r.u32('platformClass');
  const minor = r.u8('specVersionMinor');
  const major = r.u8('specVersionMajor');
  const errata = r.u8('specErrata');
  const uintnSize = r.u8('uintnSize');
  if (major !== 2) throw bad(`Spec ID specVersionMajor is ${major}, not 2`);
  if (uintnSize !== 1 && uintnSize !== 2) throw bad(`Spec ID uintnSize is ${uintnSize}, not 1 or 2`);
  const n = r.u32('numberOfAlgorithms');
  if (n < 1 || n > MAX_ALGORITHMS)
    throw bad(`Spec ID numberOfAlgorithms ${n} is not in 1..${MAX_ALGORITHMS}`);
  const algorithms: EventLogAlgorithm[] = [];
  for (let i = 0; i < n; i++) {
    const algId = r.u16('algorithmId');
    const digestSize = r.u16('digestSize');
    const known = EVENTLOG_BANKS[algId]?.size ?? OTHER_SIZES[algId];
    if (known !== undefined && known !== digestSize) {
      throw bad(`Spec ID declares ${hex4(algId)} with ${digestSize} bytes, not ${known}`);
    }
    if (digestSize === 0 || digestSize > 128) throw bad(`Spec ID digest size ${digestSize} is out of range`);
    if (algorithms.some((a) => a.algId === algId)) throw bad(`Spec ID lists ${hex4(algId)} twice`);
    algorithms.push({ algId, digestSize });
  }
  const vendorSize = r.u8('vendorInfoSize');
  const vendorInfo = r.bytes(vendorSize, 'vendorInfo');
  if (r.left !== 0) throw bad(`${r.left} byte(s) follow the Spec ID vendorInfo inside the event`);
  return {
    platformClass,
    specVersion: { major, minor, errata },
    uintnSize,
    algorithms,
    vendorInfo,
  };
}

/**
 * Parses a crypto-agile event log (as Linux exposes `binary_bios_measurements`).
 * @throws EventLogError EVENTLOG_TRUNCATED / EVENTLOG_MALFORMED
 */
export function parseEventLog(bytes: Uint8Array): EventLog {
  const r = new Reader(Buffer.from(bytes.buffer, bytes.byteOffset, bytes.byteLength));
  if (r.left === 0) throw new EventLogError('EVENTLOG_TRUNCATED', 0, 'the event log is empty');
  // header: TCG_PCClientPCREvent
  const pcr0 = r.u32('header pcrIndex');
  const type0 = r.u32('header eventType');
  const digest0 = r.bytes(20, 'header digest');
  const size0 = r.u32('header eventSize');
  if (pcr0 !== 0 || type0 !== EV_NO_ACTION || !digest0.equals(Buffer.alloc(20))) {
    throw new EventLogError(
      'EVENTLOG_MALFORMED',
      0,
      `the first event (PCR ${pcr0}, type ${hex8(type0)}) is not the EV_NO_ACTION Spec ID header`,
    );
  }
  if (size0 > MAX_EVENT_DATA)
    throw new EventLogError('EVENTLOG_MALFORMED', r.off - 4, 'header eventSize too large');
  const dataOffset = r.off;
  const data0 = r.bytes(size0, 'header event data');
  const header = parseSpecId(data0, dataOffset);
  const sizes = new Map(header.algorithms.map((a) => [a.algId, a.digestSize]));
  const events: EventLogEvent[] = [
    {
      index: 0,
      offset: 0,
      pcr: 0,
      type: EV_NO_ACTION,
      digests: new Map([[TPM_ALG.SHA1, digest0]]),
      data: data0,
    },
  ];
  let startupLocality: number | null = null;
  let pcr0Extended = false;
  while (r.left > 0) {
    const offset = r.off;
    const index = events.length;
    const bad = (msg: string) => new EventLogError('EVENTLOG_MALFORMED', offset, `event ${index}: ${msg}`);
    const pcr = r.u32('pcrIndex');
    const type = r.u32('eventType');
    const count = r.u32('digest count');
    if (pcr >= PCR_COUNT) throw bad(`PCR index ${pcr} is not below ${PCR_COUNT}`);
    if (count !== header.algorithms.length) {
      throw bad(`carries ${count} digest(s), the header declares ${header.algorithms.length} algorithm(s)`);
    }
    const digests = new Map<number, Buffer>();
    for (let i = 0; i < count; i++) {
      const alg = r.u16('digest hashAlg');
      const size = sizes.get(alg);
      if (size === undefined) throw bad(`digest algorithm ${hex4(alg)} is not declared in the header`);
      if (digests.has(alg)) throw bad(`digest algorithm ${hex4(alg)} appears twice`);
      digests.set(alg, r.bytes(size, `${hex4(alg)} digest`));
    }
    const size = r.u32('eventSize');
    if (size > MAX_EVENT_DATA) throw bad(`eventSize ${size} is too large`);
    const data = r.bytes(size, 'event data');
    if (type === EV_NO_ACTION) {
      if (data.length >= 16 && data.subarray(0, 16).equals(STARTUP_LOCALITY_SIGNATURE)) {
        if (data.length !== 17) throw bad('StartupLocality event data is not 17 bytes');
        if (pcr !== 0) throw bad(`StartupLocality event is for PCR ${pcr}, not 0`);
        if (startupLocality !== null) throw bad('a second StartupLocality event');
        if (pcr0Extended) throw bad('StartupLocality event after PCR 0 was extended');
        const locality = data[16] as number;
        if (locality > 4) throw bad(`StartupLocality locality ${locality} is not 0..4`);
        startupLocality = locality;
      }
    } else if (pcr === 0) pcr0Extended = true;
    events.push({ index, offset, pcr, type, digests, data });
  }
  return { ...header, events, startupLocality };
}

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
      pcrs.set(e.pcr, createHash(bank.name).update(before).update(d).digest());
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
    const code = err instanceof EventLogError ? err.code : 'EVENTLOG_MALFORMED';
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
