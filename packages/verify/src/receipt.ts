/**
 * Receipt verification for relying parties (docs/spec/transparency.md#receipts): that this entry
 * — this call, its disposition and digests — is in the log of a gateway whose key hardware
 * evidence binds, offline, without the bundle and before the session closes.
 *
 * Checks, in order (ids stable): the claim's checks when a claim supplies the key, `gateway.key`,
 * `receipt.shape`, `receipt.entry` (the entry supplied hashes to `entry_hash` and names the same
 * chain, session, call and sequence number), `receipt.leaf_index` (= sequence_number), `receipt.proof`
 * (present, or `absent` RECEIPT_PENDING), `receipt.checkpoint` (a C2SP signed note under a
 * gateway key), `receipt.session` (the checkpoint's origin names the receipt's chain),
 * `receipt.inclusion` (RFC 9162 §2.1.3.2 against the checkpoint's root), then
 * `checkpoint.consistency` when other tree heads of the session are given (./checkpoints.ts).
 */
import { z } from 'zod';
import {
  consistencyCheck,
  type GatewayKeySource,
  type GatewayKeys,
  gatewayKeys,
  openCheckpoint,
  proofsOf,
  type SignedTreeHead,
  transparencyReport,
} from './checkpoints.js';
import type { Ed25519Jwk } from './format/binding.js';
import { sha256Hex } from './format/canonical.js';
import { type CheckResult, check, fail, pass, quoteUntrusted, type VerificationReport } from './result.js';
import type { ChainCheckpoint } from './transparency/checkpoint.js';
import { rootFromInclusionProof } from './transparency/proofs.js';
import type { ConsistencyProofJson, ReceiptJson } from './transparency/receipt.js';
import { entryLeafHash } from './transparency/tree.js';

const hex64 = z.string().regex(/^[0-9a-f]{64}$/);
const int0 = z.number().int().min(0).max(Number.MAX_SAFE_INTEGER);

/** zod schema of a receipt (packages/verify/src/transparency/receipt.ts `ReceiptJson`). */
export const receiptSchema = z.object({
  receipt_version: z.literal(1),
  chain_id: z.string().min(1),
  session_id: z.string().nullable(),
  call_id: z.string().nullable(),
  entry_hash: hex64,
  sequence_number: int0,
  leaf_index: int0,
  inclusion: z
    .object({
      tree_size: int0,
      inclusion_proof: z.array(hex64).max(64),
      checkpoint: z.string().max(64 * 1024),
    })
    .nullable(),
  fetch: z.string().nullable(),
});

/** Options of {@link verifyReceipt}: where the gateway keys come from, and what else is known. */
export interface VerifyReceiptOptions extends GatewayKeySource {
  /** The entry the receipt is for: `{canonical, entry_hash}` as in a bundle, or its canonical text. */
  entry?: unknown;
  /** Other signed checkpoint notes of the session, compared with the receipt's. */
  checkpoints?: readonly string[];
  /** Answers of `GET /sessions/{id}/consistency` between their sizes. */
  consistency?: readonly ConsistencyProofJson[];
}

/** `receipt.entry`: the entry supplied is the receipt's (hash, chain, call, sequence number). */
function entryCheck(r: ReceiptJson, entry: unknown): CheckResult {
  if (entry === undefined)
    return check('receipt.entry', 'not-applicable', 'NOT_SUPPLIED', 'no entry supplied');
  const canonical = typeof entry === 'string' ? entry : (entry as { canonical?: unknown } | null)?.canonical;
  if (typeof canonical !== 'string')
    return fail('receipt.entry', 'RECEIPT_ENTRY_MISMATCH', 'the entry has no canonical text');
  const hash = sha256Hex(canonical);
  if (hash !== r.entry_hash)
    return fail(
      'receipt.entry',
      'RECEIPT_ENTRY_MISMATCH',
      `the entry's text hashes to ${hash}, the receipt says ${r.entry_hash}`,
    );
  let body: Record<string, unknown>;
  try {
    body = JSON.parse(canonical) as Record<string, unknown>;
  } catch {
    return fail('receipt.entry', 'RECEIPT_ENTRY_MISMATCH', 'the entry text is not JSON');
  }
  for (const m of ['chain_id', 'session_id', 'call_id', 'sequence_number'] as const)
    if (body[m] !== r[m])
      return fail(
        'receipt.entry',
        'RECEIPT_ENTRY_MISMATCH',
        `the entry's ${m} is ${quoteUntrusted(body[m])}, the receipt's ${quoteUntrusted(r[m])}`,
      );
  return pass(
    'receipt.entry',
    `entry ${r.sequence_number} of ${quoteUntrusted(r.chain_id)} hashes to the receipt's entry_hash`,
  );
}

/** `receipt.inclusion`: the proof leads from the entry's leaf to the checkpoint's root. */
function inclusionCheck(
  r: ReceiptJson,
  inc: NonNullable<ReceiptJson['inclusion']>,
  cp: ChainCheckpoint,
): CheckResult {
  if (inc.tree_size !== cp.size)
    return fail(
      'receipt.inclusion',
      'RECEIPT_PROOF_MALFORMED',
      `the proof is for size ${inc.tree_size}, the checkpoint has ${cp.size}`,
    );
  if (r.leaf_index >= inc.tree_size)
    return fail(
      'receipt.inclusion',
      'RECEIPT_PROOF_MALFORMED',
      `leaf ${r.leaf_index} is not in a tree of ${inc.tree_size}`,
    );
  const proof = inc.inclusion_proof.map((h) => Buffer.from(h, 'hex'));
  const root = rootFromInclusionProof(entryLeafHash(r.entry_hash), r.leaf_index, inc.tree_size, proof);
  if (root === null)
    return fail(
      'receipt.inclusion',
      'RECEIPT_PROOF_MALFORMED',
      `${proof.length} hashes is not the proof length of leaf ${r.leaf_index} in a tree of ${inc.tree_size}`,
    );
  if (!root.equals(cp.root))
    return fail(
      'receipt.inclusion',
      'RECEIPT_ROOT_MISMATCH',
      `the proof leads to ${root.toString('hex')}, the checkpoint's root is ${cp.root.toString('hex')}`,
    );
  return pass('receipt.inclusion', `leaf ${r.leaf_index} is in the signed tree of ${cp.size} entries`);
}

