/**
 * Audit bundle verification (design §2, §3): hashes of stored text, chain links, sequence,
 * timestamps, and — when a claim is supplied — root, tip, length and transcript.
 *
 * The reasons tell the kinds of fault apart (cases C-CHAIN-1..3):
 * - content tampering → `ENTRY_HASH_MISMATCH` (stored text no longer hashes to entry_hash);
 * - truncation → `BUNDLE_TRUNCATED` (a valid prefix of the claimed chain, but shorter);
 * - substitution → `CHAIN_SUBSTITUTED` (a self-consistent chain whose root is not the claimed one);
 * - reordering → `SEQUENCE_OUT_OF_ORDER` (entries listed out of sequence order) or `LINK_BROKEN`
 *   (an entry does not link to its predecessor);
 * - a claim older than the bundle (claim k presented for k+1) → `BUNDLE_EXTENDS_CLAIM`.
 *
 * Entries are ordered by `sequence_number`, never by time.
 */
import { z } from 'zod';
import { canonicalJson, sha256Hex } from './format/canonical.js';
import type { TranscriptLine } from './format/claim.js';
import type { AuditEntryBody } from './format/entry.js';
import {
  type CheckResult,
  check,
  type ExecutionIdGroup,
  fail,
  pass,
  quoteUntrusted,
  type ReasonCode,
} from './result.js';

const HEX64 = /^[0-9a-f]{64}$/;
const nullableString = z.string().nullable();

/** zod schema of an audit entry body v1 (design §3). Extra members are tolerated (they are hashed). */
export const auditEntryBodySchema = z.object({
  entry_version: z.literal(1),
  entry_id: z.string(),
  chain_id: z.string(),
  sequence_number: z.number().int().min(0),
  timestamp_utc: z.string(),
  entry_type: z.string(),
  session_id: nullableString,
  call_id: nullableString,
  agent_id: nullableString,
  workflow_id: nullableString,
  execution_id: nullableString,
  tool_name: nullableString,
  server_identity: nullableString,
  policy_decision: nullableString,
  policy_rule_matched: z.array(z.string()).nullable(),
  disposition: nullableString,
  error_code: nullableString,
  latency_us: z.number().nullable(),
  request_payload_hash: nullableString,
  response_payload_hash: nullableString,
  detail: z.record(z.string(), z.unknown()).nullable(),
  prev_entry_hash: z.string(),
});

/** zod schema of an audit bundle v1 (packages/verify/src/format/entry.ts AuditBundle). */
export const auditBundleSchema = z.object({
  bundle_version: z.literal(1),
  chain_id: z.string(),
  session_id: z.string().nullable(),
  exported_at: z.string(),
  entries: z.array(z.object({ canonical: z.string(), entry_hash: z.string() })),
});

/** What the claim says about the chain; every member optional (absent ⇒ that check is not-applicable). */
export interface BundleExpectations {
  chain_id?: string;
  session_id?: string | null;
  /** Bare hex entry_hash of entry 0. */
  root?: string;
  /** Bare hex entry_hash of the last entry. */
  tip?: string;
  /** Number of entries. */
  length?: number;
  /** Transcript lines to compare with the entries at their sequence numbers. */
  transcript?: readonly TranscriptLine[];
}

/** One bundle entry as the verifier saw it. */
export interface VerifiedEntry {
  /** Position in the bundle's `entries` array. */
  index: number;
  /** entry_hash as written in the bundle. */
  declared_hash: string;
  /** SHA-256 of the stored canonical text. */
  computed_hash: string;
  /** Parsed body when the text parsed as an entry v1. */
  body?: AuditEntryBody;
}

/** Result of {@link verifyBundle}. */
export interface BundleVerification {
  /** Check ids: audit.bundle_shape, audit.entry_format, audit.entry_hashes, audit.chain_id,
   * audit.session, audit.sequence, audit.links, audit.timestamps, audit.root, audit.tip,
   * audit.length, audit.transcript. */
  checks: CheckResult[];
  notes: string[];
  execution_id_groups: ExecutionIdGroup[];
  entries: VerifiedEntry[];
}

