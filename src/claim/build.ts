/**
 * Builds, signs and stores a session's TRACE claim (docs/spec/claims.md) from what the database
 * holds: the chain's root/tip/length, a transcript of its tool_call entries (tool,
 * decision, matched policy ids, disposition — never arguments or execution ids), every entry
 * counted by type (relayed resource reads, prompt gets, … beside tool calls), and the binding section
 * recorded at session creation.
 */
import { sign as cryptoSign, type KeyObject, randomUUID } from 'node:crypto';
import type { Ed25519Jwk, SessionBatchJson, SessionBindingPreimage } from '@cmcp/verify/format/binding';
import { canonicalJson, sha256Hex } from '@cmcp/verify/format/canonical';
import {
  CLAIM_PROFILE,
  type Claim,
  type EvidenceJson,
  type TranscriptLine,
  type UnsignedClaim,
} from '@cmcp/verify/format/claim';
import type { AuditEntry } from '@cmcp/verify/format/entry';
import type { AuditChain } from '../audit/chain.js';
import type { Db } from '../store/db.js';
import { prepared } from '../store/statements.js';

/** What the session row stores about its binding (the claim's `binding` and `evidence`). */
export interface SessionBindingRecord {
  preimage: SessionBindingPreimage;
  /** The session's place in its batch (docs/spec/binding.md#batched-bindings); absent: a single binding. */
  batch?: SessionBatchJson;
  evidence: EvidenceJson;
}

export interface ClaimInputs {
  sessionId: string;
  agentId: string;
  binding: SessionBindingRecord;
  key: KeyObject;
  jwk: Ed25519Jwk;
  enforcementMode: string;
}

/** A chain entry as a claim reads it (stored canonical text parsed, with its hash). */
type ChainEntry = Pick<
  AuditEntry,
  | 'sequence_number'
  | 'entry_type'
  | 'entry_hash'
  | 'tool_name'
  | 'policy_decision'
  | 'policy_rule_matched'
  | 'disposition'
  | 'error_code'
>;

/**
 * What a claim states about its chain (docs/spec/claims.md: audit_chain, transcript, counters,
 * entry_counts), gathered entry by entry so that a long chain can be read in pages between
 * which the event loop runs. Each transcript line's JCS text (RFC 8785) is kept as it is
 * added, so signing never serialises the whole transcript in one piece.
 */
export class ChainSummary {
  root: string | null = null;
  tip: string | null = null;
  length = 0;
  /** sequence_number of the last entry added; -1 before any. */
  lastSequence = -1;
  readonly transcript: TranscriptLine[] = [];
  /** JCS of the {@link transcript} lines, comma-joined one page (one {@link add}) per piece. */
  private readonly transcriptPieces: string[] = [];
  readonly counters = { tool_calls: 0, allowed: 0, refused: 0, faulted: 0 };
  readonly entry_counts: Record<string, number> = {};

  /** Adds the chain's next entries (sequence order, each after {@link lastSequence}). */
  add(entries: readonly ChainEntry[]): void {
    const jcs: string[] = [];
    for (const e of entries) {
      if (e.sequence_number <= this.lastSequence) continue;
      this.root ??= e.entry_hash;
      this.tip = e.entry_hash;
      this.length++;
      this.lastSequence = e.sequence_number;
      this.entry_counts[e.entry_type] = (this.entry_counts[e.entry_type] ?? 0) + 1;
      if (e.entry_type !== 'tool_call') continue;
      const line: TranscriptLine = {
        sequence_number: e.sequence_number,
        tool_name: e.tool_name,
        policy_decision: e.policy_decision,
        policy_rule_matched: e.policy_rule_matched,
        disposition: e.disposition,
        error_code: e.error_code,
      };
      this.transcript.push(line);
      jcs.push(canonicalJson(line));
      this.counters.tool_calls++;
      if (e.disposition === 'refused') this.counters.refused++;
      else if (e.disposition === 'completed' && !e.error_code) this.counters.allowed++;
      else this.counters.faulted++;
    }
    if (jcs.length > 0) this.transcriptPieces.push(jcs.join(','));
  }

  /** JCS (RFC 8785 §3.2) of the transcript array: its lines' JCS, comma-joined, in brackets. */
  transcriptJcs(): string {
    return `[${this.transcriptPieces.join(',')}]`;
  }
}

