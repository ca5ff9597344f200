/**
 * Builds, signs and stores a session's TRACE claim (docs/spec/claims.md) from what the database
 * holds: the chain's root/tip/length, a transcript of its tool_call entries (tool,
 * decision, matched policy ids, disposition — never arguments or execution ids), every entry
 * counted by type (relayed resource reads, prompt gets, … beside tool calls), and the binding section
 * recorded at session creation.
 */
import type { KeyObject } from 'node:crypto';
import type { Ed25519Jwk, SessionBatchJson, SessionBindingPreimage } from '@cmcp/verify/format/binding';
import { canonicalJson, sha256Hex } from '@cmcp/verify/format/canonical';
import {
  CLAIM_PROFILE,
  type Claim,
  type EvidenceJson,
  signClaim,
  type TranscriptLine,
} from '@cmcp/verify/format/claim';
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

/**
 * Builds and stores the claim. Must run inside the IMMEDIATE transaction that appended the
 * session's `session_close` entry, so the chain it describes cannot move underneath it.
 */
export function issueClaim(db: Db, chain: AuditChain, inp: ClaimInputs): Claim {
  const entries = chain.entries(inp.sessionId);
  const first = entries[0];
  const last = entries[entries.length - 1];
  if (!first || !last) throw new Error(`session ${inp.sessionId} has no chain`);
  const transcript: TranscriptLine[] = [];
  const counters = { tool_calls: 0, allowed: 0, refused: 0, faulted: 0 };
  const entry_counts: Record<string, number> = {};
  for (const e of entries) {
    entry_counts[e.entry_type] = (entry_counts[e.entry_type] ?? 0) + 1;
    if (e.entry_type !== 'tool_call') continue;
    transcript.push({
      sequence_number: e.sequence_number,
      tool_name: e.tool_name,
      policy_decision: e.policy_decision,
      policy_rule_matched: e.policy_rule_matched,
      disposition: e.disposition,
      error_code: e.error_code,
    });
    counters.tool_calls++;
    if (e.disposition === 'refused') counters.refused++;
    else if (e.disposition === 'completed' && !e.error_code) counters.allowed++;
    else counters.faulted++;
  }
  const prev = prepared<[], { claim_sequence: number; claim_hash: string }>(
    db,
    'SELECT claim_sequence, claim_hash FROM claims ORDER BY claim_sequence DESC LIMIT 1',
  ).get();
  const claim = signClaim(
    {
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
      audit_chain: {
        chain_id: inp.sessionId,
        root: first.entry_hash,
        tip: last.entry_hash,
        length: entries.length,
      },
      transcript,
      counters,
      entry_counts,
      binding: {
        preimage: inp.binding.preimage,
        ...(inp.binding.batch ? { batch: inp.binding.batch } : {}),
      },
      evidence: inp.binding.evidence,
      claim_sequence: prev ? prev.claim_sequence + 1 : 0,
      prev_claim_hash: prev ? prev.claim_hash : null,
    },
    inp.key,
  );
  const canonical = canonicalJson(claim);
  prepared(db, 'INSERT INTO claims (claim_sequence, session_id, claim_hash, canonical) VALUES (?,?,?,?)').run(
    claim.claim_sequence,
    inp.sessionId,
    sha256Hex(canonical),
    canonical,
  );
  return claim;
}

/** The stored claim of a session, exactly as signed, or undefined. */
export function storedClaim(db: Db, sessionId: string): Claim | undefined {
  const row = prepared<[string], { canonical: string }>(
    db,
    'SELECT canonical FROM claims WHERE session_id = ?',
  ).get(sessionId);
  return row ? (JSON.parse(row.canonical) as Claim) : undefined;
}
