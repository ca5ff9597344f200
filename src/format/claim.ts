/**
 * TRACE claim format (design §5), shared by the gateway (which builds and signs claims)
 * and the verifier (which re-derives everything in them).
 */
import { createPublicKey, sign as cryptoSign, verify as cryptoVerify, type KeyObject } from 'node:crypto';
import type { Ed25519Jwk, SessionBindingPreimage } from './binding.js';
import { canonicalJson, fromB64u, sha256Hex } from './canonical.js';

/** Profile tag of claims produced by this version. */
export const CLAIM_PROFILE = 'cmcp.trace-claim/1';

/** One line of the per-call transcript: no arguments, no execution ids (design §5). */
export interface TranscriptLine {
  sequence_number: number;
  tool_name: string | null;
  policy_decision: string | null;
  disposition: string | null;
  error_code: string | null;
}

/** PCR selection of a quote: one bank, PCR indices ascending. */
export interface PcrSelectionJson {
  hash: 'sha256';
  pcrs: number[];
}

/** TPM evidence as carried in a claim; all byte strings base64url. */
export interface TpmEvidenceJson {
  /** TPMS_ATTEST bytes exactly as signed (without the TPM2B size prefix). */
  attest: string;
  /** TPMT_SIGNATURE wire bytes (TPM 2.0 Part 2 §11.3.4). */
  signature: string;
  /** TPMT_PUBLIC wire bytes of the AK (TPM 2.0 Part 2 §12.2.4). */
  ak_public: string;
  pcr_selection: PcrSelectionJson;
  /** PCR index (decimal string) → base64url digest. */
  pcr_values: Record<string, string>;
  /**
   * Qualified Name of the AK's parent (TPM 2.0 Part 1 §16), base64url: for a primary AK the
   * 4-byte hierarchy handle. TPMS_ATTEST.qualifiedSigner = nameAlg ‖ H(this ‖ AK Name).
   */
  ak_parent_qualified_name: string;
  /** AK certificate chain, leaf first, base64url DER; empty until enrolled (issue 4). */
  ak_cert_chain: string[];
}

/** Hardware evidence section: either bound, or absent with the reason. */
export interface EvidenceJson {
  /** Provider that was asked: `tpm`, `sev-snp`, `tdx`, `software`. */
  provider: string;
  /** `bound` when hardware evidence covers the binding; `absent` otherwise. */
  status: 'bound' | 'absent';
  /** Machine-readable reason when absent (e.g. `TPM_UNREACHABLE`, `SOFTWARE_PROVIDER`). */
  reason: string | null;
  /** base64url of the 64-byte REPORT_DATA. */
  report_data: string;
  tpm: TpmEvidenceJson | null;
}

/** The signed claim (design §5). */
export interface Claim {
  claim_version: 1;
  profile: typeof CLAIM_PROFILE;
  /** RFC 3339 UTC. */
  issued_at: string;
  session_id: string;
  agent_id: string;
  gateway_measurement: string | null;
  policy_bundle_hash: string | null;
  enforcement_mode: string;
  catalog_hash: string | null;
  cnf: { jwk: Ed25519Jwk };
  audit_chain: { chain_id: string; root: string; tip: string; length: number };
  transcript: TranscriptLine[];
  counters: { tool_calls: number; allowed: number; refused: number; faulted: number };
  binding: { preimage: SessionBindingPreimage };
  evidence: EvidenceJson;
  /** 0-based sequence of claims issued from this gateway database. */
  claim_sequence: number;
  /** Bare hex SHA-256 of the previous claim's stored canonical text, or null for the first. */
  prev_claim_hash: string | null;
  /** base64url Ed25519 signature over JCS(claim without `signature`). */
  signature: string;
}

export type UnsignedClaim = Omit<Claim, 'signature'>;

/** Signs an unsigned claim with the gateway's Ed25519 key (RFC 8032). */
export function signClaim(unsigned: UnsignedClaim, key: KeyObject): Claim {
  const sig = cryptoSign(null, Buffer.from(canonicalJson(unsigned), 'utf8'), key);
  return { ...unsigned, signature: sig.toString('base64url') };
}

/**
 * Checks a claim's Ed25519 signature against its own `cnf.jwk`.
 * @returns true when valid; false when the signature does not verify.
 * @throws when the claim is not shaped well enough to check (caller reports a fail).
 */
export function verifyClaimSignature(claim: Claim): boolean {
  const { signature, ...unsigned } = claim;
  const key = createPublicKey({ key: { ...claim.cnf.jwk }, format: 'jwk' });
  return cryptoVerify(null, Buffer.from(canonicalJson(unsigned), 'utf8'), key, fromB64u(signature));
}

/** Bare hex SHA-256 of a claim's canonical text (used for `prev_claim_hash`). */
export function claimHash(claim: Claim): string {
  return sha256Hex(canonicalJson(claim));
}
