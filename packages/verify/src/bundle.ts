/**
 * Audit bundle verification (docs/spec/canonical-json.md, docs/spec/audit-entries.md): hashes of stored text, chain links, sequence,
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
import {
  agentCheck,
  type ChainContext,
  chainIdCheck,
  entryChecks,
  linksCheck,
  rootCheck,
  sequenceCheck,
  sessionCheck,
  timestampsCheck,
  tipLengthChecks,
} from './bundle-checks.js';
import { entryCountsCheck } from './bundle-counts.js';
import { countByType, entryTypesCheck } from './bundle-entry-types.js';
import {
  AUDIT_CHECK_IDS,
  auditBundleSchema,
  type BundleExpectations,
  type BundleVerification,
  type VerifiedEntry,
} from './bundle-schema.js';
import { executionIdGroups, transcriptCheck } from './bundle-transcript.js';
import { treeHeadCheck } from './bundle-tree-head.js';
import type { AuditEntryBody } from './format/entry.js';
import { type CheckResult, fail, pass, quoteUntrusted } from './result.js';

export {
  AUDIT_CHECK_IDS,
  auditBundleSchema,
  auditEntryBodySchema,
  type BundleExpectations,
  type BundleVerification,
  parseUtcTimestampNs,
  type VerifiedEntry,
} from './bundle-schema.js';

/**
 * Verifies an audit bundle (packages/verify/src/format/entry.ts `AuditBundle`) and, if `expect` is given,
 * compares it with what a claim states.
 *
 * Per entry: SHA-256 of the stored `canonical` text equals `entry_hash`; the text parses as an
 * entry v1 and is its own JCS form. Chain: one chain_id; sequence numbers listed in order,
 * unique and contiguous from 0; prev_entry_hash is `"genesis"` at 0 and the predecessor's
 * entry_hash after; timestamps never decrease (in sequence order). Against `expect`: root =
 * entry 0 hash, tip = last entry hash, length = entry count, a claim version 2's tree head =
 * the RFC 9162 root over the entries (./bundle-tree-head.ts), transcript lines = entries, entry
 * counts by type and tool-call counters = the entries' (./bundle-counts.ts).
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
      if (id === 'audit.agent' && expect.agent_id === undefined) continue;
      if (id === 'audit.tree_head' && expect.tree_head === undefined) continue;
      checks.push(fail(id, 'BUNDLE_MALFORMED', 'the bundle did not parse'));
    }
    return { checks, notes, execution_id_groups: [], entries: [], entry_counts: {} };
  }
  const b = shape.data;
  checks.push(
    pass('audit.bundle_shape', `bundle v1, chain ${quoteUntrusted(b.chain_id)}, ${b.entries.length} entries`),
  );

  const { entries, formatProblems, hashMismatches } = entryChecks(b, checks);
  const parsed = entries.filter((e): e is VerifiedEntry & { body: AuditEntryBody } => e.body !== undefined);
  const allParsed = parsed.length === entries.length;
  const unparsedDetail = `${entries.length - parsed.length} entr${entries.length - parsed.length === 1 ? 'y' : 'ies'} did not parse`;

  const sorted = [...parsed].sort((x, y) => x.body.sequence_number - y.body.sequence_number);
  const c: ChainContext = {
    b,
    expect,
    checks,
    notes,
    entries,
    parsed,
    allParsed,
    unparsedDetail,
    sorted,
    formatProblems,
    hashMismatches,
    selfConsistent: false,
    n: sorted.length,
    entry0: sorted[0]?.body.sequence_number === 0 ? sorted[0] : undefined,
    rootMatches: false,
    L: expect.length,
  };
  chainIdCheck(c);
  sessionCheck(c);
  agentCheck(c);
  const sequenceOk = sequenceCheck(c);
  const linksOk = linksCheck(c);
  const timesOk = timestampsCheck(c);
  c.selfConsistent =
    allParsed &&
    formatProblems.length === 0 &&
    hashMismatches.length === 0 &&
    sequenceOk &&
    linksOk &&
    timesOk;
  c.rootMatches = expect.root !== undefined && c.entry0?.declared_hash === expect.root;
  rootCheck(c);
  tipLengthChecks(c);
  treeHeadCheck(c);
  transcriptCheck(c);
  const bodies = sorted.map((e) => e.body);
  entryTypesCheck(bodies, checks);
  entryCountsCheck(c);
  const execution_id_groups = executionIdGroups(c);
  return { checks, notes, execution_id_groups, entries, entry_counts: countByType(bodies) };
}
