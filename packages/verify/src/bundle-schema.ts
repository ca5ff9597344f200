/**
 * The audit bundle shape as the verifier reads it (packages/verify/src/format/entry.ts
 * `AuditBundle` is the producer's type), its results, and UTC timestamp parsing.
 */
import { z } from 'zod';
import type { TranscriptLine } from './format/claim.js';
import type { AuditEntryBody } from './format/entry.js';
import type { CheckResult, ExecutionIdGroup } from './result.js';

export const HEX64 = /^[0-9a-f]{64}$/;
const nullableString = z.string().nullable();

/** zod schema of an audit entry body v1 (docs/spec/audit-entries.md). Extra members are tolerated (they are hashed). */
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
  /** The claim's agent_id: every entry must name this agent or none (adds check `audit.agent`). */
  agent_id?: string;
  /** Bare hex entry_hash of entry 0. */
  root?: string;
  /** Bare hex entry_hash of the last entry. */
  tip?: string;
  /** Number of entries. */
  length?: number;
  /** Transcript lines to compare with the entries at their sequence numbers. */
  transcript?: readonly TranscriptLine[];
  /** The claim's entry counts by type and its tool-call counters, to re-derive from the entries. */
  counts?: ClaimCounts;
  /** A claim version 2's tree head: the root is recomputed from the entries (adds `audit.tree_head`). */
  tree_head?: { size: number; root: string };
}

/** What a claim counts (docs/spec/claims.md#entry-counts). */
export interface ClaimCounts {
  entry_counts: Readonly<Record<string, number>>;
  counters: { tool_calls: number; allowed: number; refused: number; faulted: number };
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
   * audit.length, audit.tree_head (claim version 2), audit.transcript, audit.entry_types,
   * audit.entry_counts. */
  checks: CheckResult[];
  notes: string[];
  execution_id_groups: ExecutionIdGroup[];
  /** Parsed entries counted by entry_type. */
  entry_counts: Record<string, number>;
  entries: VerifiedEntry[];
}

/** The check ids {@link verifyBundle} produces, in order. */
export const AUDIT_CHECK_IDS = [
  'audit.bundle_shape',
  'audit.entry_format',
  'audit.entry_hashes',
  'audit.chain_id',
  'audit.session',
  'audit.agent',
  'audit.sequence',
  'audit.links',
  'audit.timestamps',
  'audit.root',
  'audit.tip',
  'audit.length',
  'audit.tree_head',
  'audit.transcript',
  'audit.entry_types',
  'audit.entry_counts',
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
