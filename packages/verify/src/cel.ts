/**
 * Canonical event log (CEL) checks: the TLV log (abi/eventlog/cel.ts) as Confidential Space's
 * launcher writes it, the digest of each record's content where the content type defines it,
 * and the replay into the registers the records name, compared with quoted values.
 *
 * Replay (TCG CEL v1.0 §4): records with a PCR index extend that PCR in each digest's bank,
 * PCR = H(PCR ‖ digest), from zero; records with a CC MR index i (1..4) extend RTMR[i-1] with
 * their SHA-384 digest, from the given start (the CC event log's replay, whose firmware events
 * precede the launcher's) or from zero.
 * Content digests: for Confidential Space content (type 80) the digest is the hash of the whole
 * content TLV (go-tpm-tools `cel/cos_tlv.go`); other content types are replayed but not
 * re-hashed here, and the report says how many.
 */
import { AbiError } from './abi/errors.js';
import { CEL_CONTENT_COS, CEL_TYPE, type CelRecord, parseCel } from './abi/eventlog/cel.js';
import { TPM_ALG } from './abi/tpm/constants.js';
import { digest, hashInfo } from './crypto/hash.js';
import { bankName } from './eventlog.js';
import { type CheckResult, check, fail, pass } from './result.js';
import type { PcrValue } from './tpm/pcr.js';

/** Result of {@link replayCel}. */
export interface CelReplay {
  /** RTMR0..3 after the CC MR records (the start values where no record extended them). */
  rtmrs: Buffer[];
  /** RTMR numbers (0..3) a record extended. */
  rtmrsCovered: number[];
  /** Per TPM_ALG_ID: PCR index → replayed value (only PCRs a record extended). */
  pcrs: Map<number, Map<number, Buffer>>;
}

/**
 * Replays CEL records (see the module comment).
 * @throws AbiError CEL_RECORD_MALFORMED when a CC MR record has no SHA-384 digest
 */
export function replayCel(records: readonly CelRecord[], rtmrStart?: readonly Uint8Array[]): CelReplay {
  const rtmrs: Buffer[] = [0, 1, 2, 3].map((i) => Buffer.from(rtmrStart?.[i] ?? Buffer.alloc(48)));
  const covered = new Set<number>();
  const pcrs = new Map<number, Map<number, Buffer>>();
  for (const r of records) {
    if (r.indexType === CEL_TYPE.CCMR) {
      const d = r.digests.get(TPM_ALG.SHA384);
      if (!d) {
        throw new AbiError(
          'CEL_RECORD_MALFORMED',
          `record ${r.recnum}: a CC MR record has no SHA-384 digest (at byte ${r.offset})`,
          'CEL',
          null,
          r.offset,
        );
      }
      const i = r.index - 1;
      rtmrs[i] = digest('sha384', rtmrs[i] as Buffer, d);
      covered.add(i);
      continue;
    }
    for (const [alg, d] of r.digests) {
      const h = hashInfo(alg);
      if (!h) continue;
      const bank = pcrs.get(alg) ?? new Map<number, Buffer>();
      bank.set(r.index, digest(h.node, bank.get(r.index) ?? Buffer.alloc(h.size), d));
      pcrs.set(alg, bank);
    }
  }
  return { rtmrs, rtmrsCovered: [...covered].sort((a, b) => a - b), pcrs };
}

/** Records whose content digest does not match, and how many could not be re-hashed. */
export function celContentDigests(records: readonly CelRecord[]): {
  mismatched: number[];
  unchecked: number;
} {
  const mismatched: number[] = [];
  let unchecked = 0;
  for (const r of records) {
    if (r.contentType !== CEL_CONTENT_COS) {
      unchecked++;
      continue;
    }
    for (const [alg, d] of r.digests) {
      const h = hashInfo(alg);
      if (h && !digest(h.node, r.contentTlv).equals(d)) {
        mismatched.push(r.recnum);
        break;
      }
    }
  }
  return { mismatched, unchecked };
}

/** Input of {@link verifyCel}. */
export interface CelCheckInput {
  log: Uint8Array;
  /** RTMR0..3 of a TD quote. */
  rtmrs?: readonly Uint8Array[];
  /** Start values of RTMR0..3 (the CC event log's replay); zero when undefined. */
  rtmrStart?: readonly Uint8Array[];
  /** PCR values of a TPM quote. */
  pcrValues?: readonly PcrValue[];
  /** Whether the supplied values are covered by a verified quote signature. */
  quoted?: boolean;
}