/**
 * Builds and stores the claim, reading the whole chain at once. Must run inside the IMMEDIATE
 * transaction that appended the session's `session_close` entry, so the chain it describes
 * cannot move underneath it.
 */
export function issueClaim(db: Db, chain: AuditChain, inp: ClaimInputs): Claim {
  const summary = new ChainSummary();
  summary.add(chain.entries(inp.sessionId));
  return issueClaimFrom(db, summary, inp);
}

/**
 * Builds, signs and stores the claim of a chain summarised in `summary` (which must cover the
 * chain up to its tip, `session_close` included). Must run inside the IMMEDIATE transaction
 * that appended `session_close`.
 * @throws Error when the summary covers no entry.
 */
export function issueClaimFrom(db: Db, summary: ChainSummary, inp: ClaimInputs): Claim {
  if (!summary.root || !summary.tip) throw new Error(`session ${inp.sessionId} has no chain`);
  const prev = prepared<[], { claim_sequence: number; claim_hash: string }>(
    db,
    'SELECT claim_sequence, claim_hash FROM claims ORDER BY claim_sequence DESC LIMIT 1',
  ).get();
  const unsigned: UnsignedClaim = {
    claim_version: 1,
    profile: CLAIM_PROFILE,
    issued_at: new Date().toISOString(),
    session_id: inp.sessionId,
    agent_id: inp.agentId,
    gateway_measurement: inp.binding.preimage.gateway_measurement,
    policy_bundle_hash: inp.binding.preimage.policy_bundle_hash,
    enforcement_mode: inp.enforcementMode,
    catalog_hash: inp.binding.preimage.catalog_hash,
    cnf: { jwk: inp.jwk },
    audit_chain: { chain_id: inp.sessionId, root: summary.root, tip: summary.tip, length: summary.length },
    transcript: summary.transcript,
    counters: { ...summary.counters },
    entry_counts: { ...summary.entry_counts },
    binding: {
      preimage: inp.binding.preimage,
      ...(inp.binding.batch ? { batch: inp.binding.batch } : {}),
    },
    evidence: inp.binding.evidence,
    claim_sequence: prev ? prev.claim_sequence + 1 : 0,
    prev_claim_hash: prev ? prev.claim_hash : null,
  };
  const transcriptJcs = summary.transcriptJcs();
  // Ed25519 over the claim's JCS, as @cmcp/verify/format/claim signClaim signs (docs/spec/claims.md).
  const signature = cryptoSign(null, Buffer.from(claimJcs(unsigned, transcriptJcs), 'utf8'), inp.key);
  const claim: Claim = { ...unsigned, signature: signature.toString('base64url') };
  const canonical = claimJcs(claim, transcriptJcs);
  prepared(db, 'INSERT INTO claims (claim_sequence, session_id, claim_hash, canonical) VALUES (?,?,?,?)').run(
    claim.claim_sequence,
    inp.sessionId,
    sha256Hex(canonical),
    canonical,
  );
  return claim;
}

/**
 * JCS (RFC 8785) of a claim whose transcript's JCS text is already known: the rest of the claim
 * is canonicalised with a unique placeholder string where the transcript goes, and the
 * placeholder's JSON string is replaced by `transcriptJcs` — an array's JCS is its elements'
 * JCS joined by commas in brackets (§3.2), whatever surrounds it. The result is what
 * canonicalJson(claim) gives (test/claim-close-paged.test.ts), without serialising every
 * transcript line again in one piece.
 */
function claimJcs(claim: UnsignedClaim | Claim, transcriptJcs: string): string {
  const placeholder = `cmcp-transcript-${randomUUID()}`;
  const text = canonicalJson({ ...claim, transcript: placeholder });
  const quoted = JSON.stringify(placeholder);
  const at = text.indexOf(quoted);
  if (at < 0 || text.indexOf(quoted, at + 1) >= 0) return canonicalJson(claim);
  return text.slice(0, at) + transcriptJcs + text.slice(at + quoted.length);
}

/** The stored claim of a session, exactly as signed, or undefined. */
export function storedClaim(db: Db, sessionId: string): Claim | undefined {
  const row = prepared<[string], { canonical: string }>(
    db,
    'SELECT canonical FROM claims WHERE session_id = ?',
  ).get(sessionId);
  return row ? (JSON.parse(row.canonical) as Claim) : undefined;
}
