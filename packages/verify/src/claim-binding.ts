/**
 * The binding checks of a claim (docs/spec/binding.md): the preimage's key thumbprint (RFC 7638), session,
 * chain root and hashed fields, the challenge, a batched binding's RFC 6962 inclusion proof, and
 * REPORT_DATA = thumbprint ‖ SHA-256(JCS(preimage)) (single binding) or thumbprint ‖ batch digest.
 */
import type { ParsedClaim } from './claim-schema.js';
import { tryB64u } from './common/kind.js';
import { MerkleError, merkleLeafHash, rootFromAuditPath } from './crypto/merkle.js';
import {
  BATCH_MAX_TREE_SIZE,
  batchDigest,
  bindingDigest,
  jwkThumbprint,
  reportData,
  type SessionBatchJson,
} from './format/binding.js';
import { b64u } from './format/canonical.js';
import type { Claim } from './format/claim.js';
import { type CheckResult, check, fail, pass, quoteUntrusted } from './result.js';

/**
 * `binding.key_thumbprint`; returns the thumbprint of cnf.jwk, or null when it cannot be computed.
 * @param jwk the key the binding must name: cnf.jwk, or for a `/2` claim the listed replica's
 *   key the preimage names (claim-replicas.ts bindingReplicaJwk; undefined: none listed).
 */
export function keyThumbprintCheck(
  c: ParsedClaim,
  checks: CheckResult[],
  jwk: ParsedClaim['cnf']['jwk'] | undefined = c.cnf.jwk,
): Buffer | null {
  const pre = c.binding.preimage;
  if (!jwk) {
    checks.push(
      fail(
        'binding.key_thumbprint',
        'KEY_THUMBPRINT_MISMATCH',
        `preimage key_thumbprint ${quoteUntrusted(pre.key_thumbprint, 48)} is not the key of any listed replica`,
      ),
    );
    return null;
  }
  let thumb: Buffer | null = null;
  try {
    thumb = jwkThumbprint(jwk);
  } catch {
    thumb = null;
  }
  if (!thumb) {
    checks.push(
      fail(
        'binding.key_thumbprint',
        'CLAIM_KEY_INVALID',
        'cannot compute the RFC 7638 thumbprint of cnf.jwk',
      ),
    );
  } else if (b64u(thumb) !== pre.key_thumbprint) {
    checks.push(
      fail(
        'binding.key_thumbprint',
        'KEY_THUMBPRINT_MISMATCH',
        `preimage key_thumbprint ${quoteUntrusted(pre.key_thumbprint, 48)} is not the RFC 7638 thumbprint ${b64u(thumb)} of cnf.jwk`,
      ),
    );
  } else {
    checks.push(
      pass('binding.key_thumbprint', 'preimage key_thumbprint is the RFC 7638 thumbprint of cnf.jwk'),
    );
  }
  return thumb;
}

/**
 * `binding.session`, `binding.chain_root`, `binding.preimage`; returns SHA-256(JCS(preimage))
 * of the preimage as given (`raw`), or null when it is not canonicalisable.
 */
