/**
 * Binding of a session's chain root into hardware evidence (docs/spec/binding.md), shared by the
 * gateway's attestation providers and the verifier.
 */
import { createPublicKey, type KeyObject } from 'node:crypto';
import { canonicalJson, sha256 } from './canonical.js';

/** Ed25519 public JWK as carried in `cnf.jwk` (RFC 8037 §2). */
export interface Ed25519Jwk {
  kty: 'OKP';
  crv: 'Ed25519';
  /** base64url of the 32-byte public key. */
  x: string;
}

/** The binding preimage carried in every claim (docs/spec/binding.md). */
export interface SessionBindingPreimage {
  domain: 'cmcp.session-binding';
  version: 1;
  session_id: string;
  /** Bare hex entry_hash of the session chain's first entry. */
  chain_root: string;
  /** base64url of the 32-byte RFC 7638 JWK thumbprint of the gateway key. */
  key_thumbprint: string;
  gateway_measurement: string | null;
  policy_bundle_hash: string | null;
  catalog_hash: string | null;
  /** Verifier nonce (base64url) or null. */
  challenge: string | null;
  /**
   * claim_sequence of the newest claim of the gateway database when the session opened (read
   * before its quote), or null when there was none or it was not read. Every claim up to it
   * closed, and so was quoted, before this session's quote: the order `tpm.clock` needs
   * (docs/spec/claims.md#quote-order-and-the-tpm-clock). Absent in preimages made before it.
   */
  opened_after_claim?: number | null;
}

/**
 * RFC 7638 JWK thumbprint (SHA-256) of an Ed25519 public JWK: SHA-256 over the JSON of the
 * required members `crv`, `kty`, `x` in lexicographic order with no whitespace (§3.2),
 * which is exactly their JCS form. Returns 32 bytes.
 */
export function jwkThumbprint(jwk: Ed25519Jwk): Buffer {
  return sha256(canonicalJson({ crv: jwk.crv, kty: jwk.kty, x: jwk.x }));
}

/** Exports an Ed25519 KeyObject (public or private) as its public JWK. */
export function ed25519PublicJwk(key: KeyObject): Ed25519Jwk {
  const pub = key.type === 'private' ? createPublicKey(key) : key;
  const jwk = pub.export({ format: 'jwk' }) as { kty?: string; crv?: string; x?: string };
  if (jwk.kty !== 'OKP' || jwk.crv !== 'Ed25519' || typeof jwk.x !== 'string') {
    throw new Error('not an Ed25519 key');
  }
  return { kty: 'OKP', crv: 'Ed25519', x: jwk.x };
}

/** Session binding digest: SHA-256(JCS(preimage)), 32 bytes (docs/spec/binding.md). */
export function bindingDigest(preimage: SessionBindingPreimage): Buffer {
  return sha256(canonicalJson(preimage));
}

/** REPORT_DATA (64 bytes) = key_thumbprint (32) ‖ binding_digest (32) (docs/spec/binding.md). */
export function reportData(keyThumbprint: Uint8Array, digest: Uint8Array): Buffer {
  if (keyThumbprint.length !== 32 || digest.length !== 32)
    throw new Error('thumbprint and digest must be 32 bytes');
  return Buffer.concat([keyThumbprint, digest]);
}

/** TPM quote qualifyingData = SHA-256(REPORT_DATA), 32 bytes (docs/spec/binding.md). */
export function tpmQualifyingData(reportDataBytes: Uint8Array): Buffer {
  return sha256(reportDataBytes);
}

/**
 * A batched binding (docs/spec/binding.md#batched-bindings): the session's binding digest is leaf
 * `leaf_index` of an RFC 6962 tree of `tree_size` leaves whose root the evidence binds. Claims
 * without it bind their binding digest alone (REPORT_DATA = thumbprint ‖ binding_digest).
 */
export interface SessionBatchJson {
  leaf_index: number;
  tree_size: number;
  /** Bare lowercase hex of the 32-byte tree root (RFC 6962 MTH). */
  root: string;
  /** RFC 6962 §2.1.1 audit path, leaf end first, each bare lowercase hex of 32 bytes. */
  audit_path: string[];
}

/** The largest tree a batched binding may name: a verifier refuses larger ones (TREE_SIZE_OUT_OF_RANGE). */
export const BATCH_MAX_TREE_SIZE = 1024;

/**
 * Batch digest (docs/spec/binding.md#batched-bindings): SHA-256(JCS({domain:
 * "cmcp.session-batch", version: 1, tree_size, root})), 32 bytes, which takes the binding
 * digest's place in REPORT_DATA. Domain-separated from the binding digest (another preimage
 * domain), so a batched REPORT_DATA can never be read as a single binding or the reverse.
 * @param root the 32-byte tree root.
 */
export function batchDigest(root: Uint8Array, treeSize: number): Buffer {
  if (root.length !== 32) throw new Error('tree root must be 32 bytes');
  return sha256(
    canonicalJson({
      domain: 'cmcp.session-batch',
      version: 1,
      tree_size: treeSize,
      root: Buffer.from(root).toString('hex'),
    }),
  );
}