/** The other tree heads of the session: checkpoints given, and a version 2 claim's of this session. */
function otherHeads(
  r: ReceiptJson,
  k: GatewayKeys,
  notes: readonly string[],
  checks: CheckResult[],
): SignedTreeHead[] | null {
  const heads: SignedTreeHead[] = [];
  for (const [i, note] of notes.entries()) {
    const o = openCheckpoint(note, k.keys);
    if (!o.ok) {
      checks.push(fail('checkpoint.consistency', o.reason, `checkpoint ${i + 1}: ${o.detail}`));
      return null;
    }
    if (o.checkpoint.chain_id !== r.chain_id) {
      checks.push(
        fail(
          'checkpoint.consistency',
          'RECEIPT_SESSION_MISMATCH',
          `checkpoint ${i + 1} is of chain ${quoteUntrusted(o.checkpoint.chain_id)}`,
        ),
      );
      return null;
    }
    heads.push({ source: `checkpoint ${i + 1}`, size: o.checkpoint.size, root: o.checkpoint.root });
  }
  if (k.claimHead && k.claimHead.session_id === r.chain_id)
    heads.push({ source: 'the claim', ...k.claimHead });
  return heads;
}

/**
 * Verifies a receipt (parsed JSON of unknown shape) with the gateway keys of `opts` and returns
 * the report. The verdict is the claim's (the key's binding to hardware evidence) when every
 * receipt check passes, `invalid` when one fails; `accepted` is false while the receipt is
 * pending. Never throws on bad input.
 */
export function verifyReceipt(receipt: unknown, opts: VerifyReceiptOptions): VerificationReport {
  const k = gatewayKeys(opts);
  const checks = [...k.checks];
  let signedBy: Ed25519Jwk | undefined;
  let pending = false;
  const done = () =>
    transparencyReport(k, checks, {
      pending,
      signedByPinned: signedBy !== undefined && (opts.pinnedKeys ?? []).some((p) => p.x === signedBy?.x),
      notes: [],
    });
  const shape = receiptSchema.safeParse(receipt);
  if (!shape.success) {
    const issue = shape.error.issues[0];
    checks.push(
      fail(
        'receipt.shape',
        'RECEIPT_MALFORMED',
        `${issue?.path.join('.') || '(root)'}: ${issue?.message ?? ''}`.slice(0, 160),
      ),
    );
    return done();
  }
  const r = shape.data as ReceiptJson;
  checks.push(
    pass('receipt.shape', `receipt v1 of entry ${r.sequence_number} in ${quoteUntrusted(r.chain_id)}`),
  );
  checks.push(entryCheck(r, opts.entry));
  checks.push(
    r.leaf_index === r.sequence_number
      ? pass('receipt.leaf_index', `leaf ${r.leaf_index} is sequence number ${r.sequence_number}`)
      : fail(
          'receipt.leaf_index',
          'RECEIPT_LEAF_INDEX_MISMATCH',
          `leaf_index ${r.leaf_index}, sequence_number ${r.sequence_number}`,
        ),
  );
  if (r.inclusion === null) {
    pending = true;
    checks.push(
      check(
        'receipt.proof',
        'absent',
        'RECEIPT_PENDING',
        `no inclusion proof yet: fetch ${quoteUntrusted(r.fetch ?? 'the receipt again')}`,
      ),
    );
    return done();
  }
  checks.push(pass('receipt.proof', `an inclusion proof of ${r.inclusion.inclusion_proof.length} hashes`));
  const o = openCheckpoint(r.inclusion.checkpoint, k.keys);
  if (!o.ok) {
    checks.push(fail('receipt.checkpoint', o.reason, o.detail));
    return done();
  }
  signedBy = o.key;
  checks.push(
    pass('receipt.checkpoint', `signed by the gateway key ${o.key.x.slice(0, 12)}… at ${o.checkpoint.time}`),
  );
  checks.push(
    o.checkpoint.chain_id === r.chain_id
      ? pass('receipt.session', `the checkpoint is of chain ${quoteUntrusted(r.chain_id)}`)
      : fail(
          'receipt.session',
          'RECEIPT_SESSION_MISMATCH',
          `the checkpoint is of chain ${quoteUntrusted(o.checkpoint.chain_id)}, the receipt of ${quoteUntrusted(r.chain_id)}`,
        ),
  );
  checks.push(inclusionCheck(r, r.inclusion, o.checkpoint));
  const others = otherHeads(r, k, opts.checkpoints ?? [], checks);
  if (others && others.length > 0) {
    const mine = { source: 'the receipt', size: o.checkpoint.size, root: o.checkpoint.root };
    checks.push(
      consistencyCheck(
        [mine, ...others],
        proofsOf(opts.consistency, r.chain_id),
        undefined,
        k.claimHead?.session_id === r.chain_id ? k.claimHead.size : undefined,
      ),
    );
  }
  return done();
}
