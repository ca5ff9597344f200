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
