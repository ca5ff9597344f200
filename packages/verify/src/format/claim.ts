/**
 * TRACE claim format (docs/spec/claims.md), shared by the gateway (which builds and signs claims)
 * and the verifier (which re-derives everything in them).
 */
import { sign as cryptoSign, type KeyObject } from 'node:crypto';
import { jwkPublicKey } from '../crypto/keys.js';
import { verifyWithKey } from '../crypto/signatures.js';
import type { Ed25519Jwk, SessionBatchJson, SessionBindingPreimage } from './binding.js';
import { canonicalJson, fromB64u, sha256Hex } from './canonical.js';
import type { CLAIM_PROFILE_REPLICAS, ReplicaMember } from './replica.js';

/** Profile tag of claims produced by this version. */
export const CLAIM_PROFILE = 'cmcp.trace-claim/1';

/** One line of the per-call transcript: no arguments, no execution ids (docs/spec/claims.md). */
export interface TranscriptLine {
  sequence_number: number;
  tool_name: string | null;
  policy_decision: string | null;
  /**
   * Ids of the Cedar policies that determined the decision (null without a policy). Always
   * written by this version; optional so claims issued before docs/spec/policy.md still parse.
   */
  policy_rule_matched?: string[] | null;
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
  /**
   * AK certificate chain, leaf first, base64url DER: the operator AK CA's certificate for an
   * enrolled AK (`cmcp tpm enroll`), the cloud's certificate for a platform AK (Azure), or empty
   * for an ephemeral AK.
   */
  ak_cert_chain: string[];
  /** Where the AK came from: `enrolled`, `platform` or `ephemeral` (absent in older claims). */
  ak_source?: 'enrolled' | 'platform' | 'ephemeral';
}

/**
 * The gateway measurement (docs/spec/measurement.md) and the inputs it was computed from. A verifier
 * recomputes `digest` from the inputs (docs/attestation.md), compares it with the claim's
 * `gateway_measurement`, and — for TPM evidence — checks the quoted PCR:
 * PCR[pcr] = SHA-256(pcr_before ‖ digest bytes).
 */
export interface MeasurementJson {
  /** Encoding version of the measurement (1). */
  version: 1;
  /** `sha256:<hex>` over the length-prefixed inputs; equals the claim's gateway_measurement. */
  digest: string;
  inputs: {
    /** `sha256:<hex>` over the sorted (path, SHA-256) list of the files under dist/. */
    code: string;
    /** Number of files the code digest covers. */
    code_files: number;
    /** `sha256:<hex>` of package-lock.json, or null when absent. */
    lockfile: string | null;
    policy_bundle_hash: string | null;
    catalog_hash: string | null;
    /** `sha256:<hex>` of JCS(effective config). */
    config: string;
  };
  /** TPM only: the sha256-bank PCR the digest was extended into, and its value just before. */
  pcr?: number;
  /** base64url, 32 bytes. */
  pcr_before?: string;
  /**
   * TPM only: the measurement PCR's event log from this gateway's extend (first event, its
   * digest = `digest`) to the quoted value: PCR[pcr] = fold(SHA-256(acc ‖ event digest),
   * pcr_before, pcr_events) (docs/spec/measurement.md#event-log). Absent in older claims: the
   * one event `digest`.
   */
  pcr_events?: PcrEventJson[];
}

/** One extend into the measurement PCR (docs/spec/measurement.md#event-log). */
export interface PcrEventJson {
  /** `sha256:<hex>`: the 32 bytes extended. */
  digest: string;
  /** What was measured: `cmcp.gateway_measurement`. */
  event: string;
  /** instance_id of the gateway that extended it (unauthenticated text; the replay checks the digests). */
  instance: string;
}

/** SEV-SNP evidence (docs/spec/attestation.md#sev-snp-and-tdx-through-configfs-tsm); byte strings base64url. */
export interface SevSnpEvidenceJson {
  /** The raw ATTESTATION_REPORT (1184 bytes), REPORT_DATA = the claim's report_data. */
  report: string;
  /** Certificates from the GHCB certificate table (auxblob), DER; empty when the host gave none. */
  certs: { guid: string; kind: 'vcek' | 'vlek' | 'ask' | 'ark' | 'other'; der: string }[];
  /** `configfs-tsm` or `sev-guest-ioctl`. */
  source: 'configfs-tsm' | 'sev-guest-ioctl';
}

/** TDX evidence (docs/spec/attestation.md#sev-snp-and-tdx-through-configfs-tsm): a DCAP quote whose REPORTDATA = the claim's report_data. */
export interface TdxEvidenceJson {
  /** The DCAP quote (v4/v5) as returned by the kernel. */
  quote: string;
  source: 'configfs-tsm';
}

/**
 * Azure confidential VM evidence (docs/spec/evidence-azure.md), beside `tpm` (the vTPM quote
 * under HCLAkPub): the HCL report from vTPM NV 0x01400001 and what verifies its hardware report.
 */
