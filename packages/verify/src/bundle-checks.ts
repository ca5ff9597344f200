/**
 * The checks of {@link verifyBundle} (./bundle.ts), one function per check id, over a shared
 * {@link ChainContext}. Entries are ordered by `sequence_number`, never by time.
 */
import type { z } from 'zod';
import { AGENT_ENTRY_TYPES } from './bundle-entry-types.js';
import {
  type auditBundleSchema,
  auditEntryBodySchema,
  type BundleExpectations,
  HEX64,
  parseUtcTimestampNs,
  type VerifiedEntry,
} from './bundle-schema.js';
import { canonicalJson, sha256Hex } from './format/canonical.js';
import type { AuditEntryBody } from './format/entry.js';
import { type CheckResult, check, fail, pass, quoteUntrusted, type ReasonCode } from './result.js';

export function list(items: readonly (string | number)[], max = 8): string {
  return items.length > max
    ? `${items.slice(0, max).join(', ')}, … (${items.length} in all)`
    : items.join(', ');
}

/** What the chain checks of one bundle share. */
export interface ChainContext {
  b: z.infer<typeof auditBundleSchema>;
  expect: BundleExpectations;
  checks: CheckResult[];
  notes: string[];
  entries: VerifiedEntry[];
  parsed: (VerifiedEntry & { body: AuditEntryBody })[];
  allParsed: boolean;
  unparsedDetail: string;
  /** Parsed entries in sequence order. */
  sorted: (VerifiedEntry & { body: AuditEntryBody })[];
  formatProblems: { reason: ReasonCode; text: string }[];
  hashMismatches: number[];
  selfConsistent: boolean;
  n: number;
  entry0: (VerifiedEntry & { body: AuditEntryBody }) | undefined;
  rootMatches: boolean;
  L: number | undefined;
}

/** Per-entry: format and hash of the stored text (`audit.entry_format`, `audit.entry_hashes`). */
export function entryChecks(
  b: z.infer<typeof auditBundleSchema>,
  checks: CheckResult[],
): {
  entries: VerifiedEntry[];
  formatProblems: { reason: ReasonCode; text: string }[];
  hashMismatches: number[];
} {
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

  return { entries, formatProblems, hashMismatches };
}

/** `audit.chain_id`: one chain_id, the claimed one. */
export function chainIdCheck(c: ChainContext): void {
  const { b, expect, checks, parsed, allParsed, unparsedDetail } = c;
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
}

/** `audit.session`: entries name the claimed session or none. */
export function sessionCheck(c: ChainContext): void {
  const { b, expect, checks, parsed, allParsed, unparsedDetail } = c;
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
}

/**
 * `audit.agent` (only when the claim names an agent): every entry names the claim's agent_id, or
 * none when its type may carry none ({@link AGENT_ENTRY_TYPES} always carry one). Without it, a
 * claim could name another agent than the one whose calls the chain records, or a chain could
 * hide whose calls they were behind `agent_id: null`.
 */
export function agentCheck(c: ChainContext): void {
  const { expect, checks, parsed, allParsed, unparsedDetail } = c;
  const want = expect.agent_id;
  if (want === undefined) return;
  const other = parsed.filter((e) => e.body.agent_id !== null && e.body.agent_id !== want);
  const anonymous = parsed.filter(
    (e) => e.body.agent_id === null && AGENT_ENTRY_TYPES.has(e.body.entry_type),
  );
  if (other.length) {
    checks.push(
      fail(
        'audit.agent',
        'BUNDLE_AGENT_MISMATCH',
        `entries at sequence ${list(other.map((e) => e.body.sequence_number))} name agent ${quoteUntrusted(other[0]?.body.agent_id, 40)}, claim is for ${quoteUntrusted(want, 40)}`,
      ),
    );
  } else if (anonymous.length) {
    checks.push(
      fail(
        'audit.agent',
        'BUNDLE_AGENT_MISMATCH',
        `entries at sequence ${list(anonymous.map((e) => e.body.sequence_number))} name no agent, though their type (${quoteUntrusted(anonymous[0]?.body.entry_type, 40)}) always names one; claim is for ${quoteUntrusted(want, 40)}`,
      ),
    );
  } else if (!allParsed) {
    checks.push(fail('audit.agent', 'DEPENDENCY_FAILED', unparsedDetail));
  } else {
    checks.push(
      pass('audit.agent', `entries name agent ${quoteUntrusted(want, 40)} or none where their type allows`),
    );
  }
}

/** `audit.sequence`: listed in order, unique, contiguous from 0. */
export function sequenceCheck(c: ChainContext): boolean {
  const { checks, parsed, allParsed, unparsedDetail, sorted } = c;
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

  return sequenceOk;
}

/** `audit.links`: prev_entry_hash links, in sequence order (against declared entry_hash). */
export function linksCheck(c: ChainContext): boolean {
  const { checks, allParsed, unparsedDetail, sorted } = c;
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

  return linksOk;
}

/** `audit.timestamps`: never decreasing, in sequence order. */
export function timestampsCheck(c: ChainContext): boolean {
  const { checks, allParsed, unparsedDetail, sorted } = c;
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

  return timesOk;
}

/** `audit.root`: entry 0 hash is the claimed root (substitution told apart). */
export function rootCheck(c: ChainContext): void {
  const { b, expect, checks, allParsed, selfConsistent, entry0, rootMatches } = c;
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
}

/** `audit.tip`, `audit.length`: truncation and a claim older than the bundle told apart. */
export function tipLengthChecks(c: ChainContext): void {
  const { b, expect, checks, allParsed, unparsedDetail, sorted, selfConsistent, n, rootMatches } = c;
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
}
