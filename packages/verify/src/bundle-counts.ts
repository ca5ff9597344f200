/**
 * `audit.entry_counts` of {@link verifyBundle} (./bundle.ts): a claim's `entry_counts` (every
 * entry of the chain by `entry_type`, docs/spec/claims.md#entry-counts) and its tool-call
 * `counters` re-derived from the bundle's entries. The chain tip and length already bind the
 * entries; this check makes what the claim *says* about them — how many resource reads, prompt
 * gets, completions, relays and tool calls, and how the tool calls ended — answer to them too.
 */
import type { ChainContext } from './bundle-checks.js';
import { countByType } from './bundle-entry-types.js';
import type { ClaimCounts } from './bundle-schema.js';
import type { AuditEntryBody } from './format/entry.js';
import { check, fail, pass, quoteUntrusted } from './result.js';

/** The claim's tool-call counters recomputed from the entries (as src/claim/build.ts counts them). */
export function toolCallCounters(entries: readonly AuditEntryBody[]): ClaimCounts['counters'] {
  const counters = { tool_calls: 0, allowed: 0, refused: 0, faulted: 0 };
  for (const e of entries) {
    if (e.entry_type !== 'tool_call') continue;
    counters.tool_calls++;
    if (e.disposition === 'refused') counters.refused++;
    else if (e.disposition === 'completed' && !e.error_code) counters.allowed++;
    else counters.faulted++;
  }
  return counters;
}

/** The members on which two count records differ, as `name claimed≠derived`. */
function differences(claimed: Readonly<Record<string, number>>, derived: Readonly<Record<string, number>>) {
  const names = [...new Set([...Object.keys(claimed), ...Object.keys(derived)])].sort();
  return names
    .filter((k) => (claimed[k] ?? 0) !== (derived[k] ?? 0))
    .map((k) => `${quoteUntrusted(k, 40)} ${claimed[k] ?? 0}≠${derived[k] ?? 0}`);
}

/** Pushes `audit.entry_counts`: not-applicable without counts (claims issued before them). */
export function entryCountsCheck(c: ChainContext): void {
  const { expect, checks, allParsed, unparsedDetail, sorted, n, L } = c;
  const counts = expect.counts;
  if (!counts) {
    checks.push(
      check(
        'audit.entry_counts',
        'not-applicable',
        'NOT_SUPPLIED',
        'the claim does not count its entries by type',
      ),
    );
    return;
  }
  if (!allParsed) {
    checks.push(fail('audit.entry_counts', 'DEPENDENCY_FAILED', unparsedDetail));
    return;
  }
  if (L !== undefined && n !== L) {
    checks.push(
      fail(
        'audit.entry_counts',
        'DEPENDENCY_FAILED',
        `the bundle holds ${n} entries, the claim ${L} (audit.length)`,
      ),
    );
    return;
  }
  const bodies = sorted.map((e) => e.body);
  const wrong = [
    ...differences(counts.entry_counts, countByType(bodies)),
    ...differences(counts.counters, toolCallCounters(bodies)).map((d) => `counters.${d}`),
  ];
  if (wrong.length) {
    checks.push(
      fail(
        'audit.entry_counts',
        'ENTRY_COUNTS_MISMATCH',
        `claimed≠bundle: ${wrong.slice(0, 8).join(', ')}${wrong.length > 8 ? ', …' : ''}`,
      ),
    );
    return;
  }
  const types = Object.keys(counts.entry_counts).length;
  checks.push(
    pass('audit.entry_counts', `${n} entries of ${types} types and the tool-call counters match the bundle`),
  );
}
