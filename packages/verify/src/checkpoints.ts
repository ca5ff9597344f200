/**
 * Signed tree heads of one session against each other (docs/spec/transparency.md#consistency-proofs):
 * checkpoints the gateway signed, and a claim version 2's tree head, must describe one growing
 * tree. Two of the same size with different roots, or a larger one that the consistency proof
 * (RFC 9162 §2.1.4.2) or the bundle's entries do not show extends a smaller one, is equivocation
 * (`CHECKPOINT_EQUIVOCATION`). Each checkpoint must first verify under a gateway key
 * (`CHECKPOINT_SIGNER_UNKNOWN` otherwise).
 */
import { verifyBundle } from './bundle.js';
import { type VerifyClaimOptions, verifyClaim } from './claim.js';
import { claimSchemaFor } from './claim-schema.js';
import type { Ed25519Jwk } from './format/binding.js';
import {
  type CheckResult,
  check,
  fail,
  pass,
  quoteUntrusted,
  type Verdict,
  type VerificationReport,
} from './result.js';
import { type ChainCheckpoint, verifyChainCheckpoint } from './transparency/checkpoint.js';
import { TransparencyError } from './transparency/errors.js';
import { verifyConsistency } from './transparency/proofs.js';
import type { ConsistencyProofJson } from './transparency/receipt.js';
import { entryLeafHash, leafNodeReader, subtreeRoot } from './transparency/tree.js';

/** A tree head to compare: from a checkpoint (named by where it came from) or from a claim. */
export interface SignedTreeHead {
  /** Where it came from, for the report (a file name, "the receipt", "the claim"). */
  source: string;
  size: number;
  root: Buffer;
}

/**
 * Verifies one checkpoint note under the gateway keys and reads it.
 * @returns the checkpoint, or a failed check's reason and text.
 */
export function openCheckpoint(
  note: string,
  keys: readonly Ed25519Jwk[],
):
  | { ok: true; checkpoint: ChainCheckpoint; key: Ed25519Jwk }
  | { ok: false; reason: 'CHECKPOINT_MALFORMED' | 'CHECKPOINT_SIGNER_UNKNOWN'; detail: string } {
  try {
    const r = verifyChainCheckpoint(note, keys);
    if (r) return { ok: true, checkpoint: r.checkpoint, key: r.key };
    return {
      ok: false,
      reason: 'CHECKPOINT_SIGNER_UNKNOWN',
      detail: `no signature verifies under the ${keys.length} gateway key${keys.length === 1 ? '' : 's'} given (signed by another key, or altered)`,
    };
  } catch (e) {
    if (e instanceof TransparencyError)
      return { ok: false, reason: 'CHECKPOINT_MALFORMED', detail: e.message };
    throw e;
  }
}

/** The consistency proof between two sizes among the answers given (any JSON), if any. */
function proofFor(proofs: readonly ConsistencyProofJson[], from: number, to: number): Buffer[] | null {
  const p = proofs.find((x) => x !== null && typeof x === 'object' && x.from === from && x.to === to);
  if (
    !p ||
    !Array.isArray(p.consistency_proof) ||
    !p.consistency_proof.every((h) => /^[0-9a-f]{64}$/.test(h))
  )
    return null;
  return p.consistency_proof.map((h) => Buffer.from(h, 'hex'));
}

/**
 * `checkpoint.consistency`: every pair of tree heads of one session agrees. Same size: same root.
 * Different sizes, consecutive in size order: a consistency proof between them verifies, or —
 * given the root of every size from the bundle's entries (`rootAt`) — each head's root is the
 * root of that many entries. Without either for a pair: `not-applicable` CONSISTENCY_NOT_PROVEN.
 * With `finalSize` (a claim's tree head of the same session), a head larger than it fails.
 */
