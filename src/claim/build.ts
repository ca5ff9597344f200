/**
 * Builds a session's TRACE claim (docs/spec/claims.md; signed by ./issuer.ts) from what the chain
 * and the session row hold: the chain's root/tip/length, a transcript of its tool_call entries (tool,
 * decision, matched policy ids, disposition — never arguments or execution ids), every entry
 * counted by type (relayed resource reads, prompt gets, … beside tool calls), and the binding section
 * recorded at session creation.
 */
import { type KeyObject, randomUUID } from 'node:crypto';
import type { AuditEntry, Ed25519Jwk, SessionBatchJson, SessionBindingPreimage } from '@cmcp/verify/formats';
import {
  CLAIM_PROFILE,
  type Claim,
  canonicalJson,
  type EvidenceJson,
  type TranscriptLine,
  type UnsignedClaim,
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

const COMMA = Buffer.from(',');

/**
 * What a claim states about its chain (docs/spec/claims.md: audit_chain, transcript, counters,
 * entry_counts), gathered entry by entry so that a long chain can be read in pages between
 * which the event loop runs. Each transcript line is kept only as its JCS text (RFC 8785), as
 * UTF-8 in Buffers, made as it is added: signing never serialises the whole transcript in one
 * piece, and a long chain's lines are not JavaScript objects held until the claim is signed —
 * those survived the young-generation GC, which copied them (~1.3 MB for 10,000 lines) in
 * pauses of 1–3 ms inside a close. The lines as objects ({@link transcript}) are parsed from
 * that text when asked for.
 */
export class ChainSummary {
  root: string | null = null;
  tip: string | null = null;
  /** timestamp_utc of the last entry added; null before any. */
  tipTimestamp: string | null = null;
  length = 0;
  /** sequence_number of the last entry added; -1 before any. */
  lastSequence = -1;
  /** UTF-8 JCS of the transcript's lines, comma-joined one page (one {@link add}) per piece. */
  private readonly transcriptPieces: Buffer[] = [];
  readonly counters = { tool_calls: 0, allowed: 0, refused: 0, faulted: 0 };
  readonly entry_counts: Record<string, number> = {};

  /** Adds the chain's next entries (sequence order, each after {@link lastSequence}). */
  add(entries: readonly ChainEntry[]): void {
    const jcs: string[] = [];
    for (const e of entries) {
      if (e.sequence_number <= this.lastSequence) continue;
      this.root ??= e.entry_hash;
      this.tip = e.entry_hash;
      this.tipTimestamp = e.timestamp_utc;
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
      jcs.push(canonicalJson(line));
      this.counters.tool_calls++;
      if (e.disposition === 'refused') this.counters.refused++;
      else if (e.disposition === 'completed' && !e.error_code) this.counters.allowed++;
      else this.counters.faulted++;
    }
    if (jcs.length > 0) this.transcriptPieces.push(Buffer.from(jcs.join(','), 'utf8'));
  }

  /**
   * The transcript's lines (docs/spec/claims.md), parsed from their JCS text: a new array at
   * each call, ~5–10 ms for 10,000 lines, so a close never asks for it on the event loop (the
   * claim's own `transcript` is parsed only when read: {@link unsignedClaim}).
   */
  get transcript(): TranscriptLine[] {
    return JSON.parse(Buffer.concat(this.transcriptBytes()).toString('utf8')) as TranscriptLine[];
  }

  /** The chain tip the summary reaches (what the next entry is built after), or undefined when empty. */
  chainTip(): ChainTip | undefined {
    if (!this.tip || this.tipTimestamp === null) return undefined;
    return { sequence_number: this.lastSequence, entry_hash: this.tip, timestamp_utc: this.tipTimestamp };
  }

  /**
   * UTF-8 JCS (RFC 8785 §3.2) of the transcript array, in pieces to be joined: its lines' JCS,
   * comma-joined, in brackets (joined only once, inside the claim's text: {@link claimBytes}).
   */
  transcriptBytes(): Buffer[] {
    const parts: Buffer[] = [Buffer.from('[')];
    this.transcriptPieces.forEach((p, i) => {
      if (i > 0) parts.push(COMMA);
      parts.push(p);
    });
    parts.push(Buffer.from(']'));
    return parts;
  }
}

/**
 * The claim of a chain summarised in `summary`, without its signature, following `prev` in the
 * claim chain (docs/spec/claims.md). `closing`, when given, is the `session_close` entry still
 * to be written after the summary's tip: the claim counts it and ends at it.
 * @throws Error when the chain has no entry, or `closing` is a tool_call (it would need a transcript line).
 */
export function unsignedClaim(
  summary: ChainSummary,
  inp: ClaimInputs,
  prev: ClaimTip | undefined,
  closing?: Pick<AuditEntry, 'entry_type' | 'entry_hash'>,
): UnsignedClaim {
  const root = summary.root ?? closing?.entry_hash;
  const tip = closing?.entry_hash ?? summary.tip;
  if (!root || !tip) throw new Error(`session ${inp.sessionId} has no chain`);
  if (closing?.entry_type === 'tool_call') throw new Error('a closing entry cannot be a tool_call');
  const entryCounts = { ...summary.entry_counts };
  if (closing) entryCounts[closing.entry_type] = (entryCounts[closing.entry_type] ?? 0) + 1;
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
    audit_chain: { chain_id: inp.sessionId, root, tip, length: summary.length + (closing ? 1 : 0) },
    transcript: [], // replaced below by the lines parsed when first read
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
  lazyTranscript(unsigned, () => summary.transcript);
  return unsigned;
}

/**
 * Makes `claim.transcript` the lines `parse` gives, parsed when first read (then a plain
 * value): the claim is signed and stored from the transcript's JCS bytes (claimBytes), so a
 * close that only answers with the stored text never parses 10,000 lines on the event loop.
 * Reading, writing, spreading or serialising the claim sees an ordinary enumerable member.
 */
function lazyTranscript(claim: UnsignedClaim, parse: () => TranscriptLine[]): void {
  // `this`, not `claim`: withSignature copies these accessors to the signed claim.
  const settle = (on: object, value: TranscriptLine[]) => {
    Object.defineProperty(on, 'transcript', { value, writable: true, enumerable: true, configurable: true });
    return value;
  };
  Object.defineProperty(claim, 'transcript', {
    get(this: object) {
      return settle(this, parse());
    },
    set(this: object, value: TranscriptLine[]) {
      settle(this, value);
    },
    enumerable: true,
    configurable: true,
  });
}

/**
 * `unsigned` with its `signature` (base64url of the Ed25519 signature, docs/spec/claims.md),
 * a new object whose transcript is still parsed only when first read ({@link unsignedClaim}).
 */
export function withSignature(unsigned: UnsignedClaim, signature: Buffer): Claim {
  const claim = Object.defineProperties({}, Object.getOwnPropertyDescriptors(unsigned)) as Claim;
  claim.signature = signature.toString('base64url');
  return claim;
}

/** A signed claim with its stored canonical text (UTF-8 JCS) and that text's bare hex SHA-256. */
export type SignedClaim = IssuedClaim;

/**
 * UTF-8 JCS (RFC 8785) of a claim whose transcript's JCS bytes are already known: the rest of
 * the claim is canonicalised with a unique placeholder string where the transcript goes, and
 * the placeholder's JSON string is replaced by `transcript` (given whole or in pieces) — an
 * array's JCS is its elements' JCS joined by commas in brackets (§3.2), whatever surrounds it.
 * The result is what canonicalJson(claim) gives (test/claim-close-paged.test.ts), without
 * serialising every transcript line again in one piece.
 */
export function claimBytes(claim: UnsignedClaim | Claim, transcript: Buffer | readonly Buffer[]): Buffer {
  return Buffer.concat(claimPieces(claim, transcript));
}

/**
 * {@link claimBytes} as the pieces to be joined, in order (the text before the transcript, the
 * transcript's pieces, the text after it), for a caller that copies them a slice at a time
 * (claim/sign.ts): a 10,000-call claim is ~1.5 MB, and copying it into fresh memory costs
 * ~1.2–2 ms of page faults in one go.
 */
export function claimPieces(claim: UnsignedClaim | Claim, transcript: Buffer | readonly Buffer[]): Buffer[] {
  const placeholder = `cmcp-transcript-${randomUUID()}`;
  // Every member but the transcript, which is not read (it may be parsed only when read).
  const rest: Record<string, unknown> = { transcript: placeholder };
  for (const key of Object.keys(claim))
    if (key !== 'transcript') rest[key] = claim[key as keyof typeof claim];
  const text = canonicalJson(rest);
  const quoted = JSON.stringify(placeholder);
  const at = text.indexOf(quoted);
  if (at < 0 || text.indexOf(quoted, at + 1) >= 0) return [Buffer.from(canonicalJson(claim), 'utf8')];
  return [
    Buffer.from(text.slice(0, at), 'utf8'),
    ...(Buffer.isBuffer(transcript) ? [transcript] : transcript),
    Buffer.from(text.slice(at + quoted.length), 'utf8'),
  ];
}