export function preimageChecks(c: ParsedClaim, raw: Claim, checks: CheckResult[]): Buffer | null {
  const pre = c.binding.preimage;
  checks.push(
    pre.session_id === c.session_id
      ? pass('binding.session', 'preimage session_id equals the claim session_id')
      : fail(
          'binding.session',
          'PREIMAGE_SESSION_MISMATCH',
          `preimage session ${quoteUntrusted(pre.session_id)} ≠ claim session ${quoteUntrusted(c.session_id)}`,
        ),
  );
  checks.push(
    pre.chain_root === c.audit_chain.root
      ? pass('binding.chain_root', 'preimage chain_root equals audit_chain.root')
      : fail(
          'binding.chain_root',
          'PREIMAGE_CHAIN_ROOT_MISMATCH',
          `preimage chain_root ${quoteUntrusted(pre.chain_root)} ≠ audit_chain.root ${c.audit_chain.root}`,
        ),
  );
  let digest: Buffer | null = null;
  {
    const fieldsDiffer = (['gateway_measurement', 'policy_bundle_hash', 'catalog_hash'] as const).filter(
      (k) => pre[k] !== c[k],
    );
    let canonErr: string | null = null;
    try {
      digest = bindingDigest(raw.binding.preimage);
    } catch (err) {
      canonErr = err instanceof Error ? err.message.slice(0, 120) : 'not canonicalisable';
    }
    if (pre.domain !== 'cmcp.session-binding' || pre.version !== 1) {
      checks.push(
        fail(
          'binding.preimage',
          'PREIMAGE_MALFORMED',
          `preimage domain/version ${quoteUntrusted(pre.domain, 40)}/${pre.version} is not cmcp.session-binding/1`,
        ),
      );
    } else if (canonErr) {
      checks.push(fail('binding.preimage', 'PREIMAGE_MALFORMED', canonErr));
    } else if (fieldsDiffer.length) {
      checks.push(
        fail(
          'binding.preimage',
          'PREIMAGE_FIELD_MISMATCH',
          `preimage ${fieldsDiffer.join(', ')} differ from the claim`,
        ),
      );
    } else {
      checks.push(
        pass('binding.preimage', 'preimage domain, version and hashed fields agree with the claim'),
      );
    }
  }
  return digest;
}

/** `binding.challenge`: the bound challenge against the verifier's nonce (null: none bound). */
export function challengeCheck(
  c: ParsedClaim,
  expectedChallenge: string | null | undefined,
  checks: CheckResult[],
): void {
  const pre = c.binding.preimage;
  if (expectedChallenge === undefined) {
    checks.push(
      check(
        'binding.challenge',
        'not-applicable',
        'NO_CHALLENGE_EXPECTED',
        pre.challenge === null
          ? 'no challenge expected; none bound'
          : `no challenge expected; the claim binds ${quoteUntrusted(pre.challenge, 48)} (freshness not checked)`,
      ),
    );
  } else if (pre.challenge !== expectedChallenge) {
    checks.push(
      fail(
        'binding.challenge',
        'CHALLENGE_MISMATCH',
        `bound challenge ${quoteUntrusted(pre.challenge, 48)} ≠ expected ${quoteUntrusted(expectedChallenge, 48)}`,
      ),
    );
  } else {
    checks.push(pass('binding.challenge', 'the binding carries the expected challenge'));
  }
}

/**
 * `binding.inclusion` (docs/spec/binding.md#batched-bindings): for a batched claim, the root the
 * audit path leads to from SHA-256(0x00 ‖ binding_digest) at `leaf_index` (RFC 9162 §2.1.3.2)
 * must be `binding.batch.root`. A failure names what is wrong: the tree size or the index out of
 * range, the index (the path proves the leaf at another index), the root (the path leads to
 * the root REPORT_DATA binds, the claim names another), or the proof itself.
 * @returns the 32 bytes REPORT_DATA carries after the thumbprint: the batch digest of the named
 * root and size (batched), the binding digest (single binding), or null when not computable.
 */
export function inclusionCheck(
  c: ParsedClaim,
  thumb: Buffer | null,
  digest: Buffer | null,
  checks: CheckResult[],
): Buffer | null {
  const batch = c.binding.batch;
  if (!batch) {
    checks.push(
      check(
        'binding.inclusion',
        'not-applicable',
        'BINDING_NOT_BATCHED',
        'a single binding: REPORT_DATA carries the binding digest itself',
      ),
    );
    return digest;
  }
  const { tree_size: size, leaf_index: index } = batch;
  if (!Number.isSafeInteger(size) || size < 1 || size > BATCH_MAX_TREE_SIZE) {
    checks.push(
      fail(
        'binding.inclusion',
        'TREE_SIZE_OUT_OF_RANGE',
        `tree_size ${quoteUntrusted(String(size), 24)} is not a whole number from 1 to ${BATCH_MAX_TREE_SIZE}`,
      ),
    );
    return null;
  }
  if (!Number.isSafeInteger(index) || index < 0 || index >= size) {
    checks.push(
      fail(
        'binding.inclusion',
        'LEAF_INDEX_OUT_OF_RANGE',
        `leaf_index ${quoteUntrusted(String(index), 24)} is outside a tree of ${size} leaves`,
      ),
    );
    return null;
  }
  const named = Buffer.from(batch.root, 'hex');
  const bound = batchDigest(named, size);
  if (!digest) {
    checks.push(fail('binding.inclusion', 'DEPENDENCY_FAILED', 'the binding digest could not be computed'));
    return bound;
  }
  checks.push(inclusionVerdict(c, batch, merkleLeafHash(digest), named, thumb));
  return bound;
}