export function consistencyCheck(
  heads: readonly SignedTreeHead[],
  proofs: readonly ConsistencyProofJson[],
  rootAt?: (size: number) => Buffer | null,
  finalSize?: number,
): CheckResult {
  const sorted = [...heads].sort((a, b) => a.size - b.size);
  // A closed session's claim fixes its final size: nothing may be signed beyond it.
  const beyond = finalSize === undefined ? undefined : sorted.find((h) => h.size > finalSize);
  if (beyond)
    return fail(
      'checkpoint.consistency',
      'CHECKPOINT_EQUIVOCATION',
      `${quoteUntrusted(beyond.source)} has size ${beyond.size}, beyond the claim's final tree of ${finalSize}`,
    );
  // With the bundle: every head within it must be the root of that many entries.
  for (const h of sorted) {
    const r = rootAt?.(h.size);
    if (r && !r.equals(h.root))
      return fail(
        'checkpoint.consistency',
        'CHECKPOINT_EQUIVOCATION',
        `${quoteUntrusted(h.source)} (size ${h.size}) is not the root of the bundle's first ${h.size} entries`,
      );
  }
  const fromBundle = (h: SignedTreeHead) => rootAt?.(h.size) != null;
  let unproven = 0;
  for (let i = 1; i < sorted.length; i++) {
    const [a, b] = [sorted[i - 1] as SignedTreeHead, sorted[i] as SignedTreeHead];
    if (a.size === b.size) {
      if (!a.root.equals(b.root))
        return fail(
          'checkpoint.consistency',
          'CHECKPOINT_EQUIVOCATION',
          `${quoteUntrusted(a.source)} and ${quoteUntrusted(b.source)} both have size ${a.size} and different roots`,
        );
      continue;
    }
    const proof = proofFor(proofs, a.size, b.size);
    if (proof) {
      if (!verifyConsistency(a.size, b.size, proof, a.root, b.root))
        return fail(
          'checkpoint.consistency',
          'CHECKPOINT_EQUIVOCATION',
          `the consistency proof does not show ${quoteUntrusted(b.source)} (size ${b.size}) extends ${quoteUntrusted(a.source)} (size ${a.size})`,
        );
      continue;
    }
    if (!(fromBundle(a) && fromBundle(b))) unproven++;
  }
  if (unproven > 0)
    return check(
      'checkpoint.consistency',
      'not-applicable',
      'CONSISTENCY_NOT_PROVEN',
      `${unproven} pair${unproven === 1 ? '' : 's'} of different sizes without a consistency proof`,
    );
  return pass('checkpoint.consistency', `${sorted.length} tree heads of one growing tree`);
}

/** Where the gateway keys that may sign checkpoints come from. */
export interface GatewayKeySource {
  /**
   * A claim signed by the gateway key — of this session or another one the same gateway process
   * closed (the key lives as long as the process): its verification binds the key to hardware
   * evidence, and its verdict is the report's at best.
   */
  claim?: unknown;
  /** Options of that claim's verification (trust store, reference values, require, …). */
  claimOptions?: VerifyClaimOptions;
  /** Gateway keys the relying party pinned from a trusted source. */
  pinnedKeys?: readonly Ed25519Jwk[];
}

/** The keys of a {@link GatewayKeySource}, the claim's report, and the `gateway.key` check. */
export interface GatewayKeys {
  keys: Ed25519Jwk[];
  claimReport?: VerificationReport;
  /** The claim's session and tree head (version 2), to compare checkpoints of that session with. */
  claimHead?: { session_id: string; size: number; root: Buffer };
  checks: CheckResult[];
}

/**
 * Verifies the claim (when given) and collects the gateway keys it binds — `cnf.jwk`, and every
 * listed replica's key for a `/2` claim — with the pinned ones. Adds `gateway.key`: pass with the
 * keys' origin; fail DEPENDENCY_FAILED when the claim's signature failed and nothing is pinned.
 */
export function gatewayKeys(src: GatewayKeySource): GatewayKeys {
  const keys: Ed25519Jwk[] = [...(src.pinnedKeys ?? [])];
  const checks: CheckResult[] = [];
  let claimReport: VerificationReport | undefined;
  let claimHead: GatewayKeys['claimHead'];
  if (src.claim !== undefined) {
    claimReport = verifyClaim(src.claim, src.claimOptions ?? {});
    checks.push(...claimReport.checks);
    const parsed = claimSchemaFor(src.claim).safeParse(src.claim);
    const signed = claimReport.checks.find((c) => c.id === 'claim.signature')?.status === 'pass';
    if (parsed.success && signed) {
      keys.push(parsed.data.cnf.jwk, ...(parsed.data.replicas ?? []).map((r) => r.cnf.jwk));
      const head = parsed.data.tree_head;
      if (head)
        claimHead = {
          session_id: parsed.data.session_id,
          size: head.size,
          root: Buffer.from(head.root, 'hex'),
        };
    }
  }
  if (keys.length === 0)
    checks.push(
      fail(
        'gateway.key',
        'DEPENDENCY_FAILED',
        src.claim === undefined
          ? 'no claim and no pinned key: no gateway key to check signatures with'
          : 'the claim signature did not verify and no key is pinned',
      ),
    );
  else
    checks.push(
      pass(
        'gateway.key',
        [
          src.claim !== undefined && claimReport
            ? `the claim's key${keys.length - (src.pinnedKeys?.length ?? 0) === 1 ? '' : 's'} (claim verdict ${claimReport.verdict})`
            : '',
          src.pinnedKeys?.length
            ? `${src.pinnedKeys.length} pinned key${src.pinnedKeys.length === 1 ? '' : 's'}`
            : '',
        ]
          .filter(Boolean)
          .join(' and '),
      ),
    );
  return { keys, checks, ...(claimReport ? { claimReport } : {}), ...(claimHead ? { claimHead } : {}) };
}

/**
 * The report of checks over gateway keys: verdict `invalid` on any failed check, else the
 * claim's verdict (`signed-only` when the signing key is pinned and no claim vouches for it);
 * accepted when not invalid, nothing is pending, and the key that signed is pinned or the claim
 * binding it was accepted.
 */
