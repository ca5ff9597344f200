/**
 * TCG2 crypto-agile event logs (TCG PC Client Platform Firmware Profile, §10 "Event Logging"):
 * strict parsing of what Linux exposes as `binary_bios_measurements`.
 *
 * Layout (all integers little-endian):
 *  - the first event is a SHA-1-format TCG_PCClientPCREvent (pcrIndex u32, eventType u32,
 *    digest[20], eventSize u32, event) with pcrIndex 0, type EV_NO_ACTION, a zero digest and
 *    the TCG_EfiSpecIdEvent "Spec ID Event03" (platformClass u32, specVersionMinor/Major u8,
 *    errata u8, uintnSize u8, numberOfAlgorithms u32, {algorithmId u16, digestSize u16}[],
 *    vendorInfoSize u8, vendorInfo) filling the event data exactly (PFP §10.4.5.1);
 *  - every later event is a TCG_PCR_EVENT2 (pcrIndex u32, eventType u32, TPML_DIGEST_VALUES
 *    {count u32, {hashAlg u16, digest[size from the header]}[]}, eventSize u32, event).
 *
 * The parser consumes the whole input: a declared size that runs past the end is
 * `EVENTLOG_TRUNCATED`; anything inconsistent (wrong header, digest algorithm not in the header
 * or repeated or missing, PCR index ≥ 24, a misplaced StartupLocality event (PFP §10.4.5.3),
 * sizes out of range) is `EVENTLOG_MALFORMED`. There is no silent early stop. Messages end
 * with `(at byte N)`.
 *
 * The TDX CC event log (CCEL; UEFI 2.10 §38.1) has the same layout, its index field holding a
 * CC MR index (UEFI 2.10 §38.4.1: 0 = MRTD, 1..4 = RTMR0..3); ./ccel.ts parses it through
 * {@link parseCryptoAgileLog} with its own profile (index bound, header index, 0xFF fill).
 */
import { AbiError, type AbiErrorCode } from '../errors.js';
import { ByteReader } from '../reader.js';
import { TPM_ALG, TPM_DIGEST_SIZE } from '../tpm/constants.js';

/** EV_NO_ACTION (PFP §10.4.1): not extended into any PCR. */
export const EV_NO_ACTION = 0x00000003;
/** Number of PCRs of a PC Client TPM. */
export const PCR_COUNT = 24;
const SPEC_ID_SIGNATURE = Buffer.from('Spec ID Event03\0', 'latin1');
const STARTUP_LOCALITY_SIGNATURE = Buffer.from('StartupLocality\0', 'latin1');
/** Sanity bounds (a firmware log is at most a few MiB; HASH_COUNT is small). */
const MAX_ALGORITHMS = 16;
const MAX_EVENT_DATA = 16 * 1024 * 1024;
const STRUCTURE = 'TCG2 event log';

/**
 * What differs between the logs that share the crypto-agile layout: the TPM's TCG2 log (PFP §10)
 * and the CC event log of a TDX guest (UEFI 2.10 §38.1, written by TDVF into the ACPI CCEL
 * area).
 */
export interface CryptoAgileProfile {
  /** Name in messages and AbiError.structure. */
  structure: string;
  truncated: AbiErrorCode;
  malformed: AbiErrorCode;
  /** What the index field is called in messages (`PCR`, `MR index`). */
  indexName: string;
  /** Indices must be below this. */
  indexLimit: number;
  /** Index values the Spec ID header event may carry. */
  headerIndices: readonly number[];
  /** Whether StartupLocality (PFP §10.4.5.3) is meaningful (TPM PCR 0 only). */
  startupLocality: boolean;
  /**
   * Whether the input may end in unused log area filled with 0xFF (the ACPI CCEL area is
   * reserved at LAML bytes and initialised to 0xFF; events are appended from its start).
   */
  ffFill: boolean;
}