/** Result of {@link verifyCel}. */
export interface CelCheckResult {
  checks: CheckResult[];
  records?: CelRecord[];
  replay?: CelReplay;
  notes: string[];
}

function compare(input: CelCheckInput, replay: CelReplay): { compared: string[]; mismatched: string[] } {
  const compared: string[] = [];
  const mismatched: string[] = [];
  if (input.rtmrs) {
    for (const i of replay.rtmrsCovered) {
      const label = `RTMR${i}`;
      (Buffer.from(input.rtmrs[i] ?? []).equals(replay.rtmrs[i] as Buffer) ? compared : mismatched).push(
        label,
      );
    }
  }
  for (const v of input.pcrValues ?? []) {
    const want = replay.pcrs.get(v.hashAlg)?.get(v.index);
    if (!want) continue;
    const label = `${bankName(v.hashAlg)}:${v.index}`;
    (Buffer.from(v.value).equals(want) ? compared : mismatched).push(label);
  }
  return { compared, mismatched };
}

/**
 * Checks (ids stable): `cel.parse` (CEL_RECORD_TRUNCATED / CEL_RECORD_MALFORMED), `cel.digests`
 * (each Confidential Space record's digest is the hash of its content: CEL_DIGEST_MISMATCH) and
 * `cel.replay` (every register the log extends equals the supplied quoted value:
 * CEL_REPLAY_MISMATCH; equal values pass only when they are quoted). Never throws.
 */
export function verifyCel(input: CelCheckInput): CelCheckResult {
  const out: CelCheckResult = { checks: [], notes: [] };
  const supplied = input.rtmrs !== undefined || input.pcrValues !== undefined;
  let records: CelRecord[];
  let replay: CelReplay;
  try {
    records = parseCel(input.log);
    replay = replayCel(records, input.rtmrStart);
  } catch (err) {
    const code = err instanceof AbiError ? err.code : 'CEL_RECORD_MALFORMED';
    out.checks.push(fail('cel.parse', code, (err as Error).message.slice(0, 200)));
    out.checks.push(fail('cel.digests', 'DEPENDENCY_FAILED', 'the CEL did not parse'));
    out.checks.push(
      supplied
        ? fail('cel.replay', 'DEPENDENCY_FAILED', 'the CEL did not parse')
        : check('cel.replay', 'not-applicable', 'NOT_SUPPLIED', 'no quoted values to compare'),
    );
    return out;
  }
  out.records = records;
  out.replay = replay;
  const registers = [
    ...replay.rtmrsCovered.map((i) => `RTMR${i}`),
    ...[...replay.pcrs].flatMap(([alg, bank]) => [...bank.keys()].map((i) => `${bankName(alg)}:${i}`)),
  ];
  out.checks.push(
    pass('cel.parse', `${records.length} records; extends ${registers.join(', ') || 'nothing'}`),
  );
  const dg = celContentDigests(records);
  if (dg.mismatched.length) {
    out.checks.push(
      fail(
        'cel.digests',
        'CEL_DIGEST_MISMATCH',
        `record(s) ${dg.mismatched.slice(0, 8).join(', ')} carry a digest that is not the hash of their content`,
      ),
    );
  } else {
    out.checks.push(
      pass(
        'cel.digests',
        `${records.length - dg.unchecked} Confidential Space record(s) hash to their digests${dg.unchecked ? `; ${dg.unchecked} of other content types not re-hashed` : ''}`,
      ),
    );
  }
  if (!supplied) {
    out.checks.push(check('cel.replay', 'not-applicable', 'NOT_SUPPLIED', 'no quoted values to compare'));
    out.notes.push('The CEL was replayed but not compared with a quote: nothing signs a log by itself.');
    return out;
  }
  const { compared, mismatched } = compare(input, replay);
  if (mismatched.length) {
    out.checks.push(
      fail(
        'cel.replay',
        'CEL_REPLAY_MISMATCH',
        `replayed ${mismatched.join(', ')} differ from the quoted value(s)`,
      ),
    );
  } else if (!compared.length) {
    out.checks.push(
      check('cel.replay', 'not-applicable', 'NOT_SUPPLIED', 'no quoted register is extended by the CEL'),
    );
  } else if (input.quoted === false) {
    out.checks.push(
      fail(
        'cel.replay',
        'DEPENDENCY_FAILED',
        'the replay matches values whose quote signature did not verify',
      ),
    );
  } else {
    out.checks.push(pass('cel.replay', `replayed ${compared.join(', ')} equal the quoted value(s)`));
  }
  return out;
}