export function transparencyReport(
  k: GatewayKeys,
  checks: CheckResult[],
  o: { pending: boolean; signedByPinned: boolean; notes: string[] },
): VerificationReport {
  const failed = checks.some((c) => c.status === 'fail');
  const verdict: Verdict = failed
    ? 'invalid'
    : o.signedByPinned
      ? 'signed-only'
      : (k.claimReport?.verdict ?? 'invalid');
  const vouched = o.signedByPinned || k.claimReport?.accepted === true;
  return {
    verdict,
    signer: o.signedByPinned ? 'pinned-key' : (k.claimReport?.signer ?? 'self-asserted'),
    accepted: !failed && !o.pending && vouched,
    ...(k.claimReport?.required ? { required: k.claimReport.required } : {}),
    checks,
    anchors_used: k.claimReport?.anchors_used ?? [],
    notes: [...(k.claimReport?.notes ?? []), ...o.notes],
  };
}

/** The consistency answers of one session (answers of others prove nothing about it). */
export function proofsOf(
  answers: readonly ConsistencyProofJson[] | undefined,
  chain: string,
): ConsistencyProofJson[] {
  return (answers ?? []).filter((a) => a !== null && typeof a === 'object' && a.session_id === chain);
}

/** Options of {@link verifyCheckpoints}. */
export interface VerifyCheckpointsOptions extends GatewayKeySource {
  /** Answers of `GET /sessions/{id}/consistency` between the checkpoints' sizes. */
  consistency?: readonly ConsistencyProofJson[];
  /** The session's audit bundle: every checkpoint within it must be the root of its entries. */
  bundle?: unknown;
}

/** The root of the first `size` entries of a verified bundle, or null beyond it. */
function bundleRoots(bundle: unknown, checks: CheckResult[]): ((size: number) => Buffer | null) | undefined {
  const bv = verifyBundle(bundle);
  checks.push(...bv.checks);
  if (bv.checks.some((c) => c.status === 'fail')) return undefined;
  const leaves = bv.entries
    .flatMap((e) => (e.body ? [{ seq: e.body.sequence_number, hash: e.declared_hash }] : []))
    .sort((a, b) => a.seq - b.seq)
    .map((e) => entryLeafHash(e.hash));
  const read = leafNodeReader(leaves);
  return (size) => (size <= leaves.length ? subtreeRoot(0, size, read) : null);
}

/**
 * Verifies signed checkpoints of one session against each other (`cmcp-verify consistency`):
 * `gateway.key`, `checkpoint.signature` (each under a gateway key), `checkpoint.session` (one
 * chain), then the bundle's checks when given, and `checkpoint.consistency` (equivocation:
 * CHECKPOINT_EQUIVOCATION). A version 2 claim of the same session adds its final tree head.
 * Never throws on bad input.
 */
export function verifyCheckpoints(
  notes: readonly string[],
  opts: VerifyCheckpointsOptions,
): VerificationReport {
  const k = gatewayKeys(opts);
  const checks = [...k.checks];
  const heads: SignedTreeHead[] = [];
  const chains = new Set<string>();
  let pinnedOnly = true;
  for (const [i, note] of notes.entries()) {
    const o = openCheckpoint(note, k.keys);
    if (!o.ok) {
      checks.push(fail('checkpoint.signature', o.reason, `checkpoint ${i + 1}: ${o.detail}`));
      return transparencyReport(k, checks, { pending: false, signedByPinned: false, notes: [] });
    }
    if (!(opts.pinnedKeys ?? []).some((p) => p.x === o.key.x)) pinnedOnly = false;
    chains.add(o.checkpoint.chain_id);
    heads.push({ source: `checkpoint ${i + 1}`, size: o.checkpoint.size, root: o.checkpoint.root });
  }
  checks.push(pass('checkpoint.signature', `${notes.length} checkpoints signed by gateway keys`));
  if (chains.size !== 1) {
    checks.push(
      fail('checkpoint.session', 'RECEIPT_SESSION_MISMATCH', `checkpoints of ${chains.size} chains`),
    );
    return transparencyReport(k, checks, { pending: false, signedByPinned: pinnedOnly, notes: [] });
  }
  const [chain] = [...chains] as [string];
  checks.push(pass('checkpoint.session', `all of chain ${quoteUntrusted(chain)}`));
  const sameSession = k.claimHead?.session_id === chain ? k.claimHead : undefined;
  if (sameSession) heads.push({ source: 'the claim', ...sameSession });
  const rootAt = opts.bundle === undefined ? undefined : bundleRoots(opts.bundle, checks);
  checks.push(consistencyCheck(heads, proofsOf(opts.consistency, chain), rootAt, sameSession?.size));
  return transparencyReport(k, checks, {
    pending: false,
    signedByPinned: pinnedOnly && notes.length > 0,
    notes: [],
  });
}