/** The check ids {@link verifyBundle} produces, in order. */
export const AUDIT_CHECK_IDS = [
  'audit.bundle_shape',
  'audit.entry_format',
  'audit.entry_hashes',
  'audit.chain_id',
  'audit.session',
  'audit.sequence',
  'audit.links',
  'audit.timestamps',
  'audit.root',
  'audit.tip',
  'audit.length',
  'audit.transcript',
] as const;

/**
 * Parses an RFC 3339 UTC timestamp (`Z` or `+00:00`, 0–9 fractional digits) to nanoseconds
 * since the epoch. @returns null when not a valid UTC timestamp.
 */
export function parseUtcTimestampNs(text: string): bigint | null {
  const m = /^(\d{4})-(\d{2})-(\d{2})T(\d{2}):(\d{2}):(\d{2})(?:\.(\d{1,9}))?(?:Z|\+00:00)$/.exec(text);
  if (!m) return null;
  const [y, mo, d, h, mi, s] = m.slice(1, 7).map(Number) as [number, number, number, number, number, number];
  const ms = Date.UTC(y, mo - 1, d, h, mi, s);
  const back = new Date(ms);
  if (
    back.getUTCFullYear() !== y ||
    back.getUTCMonth() !== mo - 1 ||
    back.getUTCDate() !== d ||
    back.getUTCHours() !== h ||
    back.getUTCMinutes() !== mi ||
    back.getUTCSeconds() !== s
  ) {
    return null;
  }
  const frac = (m[7] ?? '').padEnd(9, '0');
  return BigInt(ms) * 1_000_000n + BigInt(frac);
}

function list(items: readonly (string | number)[], max = 8): string {
  return items.length > max
    ? `${items.slice(0, max).join(', ')}, … (${items.length} in all)`
    : items.join(', ');
}

/**
 * Verifies an audit bundle (packages/verify/src/format/entry.ts `AuditBundle`) and, if `expect` is given,
 * compares it with what a claim states.
 *
 * Per entry: SHA-256 of the stored `canonical` text equals `entry_hash`; the text parses as an
 * entry v1 and is its own JCS form. Chain: one chain_id; sequence numbers listed in order,
 * unique and contiguous from 0; prev_entry_hash is `"genesis"` at 0 and the predecessor's
 * entry_hash after; timestamps never decrease (in sequence order). Against `expect`: root =
 * entry 0 hash, tip = last entry hash, length = entry count, transcript lines = entries.
 *
 * Never throws on bad input: every problem is a failed check with a reason code.
 * Also returns execution_id groups (≥ 2 `tool_call` entries sharing an execution_id) as
 * informational notes that do not claim the entries were the same logical operation.
 */