/** The TPM TCG2 log of PFP §10 (`binary_bios_measurements`). */
export const TCG2_PROFILE: CryptoAgileProfile = {
  structure: STRUCTURE,
  truncated: 'EVENTLOG_TRUNCATED',
  malformed: 'EVENTLOG_MALFORMED',
  indexName: 'PCR',
  indexLimit: PCR_COUNT,
  headerIndices: [0],
  startupLocality: true,
  ffFill: false,
};

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

const hex8 = (v: number) => `0x${v.toString(16).padStart(8, '0')}`;
/** `0x000b`: a TPM_ALG_ID as the log's messages print it. */
export const hex4 = (v: number) => `0x${v.toString(16).padStart(4, '0')}`;

function malformedIn(p: CryptoAgileProfile, offset: number, message: string): AbiError {
  return new AbiError(p.malformed, `${message} (at byte ${offset})`, p.structure, null, offset);
}

function reader(p: CryptoAgileProfile, bytes: Uint8Array, base = 0): ByteReader {
  return new ByteReader(bytes, {
    structure: p.structure,
    littleEndian: true,
    base,
    truncated: p.truncated,
    malformed: p.malformed,
    trailing: p.malformed,
    truncatedMessage: (field, n, off, left) =>
      `${field} needs ${n} byte(s), ${left} remain (size insufficient) (at byte ${off})`,
  });
}

function parseSpecId(
  p: CryptoAgileProfile,
  data: Buffer,
  base: number,
): Omit<EventLog, 'events' | 'startupLocality'> {
  const r = reader(p, data, base);
  const bad = (msg: string) => malformedIn(p, r.absolute, msg);
  const sig = r.bytes(16, 'Spec ID signature');
  if (!sig.equals(SPEC_ID_SIGNATURE)) {
    throw malformedIn(p, base, 'the first event is not "Spec ID Event03": not a crypto-agile (TCG2) log');
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
    const known = TPM_DIGEST_SIZE[algId];
    if (known !== undefined && known !== digestSize) {
      throw bad(`Spec ID declares ${hex4(algId)} with ${digestSize} bytes, not ${known}`);
    }
    if (digestSize === 0 || digestSize > 128) throw bad(`Spec ID digest size ${digestSize} is out of range`);
    if (algorithms.some((a) => a.algId === algId)) throw bad(`Spec ID lists ${hex4(algId)} twice`);
    algorithms.push({ algId, digestSize });
  }
  const vendorSize = r.u8('vendorInfoSize');
  const vendorInfo = r.bytes(vendorSize, 'vendorInfo');
  if (r.remaining !== 0) throw bad(`${r.remaining} byte(s) follow the Spec ID vendorInfo inside the event`);
  return { platformClass, specVersion: { major, minor, errata }, uintnSize, algorithms, vendorInfo };
}

/** StartupLocality (PFP §10.4.5.3) bookkeeping while events are read. */
interface LocalityState {
  startupLocality: number | null;
  pcr0Extended: boolean;
}

function noteStartupLocality(
  s: LocalityState,
  pcr: number,
  data: Buffer,
  bad: (m: string) => AbiError,
): void {
  if (data.length < 16 || !data.subarray(0, 16).equals(STARTUP_LOCALITY_SIGNATURE)) return;
  if (data.length !== 17) throw bad('StartupLocality event data is not 17 bytes');
  if (pcr !== 0) throw bad(`StartupLocality event is for PCR ${pcr}, not 0`);
  if (s.startupLocality !== null) throw bad('a second StartupLocality event');
  if (s.pcr0Extended) throw bad('StartupLocality event after PCR 0 was extended');
  const locality = data[16] as number;
  if (locality > 4) throw bad(`StartupLocality locality ${locality} is not 0..4`);
  s.startupLocality = locality;
}