export interface AzureHclEvidenceJson {
  /** The NV index contents (HCL report), base64url. */
  report: string;
  /** SEV-SNP: the VCEK/ASK/ARK (DER) the gateway was configured with; empty for TDX. */
  certs: { kind: 'vcek' | 'vlek' | 'ask' | 'ark' | 'other'; der: string }[];
  /** TDX: the quote the host's QE made of the HCL TD report. */
  td_quote?: string;
  source: 'vtpm-nv';
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
  /** Present when the provider is `sev-snp` and the binding is bound. */
  sev_snp?: SevSnpEvidenceJson;
  /** Present when the provider is `tdx` and the binding is bound. */
  tdx?: TdxEvidenceJson;
  /** Present when the provider is `azure-cvm` and the binding is bound (with `tpm`). */
  azure_hcl?: AzureHclEvidenceJson;
  /** The gateway measurement and its inputs, whenever the gateway computed one. */
  measurement?: MeasurementJson;
}

/** The signed claim (docs/spec/claims.md). */
export interface Claim {
  claim_version: 1;
  /** `/1`; `/2` when the chain was written by more than one replica (docs/spec/claims.md#replicas). */
  profile: typeof CLAIM_PROFILE | typeof CLAIM_PROFILE_REPLICAS;
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
  /**
   * Every entry of the session chain counted by `entry_type` (genesis, tool_call, resource_read,
   * prompt_get, …, session_close), so the data-carrying entries of relayed requests are counted
   * as tool calls are (docs/spec/claims.md#entry-counts). Optional: claims issued before it
   * still parse, and their counts are then not re-derived.
   */
  entry_counts?: Record<string, number>;
  /** `batch`: present when the binding was batched (docs/spec/binding.md#batched-bindings). */
  binding: { preimage: SessionBindingPreimage; batch?: SessionBatchJson };
  evidence: EvidenceJson;
  /** 0-based sequence of claims issued from this gateway database. */
  claim_sequence: number;
  /** Bare hex SHA-256 of the previous claim's stored canonical text, or null for the first. */
  prev_claim_hash: string | null;
  /**
   * `/2` only: every replica that wrote an entry of the chain, with its start-up evidence
   * (docs/spec/claims.md#replicas). Absent in `/1` claims.
   */
  replicas?: ReplicaMember[];
  /** base64url Ed25519 signature over JCS(claim without `signature`). */
  signature: string;
}

export type UnsignedClaim = Omit<Claim, 'signature'>;

/** `claim_version` of claims that commit to the chain's tree head (docs/spec/claims.md#claim-version-2). */
export const CLAIM_VERSION_TREE_HEAD = 2;

/**
 * The session chain's final tree head: RFC 9162 MTH over every entry's leaf, session_close
 * included (docs/spec/transparency.md#the-tree). `size` equals `audit_chain.length`.
 */
export interface TreeHeadJson {
  size: number;
  /** Lowercase hex of the 32-byte root. */
  root: string;
}

/**
 * A claim of version 2 (docs/spec/claims.md#claim-version-2): every v1 member but `transcript`,
 * which the audit bundle carries (checked against `tree_head`), and `tree_head`. Its size does
 * not grow with the session. `entry_counts` is required. Profiles keep their v1 meaning.
 */
export interface TreeHeadClaim extends Omit<Claim, 'claim_version' | 'transcript' | 'entry_counts'> {
  claim_version: typeof CLAIM_VERSION_TREE_HEAD;
  tree_head: TreeHeadJson;
  entry_counts: Record<string, number>;
}

export type UnsignedTreeHeadClaim = Omit<TreeHeadClaim, 'signature'>;

/** A claim of either version. */
export type AnyClaim = Claim | TreeHeadClaim;

/** Signs an unsigned claim (either version) with the gateway's Ed25519 key (RFC 8032). */
export function signClaim(unsigned: UnsignedClaim, key: KeyObject): Claim;
export function signClaim(unsigned: UnsignedTreeHeadClaim, key: KeyObject): TreeHeadClaim;
export function signClaim(unsigned: UnsignedClaim | UnsignedTreeHeadClaim, key: KeyObject): AnyClaim {
  const sig = cryptoSign(null, Buffer.from(canonicalJson(unsigned), 'utf8'), key);
  return { ...unsigned, signature: sig.toString('base64url') } as AnyClaim;
}

/**
 * Checks a claim's Ed25519 signature against its own `cnf.jwk`.
 * @returns true when valid; false when the signature does not verify.
 * @throws when the claim is not shaped well enough to check (caller reports a fail).
 */
export function verifyClaimSignature(claim: AnyClaim): boolean {
  const { signature, ...unsigned } = claim;
  const key = jwkPublicKey({ ...claim.cnf.jwk });
  return verifyWithKey(null, Buffer.from(canonicalJson(unsigned), 'utf8'), key, fromB64u(signature));
}

/** Bare hex SHA-256 of a claim's canonical text (used for `prev_claim_hash`). */
export function claimHash(claim: AnyClaim): string {
  return sha256Hex(canonicalJson(claim));
}
