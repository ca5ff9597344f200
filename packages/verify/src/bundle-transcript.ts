/**
 * The transcript and execution_id checks of {@link verifyBundle} (./bundle.ts), over the same
 * {@link ChainContext} as ./bundle-checks.ts: what a bundle says about the calls, beyond its
 * chain's integrity.
 */
import { type ChainContext, list } from './bundle-checks.js';
import { check, type ExecutionIdGroup, fail, pass, quoteUntrusted } from './result.js';

/** `audit.transcript`: transcript lines equal the entries at their sequence numbers. */
export function transcriptCheck(c: ChainContext): void {
  const { expect, checks, allParsed, unparsedDetail, sorted, n, L } = c;
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
}

/** execution_id groups (informational notes). */
export function executionIdGroups(c: ChainContext): ExecutionIdGroup[] {
  const { notes, sorted } = c;
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
  return execution_id_groups;
}