/** Reads one TCG_PCR_EVENT2. */
function readEvent2(
  p: CryptoAgileProfile,
  r: ByteReader,
  index: number,
  sizes: Map<number, number>,
  s: LocalityState,
): EventLogEvent {
  const offset = r.offset;
  const bad = (msg: string) => malformedIn(p, offset, `event ${index}: ${msg}`);
  const pcr = r.u32('pcrIndex');
  const type = r.u32('eventType');
  const count = r.u32('digest count');
  if (pcr >= p.indexLimit) throw bad(`${p.indexName} ${pcr} is not below ${p.indexLimit}`);
  if (count !== sizes.size) {
    throw bad(`carries ${count} digest(s), the header declares ${sizes.size} algorithm(s)`);
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
  if (!p.startupLocality) return { index, offset, pcr, type, digests, data };
  if (type === EV_NO_ACTION) noteStartupLocality(s, pcr, data, bad);
  else if (pcr === 0) s.pcr0Extended = true;
  return { index, offset, pcr, type, digests, data };
}

/** True when every byte from `from` to the end is 0xFF (unused CCEL log area). */
function onlyFill(bytes: Uint8Array, from: number): boolean {
  for (let i = from; i < bytes.length; i++) if (bytes[i] !== 0xff) return false;
  return true;
}

/**
 * Parses a crypto-agile event log (see the module comment).
 * @throws AbiError EVENTLOG_TRUNCATED / EVENTLOG_MALFORMED (`offset` = the byte where it failed)
 */
export function parseEventLog(bytes: Uint8Array): EventLog {
  return parseCryptoAgileLog(bytes, TCG2_PROFILE);
}

/**
 * Parses a log in the crypto-agile layout (PFP §10.2: the SHA-1-format Spec ID Event03 header,
 * then TCG_PCR_EVENT2 records) under `profile`'s rules. The header is checked field by field so
 * the refusal names the field that is wrong (its index, its type or its digest).
 * @throws AbiError with the profile's truncated / malformed code
 */
export function parseCryptoAgileLog(bytes: Uint8Array, profile: CryptoAgileProfile): EventLog {
  const p = profile;
  const r = reader(p, bytes);
  if (r.remaining === 0) {
    throw new AbiError(p.truncated, 'the event log is empty (at byte 0)', p.structure, null, 0);
  }
  // header: TCG_PCClientPCREvent
  const pcr0 = r.u32('header pcrIndex');
  const type0 = r.u32('header eventType');
  const digest0 = r.bytes(20, 'header digest');
  const size0 = r.u32('header eventSize');
  if (type0 !== EV_NO_ACTION) {
    throw malformedIn(p, 4, `the first event has type ${hex8(type0)}, not EV_NO_ACTION (the Spec ID header)`);
  }
  if (!p.headerIndices.includes(pcr0)) {
    const hint =
      p === TCG2_PROFILE && pcr0 === 1
        ? ' (a CC event log, whose header carries MR index 1? verify it as a CCEL log)'
        : '';
    throw malformedIn(
      p,
      0,
      `the first event (EV_NO_ACTION) has ${p.indexName} ${pcr0}, not ${p.headerIndices.join(' or ')}${hint}`,
    );
  }
  if (!digest0.equals(Buffer.alloc(20))) {
    throw malformedIn(p, 8, 'the first event (EV_NO_ACTION Spec ID header) has a non-zero digest');
  }
  if (size0 > MAX_EVENT_DATA) throw malformedIn(p, r.offset - 4, 'header eventSize too large');
  const dataOffset = r.offset;
  const data0 = r.bytes(size0, 'header event data');
  const header = parseSpecId(p, data0, dataOffset);
  const sizes = new Map(header.algorithms.map((a) => [a.algId, a.digestSize]));
  const events: EventLogEvent[] = [
    {
      index: 0,
      offset: 0,
      pcr: pcr0,
      type: EV_NO_ACTION,
      digests: new Map([[TPM_ALG.SHA1, digest0]]),
      data: data0,
    },
  ];
  const state: LocalityState = { startupLocality: null, pcr0Extended: false };
  while (r.remaining > 0) {
    if (p.ffFill && onlyFill(bytes, r.offset)) break;
    events.push(readEvent2(p, r, events.length, sizes, state));
  }
  return { ...header, events, startupLocality: state.startupLocality };
}
