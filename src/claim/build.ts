/**
 * Builds a session's TRACE claim, version 2 (docs/spec/claims.md#claim-version-2; signed by
 * ./issuer.ts) from what the chain and the session row hold: the chain's root/tip/length, its final
 * tree head (size, root), the tool calls counted by outcome, every entry counted by type (relayed
 * resource reads, prompt gets, … beside tool calls), and the binding section recorded at session
 * creation. The per-call transcript is the bundle's entries, checked against the tree head.
 */
import type { KeyObject } from 'node:crypto';
import type { AuditEntry, Ed25519Jwk, SessionBatchJson, SessionBindingPreimage } from '@cmcp/verify/formats';
import {
  CLAIM_PROFILE,
  CLAIM_VERSION_TREE_HEAD,
  canonicalJson,
  type EvidenceJson,
  MerkleFrontier,
  sha256Hex,
  signClaim,
  type UnsignedTreeHeadClaim,
} from '@cmcp/verify/formats';
import type { ChainTip } from '../store/entries/next-entry.js';
import type { ChainPageEntry, ClaimTip, IssuedClaim } from '../store/port.js';

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

/** A chain entry as a claim reads it (store/port.ts ChainPageEntry). */
type ChainEntry = ChainPageEntry;

/**
 * What a claim states about its chain (docs/spec/claims.md#claim-version-2: audit_chain,
 * tree_head, counters, entry_counts), gathered entry by entry so that a long chain can be read
 * in pages between which the event loop runs. The chain's tree is rebuilt from the entries' hashes
 * as they are added (an O(log n) frontier, docs/spec/transparency.md#the-tree): the claim commits
 * to its root, so it keeps a few KB however long the session, and the per-call transcript stays
 * in the bundle.
 */
export class ChainSummary {
  root: string | null = null;
  tip: string | null = null;
  /** timestamp_utc of the last entry added; null before any. */
  tipTimestamp: string | null = null;
  length = 0;
  /** sequence_number of the last entry added; -1 before any. */
  lastSequence = -1;
  /** The chain's tree over the entries added. */
  readonly tree = MerkleFrontier.empty();
  readonly counters = { tool_calls: 0, allowed: 0, refused: 0, faulted: 0 };
  readonly entry_counts: Record<string, number> = {};

  /** Adds the chain's next entries (sequence order, each after {@link lastSequence}). */
  add(entries: readonly ChainEntry[]): void {
    for (const e of entries) {
      if (e.sequence_number <= this.lastSequence) continue;
      this.root ??= e.entry_hash;
      this.tip = e.entry_hash;
      this.tipTimestamp = e.timestamp_utc;
      this.length++;
      this.lastSequence = e.sequence_number;
      this.tree.appendEntryHash(e.entry_hash);
      this.entry_counts[e.entry_type] = (this.entry_counts[e.entry_type] ?? 0) + 1;
      if (e.entry_type !== 'tool_call') continue;
      this.counters.tool_calls++;
      if (e.disposition === 'refused') this.counters.refused++;
      else if (e.disposition === 'completed' && !e.error_code) this.counters.allowed++;
      else this.counters.faulted++;
    }
  }

  /** The chain tip the summary reaches (what the next entry is built after), or undefined when empty. */
  chainTip(): ChainTip | undefined {
    if (!this.tip || this.tipTimestamp === null) return undefined;
    return { sequence_number: this.lastSequence, entry_hash: this.tip, timestamp_utc: this.tipTimestamp };
  }
}

/**
 * The claim of a chain summarised in `summary`, without its signature, following `prev` in the
 * claim chain (docs/spec/claims.md#claim-version-2). `closing`, when given, is the
 * `session_close` entry still to be written after the summary's tip: the claim counts it, ends at
 * it, and its tree head includes it.
 * @throws Error when the chain has no entry, or `closing` is a tool_call.
 */
export function unsignedClaim(
  summary: ChainSummary,
  inp: ClaimInputs,
  prev: ClaimTip | undefined,
  closing?: Pick<AuditEntry, 'entry_type' | 'entry_hash'>,
): UnsignedTreeHeadClaim {
  const root = summary.root ?? closing?.entry_hash;
  const tip = closing?.entry_hash ?? summary.tip;
  if (!root || !tip) throw new Error(`session ${inp.sessionId} has no chain`);
  if (closing?.entry_type === 'tool_call') throw new Error('a closing entry cannot be a tool_call');
  const entryCounts = { ...summary.entry_counts };
  const tree = summary.tree.clone();
  if (closing) {
    entryCounts[closing.entry_type] = (entryCounts[closing.entry_type] ?? 0) + 1;
    tree.appendEntryHash(closing.entry_hash);
  }
  return {
    claim_version: CLAIM_VERSION_TREE_HEAD,
    profile: CLAIM_PROFILE,
    issued_at: new Date().toISOString(),
    session_id: inp.sessionId,
    agent_id: inp.agentId,
    gateway_measurement: inp.binding.preimage.gateway_measurement,
    policy_bundle_hash: inp.binding.preimage.policy_bundle_hash,
    enforcement_mode: inp.enforcementMode,
    catalog_hash: inp.binding.preimage.catalog_hash,
    cnf: { jwk: inp.jwk },
    audit_chain: { chain_id: inp.sessionId, root, tip, length: tree.size },
    tree_head: { size: tree.size, root: tree.root().toString('hex') },
    counters: { ...summary.counters },
    entry_counts: entryCounts,
    binding: {
      preimage: inp.binding.preimage,
      ...(inp.binding.batch ? { batch: inp.binding.batch } : {}),
    },
    evidence: inp.binding.evidence,
    claim_sequence: prev ? prev.claim_sequence + 1 : 0,
    prev_claim_hash: prev ? prev.claim_hash : null,
  };
}

/**
 * `unsigned` signed with the gateway's Ed25519 key over its JCS (docs/spec/claims.md), with the
 * stored canonical text and that text's bare hex SHA-256 (the next claim's prev_claim_hash). A
 * claim of a few KB: signed on the event loop in well under a millisecond.
 */
export function signedClaim(unsigned: UnsignedTreeHeadClaim, key: KeyObject): IssuedClaim {
  const claim = signClaim(unsigned, key);
  const canonical = Buffer.from(canonicalJson(claim), 'utf8');
  return { claim, canonical, claimHash: sha256Hex(canonical) };
}

/** A signed claim with its stored canonical text (UTF-8 JCS) and that text's bare hex SHA-256. */
export type SignedClaim = IssuedClaim;
