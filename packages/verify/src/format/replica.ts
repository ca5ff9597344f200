/**
 * Replica identity in entries and claims (docs/spec/audit-entries.md#writers,
 * docs/spec/claims.md#replicas), shared by the PostgreSQL store (which writes, signs and lists
 * writers) and the verifier (which checks them). A single gateway (SQLite) writes none of this.
 */
import { sign as cryptoSign, verify as cryptoVerify, type KeyObject } from 'node:crypto';
import { jwkPublicKey } from '../crypto/keys.js';
import type { Ed25519Jwk } from './binding.js';
import { canonicalJson, fromB64u, sha256 } from './canonical.js';
import type { EvidenceJson } from './claim.js';

/** Profile of a claim whose chain was written by more than one replica. */
export const CLAIM_PROFILE_REPLICAS = 'cmcp.trace-claim/2';

/** The entry's writer, a hash-covered top-level member of the entry body. */
export interface EntryReplica {
  /** The writing replica's instance_id. */
  replica_id: string;
  /** base64url of the RFC 7638 thumbprint of its gateway key (docs/spec/binding.md#gateway-key). */
  key_thumbprint: string;
}

/** The domain prefix of a writer signature's message. */
const WRITER_DOMAIN = 'cmcp.entry-writer/1:';

/** The bytes a writer signs: UTF-8 of `"cmcp.entry-writer/1:" ‖ entry_hash` (bare lowercase hex). */
export function entryWriterMessage(entryHash: string): Buffer {
  return Buffer.from(WRITER_DOMAIN + entryHash, 'utf8');
}

/** base64url Ed25519 (RFC 8032) writer signature over {@link entryWriterMessage}. */
export function signEntryWriter(entryHash: string, key: KeyObject): string {
  return cryptoSign(null, entryWriterMessage(entryHash), key).toString('base64url');
}

/**
 * Checks a writer signature under an Ed25519 public JWK (RFC 8037).
 * @returns false when it does not verify, is not base64url, or the key is unusable. Never throws.
 */
export function verifyEntryWriter(entryHash: string, signature: string, jwk: Ed25519Jwk): boolean {
  try {
    if (!/^[A-Za-z0-9_-]+$/.test(signature)) return false;
    const key = jwkPublicKey({ kty: jwk.kty, crv: jwk.crv, x: jwk.x });
    return cryptoVerify(null, entryWriterMessage(entryHash), key, fromB64u(signature));
  } catch {
    return false;
  }
}

/** What a replica binds into its own evidence at start (docs/spec/binding.md#replica-binding). */
export interface ReplicaBindingPreimage {
  domain: 'cmcp.replica-binding';
  version: 1;
  replica_id: string;
  /** The lease token the replica started under (docs/replicas.md#leases-and-fencing-tokens). */
  lease_token: number;
  /** base64url RFC 7638 thumbprint of the replica's gateway key. */
  key_thumbprint: string;
  gateway_measurement: string | null;
  policy_bundle_hash: string | null;
  catalog_hash: string | null;
}

/** Replica binding digest: SHA-256(JCS(preimage)), 32 bytes; REPORT_DATA = thumbprint ‖ this. */
export function replicaBindingDigest(preimage: ReplicaBindingPreimage): Buffer {
  return sha256(canonicalJson(preimage));
}

/** One writer of a `/2` claim's chain: its key, what it bound at start, and that evidence. */
export interface ReplicaMember {
  replica_id: string;
  lease_token: number;
  cnf: { jwk: Ed25519Jwk };
  binding: { preimage: ReplicaBindingPreimage };
  evidence: EvidenceJson;
}