export function verifyBundle(bundle: unknown, expect: BundleExpectations = {}): BundleVerification {
  const checks: CheckResult[] = [];
  const notes: string[] = [];
  const shape = auditBundleSchema.safeParse(bundle);
  if (!shape.success) {
    const issue = shape.error.issues[0];
    const where = issue ? `${issue.path.join('.') || '(root)'}: ${issue.message}` : 'unknown';
    checks.push(
      fail('audit.bundle_shape', 'BUNDLE_MALFORMED', `bundle does not parse: ${where.slice(0, 160)}`),
    );
    for (const id of AUDIT_CHECK_IDS.slice(1)) {
      checks.push(fail(id, 'BUNDLE_MALFORMED', 'the bundle did not parse'));
    }
    return { checks, notes, execution_id_groups: [], entries: [] };
  }
  const b = shape.data;
  checks.push(
    pass('audit.bundle_shape', `bundle v1, chain ${quoteUntrusted(b.chain_id)}, ${b.entries.length} entries`),
  );

  // Per-entry: format and hash of the stored text.
  const entries: VerifiedEntry[] = [];
  const formatProblems: { reason: ReasonCode; text: string }[] = [];
  const hashMismatches: number[] = [];
  b.entries.forEach((e, index) => {
    const computed = sha256Hex(e.canonical);
    const ve: VerifiedEntry = { index, declared_hash: e.entry_hash, computed_hash: computed };
    if (!HEX64.test(e.entry_hash) || e.entry_hash !== computed) hashMismatches.push(index);
    let parsed: unknown;
    try {
      parsed = JSON.parse(e.canonical);
    } catch {
      formatProblems.push({ reason: 'ENTRY_MALFORMED', text: `entry [${index}] is not JSON` });
      entries.push(ve);
      return;
    }
    const body = auditEntryBodySchema.safeParse(parsed);
    if (!body.success) {
      const issue = body.error.issues[0];
      formatProblems.push({
        reason: 'ENTRY_MALFORMED',
        text: `entry [${index}] ${issue ? `${issue.path.join('.')}: ${issue.message}` : 'malformed'}`.slice(
          0,
          160,
        ),
      });
      entries.push(ve);
      return;
    }
    let recanon: string | null = null;
    try {
      recanon = canonicalJson(parsed);
    } catch {
      recanon = null;
    }
    if (recanon !== e.canonical) {
      formatProblems.push({
        reason: 'ENTRY_NOT_CANONICAL',
        text: `entry [${index}] text is not its RFC 8785 form`,
      });
    }
    ve.body = parsed as AuditEntryBody;
    entries.push(ve);
  });
  const firstFormat = formatProblems[0];
  checks.push(
    firstFormat
      ? fail(
          'audit.entry_format',
          firstFormat.reason,
          `${formatProblems.length} entr${formatProblems.length === 1 ? 'y' : 'ies'}: ${list(
            formatProblems.map((p) => p.text),
            3,
          )}`,
        )
      : pass('audit.entry_format', 'every entry is an entry v1 in canonical (RFC 8785) form'),
  );
  checks.push(
    hashMismatches.length
      ? fail(
          'audit.entry_hashes',
          'ENTRY_HASH_MISMATCH',
          `stored text does not hash to entry_hash at bundle position(s) ${list(hashMismatches)}: content was altered`,
        )
      : pass('audit.entry_hashes', 'SHA-256 of every stored text equals its entry_hash'),
  );

  const parsed = entries.filter((e): e is VerifiedEntry & { body: AuditEntryBody } => e.body !== undefined);
  const allParsed = parsed.length === entries.length;
  const unparsedDetail = `${entries.length - parsed.length} entr${entries.length - parsed.length === 1 ? 'y' : 'ies'} did not parse`;

  // chain_id
  {
    const wantChain = expect.chain_id ?? b.chain_id;
    const bad = parsed.filter((e) => e.body.chain_id !== wantChain).map((e) => e.body.sequence_number);
    if (expect.chain_id !== undefined && b.chain_id !== expect.chain_id) {
      checks.push(
        fail(
          'audit.chain_id',
          'CHAIN_ID_MISMATCH',
          `bundle chain ${quoteUntrusted(b.chain_id)} is not the claimed chain ${quoteUntrusted(expect.chain_id)}`,
        ),
      );
    } else if (bad.length) {
      checks.push(
        fail(
          'audit.chain_id',
          'CHAIN_ID_MISMATCH',
          `entries at sequence ${list(bad)} belong to another chain`,
        ),
      );
    } else if (!allParsed) {
      checks.push(fail('audit.chain_id', 'DEPENDENCY_FAILED', unparsedDetail));
    } else {
      checks.push(pass('audit.chain_id', `every entry is in chain ${quoteUntrusted(wantChain)}`));
    }
  }

  // session
  {
    const wantSession = expect.session_id !== undefined ? expect.session_id : b.session_id;
    const bad = parsed
      .filter((e) => e.body.session_id !== null && e.body.session_id !== wantSession)
      .map((e) => e.body.sequence_number);
    if (expect.session_id !== undefined && b.session_id !== expect.session_id) {
      checks.push(
        fail(
          'audit.session',
          'BUNDLE_SESSION_MISMATCH',
          `bundle is for session ${quoteUntrusted(b.session_id)}, claim is for ${quoteUntrusted(expect.session_id)}`,
        ),
      );
    } else if (bad.length) {
      checks.push(
        fail(
          'audit.session',
          'BUNDLE_SESSION_MISMATCH',
          `entries at sequence ${list(bad)} name another session`,
        ),
      );
    } else if (!allParsed) {
      checks.push(fail('audit.session', 'DEPENDENCY_FAILED', unparsedDetail));
    } else {
      checks.push(pass('audit.session', `entries name session ${quoteUntrusted(wantSession)} or none`));
    }
  }

  // sequence: listed in order, unique, contiguous from 0
  const sorted = [...parsed].sort((x, y) => x.body.sequence_number - y.body.sequence_number);
  let sequenceOk = false;
  {
    const seqs = parsed.map((e) => e.body.sequence_number);
    const dup = sorted.filter(
      (e, i) => i > 0 && sorted[i - 1]?.body.sequence_number === e.body.sequence_number,
    );
    const outOfOrder = seqs.flatMap((s, i) => (i > 0 && s < (seqs[i - 1] ?? 0) ? [i] : []));
    const gaps = sorted.flatMap((e, i) => {
      const prev = sorted[i - 1];
      return i > 0 && prev && e.body.sequence_number > prev.body.sequence_number + 1
        ? [`${prev.body.sequence_number}→${e.body.sequence_number}`]
        : [];
    });
    const first = sorted[0]?.body.sequence_number;
    if (!allParsed) checks.push(fail('audit.sequence', 'DEPENDENCY_FAILED', unparsedDetail));
    else if (dup.length) {
      checks.push(
        fail(
          'audit.sequence',
          'SEQUENCE_DUPLICATE',
          `sequence number(s) ${list(dup.map((e) => e.body.sequence_number))} appear twice`,
        ),
      );
    } else if (outOfOrder.length) {
      checks.push(
        fail(
          'audit.sequence',
          'SEQUENCE_OUT_OF_ORDER',
          `entries are not listed in sequence order (bundle position(s) ${list(outOfOrder)} go backwards): reordered`,
        ),
      );
    } else if (first !== undefined && first !== 0) {
      checks.push(
        fail('audit.sequence', 'BUNDLE_NOT_FROM_GENESIS', `first entry has sequence ${first}, not 0`),
      );
    } else if (gaps.length) {
      checks.push(fail('audit.sequence', 'SEQUENCE_GAP', `sequence jumps ${list(gaps)}`));
    } else {
      sequenceOk = true;
      checks.push(pass('audit.sequence', `sequence 0..${sorted.length - 1}, contiguous, in order`));
    }
  }

  // links, in sequence order (against declared entry_hash; the hashes are checked above)
  let linksOk = false;
  {
    const broken: string[] = [];
    let genesisBad = false;
    sorted.forEach((e, i) => {
      const prevEntry = sorted[i - 1];
      if (e.body.sequence_number === 0) {
        if (e.body.prev_entry_hash !== 'genesis') genesisBad = true;
      } else if (prevEntry && prevEntry.body.sequence_number === e.body.sequence_number - 1) {
        if (e.body.prev_entry_hash !== prevEntry.declared_hash) broken.push(`${e.body.sequence_number}`);
      } else if (e.body.prev_entry_hash === 'genesis') {
        broken.push(`${e.body.sequence_number}`);
      }
    });
    if (!allParsed) checks.push(fail('audit.links', 'DEPENDENCY_FAILED', unparsedDetail));
    else if (genesisBad)
      checks.push(fail('audit.links', 'GENESIS_INVALID', 'entry 0 prev_entry_hash is not "genesis"'));
    else if (broken.length) {
      checks.push(
        fail(
          'audit.links',
          'LINK_BROKEN',
          `prev_entry_hash does not name the predecessor at sequence ${list(broken)}`,
        ),
      );
    } else {
      linksOk = true;
      checks.push(pass('audit.links', 'every entry links to its predecessor; entry 0 to "genesis"'));
    }
  }

  // timestamps, in sequence order
  let timesOk = false;
  {
    const malformed: number[] = [];
    const decreasing: number[] = [];
    let prev: bigint | null = null;
    for (const e of sorted) {
      const t = parseUtcTimestampNs(e.body.timestamp_utc);
      if (t === null) {
        malformed.push(e.body.sequence_number);
        continue;
      }
      if (prev !== null && t < prev) decreasing.push(e.body.sequence_number);
      prev = t;
    }
    if (malformed.length) {
      checks.push(
        fail('audit.timestamps', 'TIMESTAMP_MALFORMED', `not RFC 3339 UTC at sequence ${list(malformed)}`),
      );
    } else if (decreasing.length) {
      checks.push(
        fail(
          'audit.timestamps',
          'TIMESTAMP_DECREASING',
          `timestamp earlier than its predecessor at sequence ${list(decreasing)}`,
        ),
      );
    } else if (!allParsed) {
      checks.push(fail('audit.timestamps', 'DEPENDENCY_FAILED', unparsedDetail));
    } else {
      timesOk = true;
      checks.push(pass('audit.timestamps', 'timestamps never decrease in sequence order'));
    }
  }

  const selfConsistent =
    allParsed &&
    formatProblems.length === 0 &&
    hashMismatches.length === 0 &&
    sequenceOk &&
    linksOk &&
    timesOk;
  const n = sorted.length;
  const entry0 = sorted[0]?.body.sequence_number === 0 ? sorted[0] : undefined;
  const rootMatches = expect.root !== undefined && entry0?.declared_hash === expect.root;

  // root
  if (expect.root === undefined) {
    checks.push(check('audit.root', 'not-applicable', 'NOT_SUPPLIED', 'no claimed root'));
  } else if (b.entries.length === 0) {
    checks.push(fail('audit.root', 'BUNDLE_EMPTY', 'the bundle has no entries'));
  } else if (!entry0) {
    checks.push(
      fail(
        'audit.root',
        allParsed ? 'CHAIN_ROOT_MISMATCH' : 'DEPENDENCY_FAILED',
        'the bundle has no entry 0',
      ),
    );
  } else if (!rootMatches) {
    checks.push(
      selfConsistent
        ? fail(
            'audit.root',
            'CHAIN_SUBSTITUTED',
            `the bundle is a self-consistent chain whose root ${entry0.declared_hash} is not the claimed root ${expect.root}: substituted`,
          )
        : fail(
            'audit.root',
            'CHAIN_ROOT_MISMATCH',
            `entry 0 hash ${entry0.declared_hash} is not the claimed root ${expect.root}`,
          ),
    );
  } else {
    checks.push(pass('audit.root', 'entry 0 hash equals the claimed root'));
  }

  // tip and length
  const L = expect.length;
  if (L === undefined && expect.tip === undefined) {
    checks.push(check('audit.tip', 'not-applicable', 'NOT_SUPPLIED', 'no claimed tip'));
    checks.push(check('audit.length', 'not-applicable', 'NOT_SUPPLIED', 'no claimed length'));
  } else if (b.entries.length === 0) {
    checks.push(fail('audit.tip', 'BUNDLE_EMPTY', 'the bundle has no entries'));
    checks.push(fail('audit.length', 'BUNDLE_EMPTY', 'the bundle has no entries'));
  } else if (!allParsed) {
    checks.push(fail('audit.tip', 'DEPENDENCY_FAILED', unparsedDetail));
    checks.push(fail('audit.length', 'DEPENDENCY_FAILED', unparsedDetail));
  } else {
    const claimedLen = L ?? n;
    const atTip = sorted.find((e) => e.body.sequence_number === claimedLen - 1);
    const tipMatches = expect.tip === undefined || atTip?.declared_hash === expect.tip;
    const prefixOk = selfConsistent && (expect.root === undefined || rootMatches);
    if (n === claimedLen) {
      checks.push(
        tipMatches
          ? pass('audit.tip', 'last entry hash equals the claimed tip')
          : fail(
              'audit.tip',
              'CHAIN_TIP_MISMATCH',
              `last entry hash ${atTip?.declared_hash ?? '(none)'} is not the claimed tip`,
            ),
      );
      checks.push(pass('audit.length', `${n} entries, as claimed`));
    } else if (n < claimedLen) {
      const reason: ReasonCode = prefixOk ? 'BUNDLE_TRUNCATED' : 'CHAIN_LENGTH_MISMATCH';
      checks.push(
        prefixOk
          ? fail(
              'audit.tip',
              'BUNDLE_TRUNCATED',
              `the claimed tip (sequence ${claimedLen - 1}) is not in the bundle`,
            )
          : fail('audit.tip', 'CHAIN_TIP_MISMATCH', 'the claimed tip is not in the bundle'),
      );
      checks.push(
        fail(
          'audit.length',
          reason,
          prefixOk
            ? `the bundle holds ${n} of the ${claimedLen} claimed entries and is a valid prefix: truncated`
            : `the bundle holds ${n} entries, the claim says ${claimedLen}`,
        ),
      );
    } else {
      const extends_ = prefixOk && tipMatches;
      checks.push(
        tipMatches
          ? pass('audit.tip', `entry ${claimedLen - 1} hash equals the claimed tip`)
          : fail('audit.tip', 'CHAIN_TIP_MISMATCH', `entry ${claimedLen - 1} is not the claimed tip`),
      );
      checks.push(
        fail(
          'audit.length',
          extends_ ? 'BUNDLE_EXTENDS_CLAIM' : 'CHAIN_LENGTH_MISMATCH',
          extends_
            ? `the bundle continues ${n - claimedLen} entr${n - claimedLen === 1 ? 'y' : 'ies'} past the claimed tip: the claim is older than this bundle (an earlier claim presented for a later one?)`
            : `the bundle holds ${n} entries, the claim says ${claimedLen}`,
        ),
      );
    }
  }

  // transcript
  if (!expect.transcript) {
    checks.push(check('audit.transcript', 'not-applicable', 'NOT_SUPPLIED', 'no transcript to compare'));
  } else if (!allParsed) {
    checks.push(fail('audit.transcript', 'DEPENDENCY_FAILED', unparsedDetail));
  } else {
    const bySeq = new Map(sorted.map((e) => [e.body.sequence_number, e.body] as const));
    const mismatched: number[] = [];
    const missing: number[] = [];
    let prevSeq = -1;
    for (const line of expect.transcript) {
      const e = bySeq.get(line.sequence_number);
      if (line.sequence_number <= prevSeq) mismatched.push(line.sequence_number);
      prevSeq = line.sequence_number;
      if (!e) {
        missing.push(line.sequence_number);
        continue;
      }
      if (
        e.tool_name !== line.tool_name ||
        e.policy_decision !== line.policy_decision ||
        (line.policy_rule_matched !== undefined &&
          JSON.stringify(e.policy_rule_matched) !== JSON.stringify(line.policy_rule_matched)) ||
        e.disposition !== line.disposition ||
        e.error_code !== line.error_code
      ) {
        mismatched.push(line.sequence_number);
      }
    }
    const truncated = L !== undefined && n < L;
    if (mismatched.length) {
      checks.push(
        fail(
          'audit.transcript',
          'TRANSCRIPT_MISMATCH',
          `transcript lines differ from the entries at sequence ${list(mismatched)}`,
        ),
      );
    } else if (missing.length) {
      checks.push(
        fail(
          'audit.transcript',
          truncated ? 'BUNDLE_TRUNCATED' : 'TRANSCRIPT_MISMATCH',
          `transcript lines name entries not in the bundle: sequence ${list(missing)}`,
        ),
      );
    } else {
      checks.push(
        pass('audit.transcript', `${expect.transcript.length} transcript lines match their entries`),
      );
    }
  }

  // execution_id groups (informational)
  const groups = new Map<string, ExecutionIdGroup>();
  for (const e of sorted) {
    if (e.body.entry_type !== 'tool_call' || e.body.execution_id === null) continue;
    let g = groups.get(e.body.execution_id);
    if (!g) {
      g = { execution_id: e.body.execution_id, agent_ids: [], sequence_numbers: [], entry_hashes: [] };
      groups.set(e.body.execution_id, g);
    }
    if (!g.agent_ids.includes(e.body.agent_id)) g.agent_ids.push(e.body.agent_id);
    g.sequence_numbers.push(e.body.sequence_number);
    g.entry_hashes.push(e.declared_hash);
  }
  const execution_id_groups = [...groups.values()].filter((g) => g.sequence_numbers.length >= 2);
  for (const g of execution_id_groups) {
    const agents =
      g.agent_ids.length > 1
        ? `; asserted by ${g.agent_ids.length} different agents (${g.agent_ids.map((a) => quoteUntrusted(a, 40)).join(', ')}), so they are different registry keys`
        : '';
    notes.push(
      `${g.sequence_numbers.length} tool_call entries share execution_id ${quoteUntrusted(g.execution_id)} ` +
        `(sequence ${list(g.sequence_numbers)})${agents}. execution_id is caller-asserted: this does NOT ` +
        'establish that they were the same logical operation (refusals of a reused id are audited under it too).',
    );
  }
  return { checks, notes, execution_id_groups, entries };
}