/** The `binding.inclusion` result of a batch whose size and index are in range. */
function inclusionVerdict(
  c: ParsedClaim,
  batch: SessionBatchJson,
  leaf: Buffer,
  named: Buffer,
  thumb: Buffer | null,
): CheckResult {
  const { tree_size: size, leaf_index: index } = batch;
  const path = batch.audit_path.map((h) => Buffer.from(h, 'hex'));
  const proven = rootFromAuditPath(leaf, index, size, path);
  if (proven?.equals(named)) {
    return pass(
      'binding.inclusion',
      `the audit path proves the binding digest as leaf ${index} of ${size} under binding.batch.root`,
    );
  }
  const claimed = tryB64u(c.evidence.report_data);
  if (proven && thumb && claimed?.equals(reportData(thumb, batchDigest(proven, size)))) {
    return fail(
      'binding.inclusion',
      'BATCH_ROOT_MISMATCH',
      `the audit path leads to root ${proven.toString('hex')}, which REPORT_DATA binds; the claim names root ${batch.root}`,
    );
  }
  const other = provenAt(leaf, size, path, named, index);
  return other === null
    ? fail(
        'binding.inclusion',
        'INCLUSION_PROOF_INVALID',
        `the audit path does not lead from the binding digest to binding.batch.root at any index of ${size}`,
      )
    : fail(
        'binding.inclusion',
        'LEAF_INDEX_MISMATCH',
        `the audit path proves the binding digest as leaf ${other}, not leaf_index ${index}`,
      );
}

/** The index other than `except` at which `path` proves `leaf` under `root`, or null (sizes ≤ 1024). */
function provenAt(leaf: Buffer, size: number, path: Buffer[], root: Buffer, except: number): number | null {
  for (let j = 0; j < size; j++) {
    if (j === except) continue;
    try {
      if (rootFromAuditPath(leaf, j, size, path)?.equals(root)) return j;
    } catch (e) {
      if (!(e instanceof MerkleError)) throw e;
    }
  }
  return null;
}

/**
 * `binding.report_data`; returns the REPORT_DATA this claim must bind, or null.
 * @param bound what follows the thumbprint ({@link inclusionCheck}): binding or batch digest.
 */
export function reportDataCheck(
  c: ParsedClaim,
  thumb: Buffer | null,
  bound: Buffer | null,
  checks: CheckResult[],
): Buffer | null {
  const expectedReportData = thumb && bound ? reportData(thumb, bound) : null;
  const form = c.binding.batch
    ? 'key_thumbprint ‖ batch digest(binding.batch.root, tree_size)'
    : 'key_thumbprint ‖ SHA-256(JCS(preimage))';
  const claimed = tryB64u(c.evidence.report_data);
  if (claimed?.length !== 64) {
    checks.push(
      fail(
        'binding.report_data',
        'REPORT_DATA_MALFORMED',
        `report_data is ${claimed ? `${claimed.length} bytes` : 'not base64url'}, expected 64 bytes`,
      ),
    );
  } else if (!expectedReportData) {
    checks.push(
      fail(
        'binding.report_data',
        'DEPENDENCY_FAILED',
        c.binding.batch
          ? 'thumbprint or batch digest could not be computed'
          : 'thumbprint or binding digest could not be computed',
      ),
    );
  } else if (!claimed.equals(expectedReportData)) {
    checks.push(
      fail(
        'binding.report_data',
        c.binding.batch ? 'BATCH_ROOT_MISMATCH' : 'REPORT_DATA_MISMATCH',
        `report_data is not ${form}`,
      ),
    );
  } else {
    checks.push(pass('binding.report_data', `report_data = ${form}`));
  }
  return expectedReportData;
}
