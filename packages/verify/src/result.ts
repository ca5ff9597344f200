/**
 * Verification results for relying parties (docs/spec/claims.md): every check is listed with a
 * status and a stable reason code, and the verdict is computed from the checks alone.
 *
 * This module is part of the verifier wing (`packages/verify/`): it imports only `packages/verify/src/format/*`,
 * node built-ins and npm libraries — never the gateway, the store or `native/`.
 */

/**
 * Outcome of one check.
 * - `pass`: the check ran on parsed input and succeeded.
 * - `fail`: the check ran and failed, **or its input failed to parse** (never skipped).
 * - `absent`: the evidence the check needs is legitimately not there (e.g. the claim says
 *   hardware binding is absent, AK not enrolled, no audit bundle supplied).
 * - `not-applicable`: the relying party asked for nothing this check would test
 *   (e.g. no expected challenge, no PCR policy).
 */
export type CheckStatus = 'pass' | 'fail' | 'absent' | 'not-applicable';

/**
 * Every reason code the verifier emits, with a one-line meaning. Codes are stable
 * (upper snake case); new codes may be added, existing ones are never repurposed.
 */
export const REASON_CODES = {
  // generic
  OK: 'the check passed',
  DEPENDENCY_FAILED: 'an input this check needs failed an earlier check, so this check fails too',
  NOT_SUPPLIED: 'the caller supplied no input for this optional check',
  // claim envelope
  CLAIM_MALFORMED: 'the claim does not have the claim v1 shape',
  CLAIM_NOT_CANONICALIZABLE: 'the claim holds a value RFC 8785 cannot carry (e.g. a lone surrogate)',
  CLAIM_KEY_INVALID: 'cnf.jwk is not a usable Ed25519 public key',
  CLAIM_SIGNATURE_INVALID: 'the Ed25519 claim signature does not verify under cnf.jwk',
  KEY_THUMBPRINT_MISMATCH: 'binding preimage key_thumbprint is not the RFC 7638 thumbprint of cnf.jwk',
  PREIMAGE_MALFORMED: 'the binding preimage has the wrong domain/version or cannot be canonicalised',
  PREIMAGE_SESSION_MISMATCH: 'binding preimage session_id differs from the claim session_id',
  PREIMAGE_CHAIN_ROOT_MISMATCH: 'binding preimage chain_root differs from audit_chain.root',
  PREIMAGE_FIELD_MISMATCH:
    'binding preimage gateway_measurement/policy_bundle_hash/catalog_hash differ from the claim',
  CHALLENGE_MISMATCH: 'the binding challenge is not the challenge the verifier expected',
  NO_CHALLENGE_EXPECTED: 'the verifier supplied no expected challenge',
  REPORT_DATA_MALFORMED: 'evidence.report_data is not 64 bytes of base64url',
  REPORT_DATA_MISMATCH: 'evidence.report_data is not thumbprint ‖ SHA-256(JCS(preimage))',
  // batched bindings (docs/spec/binding.md#batched-bindings)
  BINDING_NOT_BATCHED: 'a single binding: the claim carries no binding.batch, so there is no proof to check',
  TREE_SIZE_OUT_OF_RANGE: 'binding.batch.tree_size is not a whole number from 1 to 1024',
  LEAF_INDEX_OUT_OF_RANGE: 'binding.batch.leaf_index is not a whole number below tree_size',
  INCLUSION_PROOF_INVALID:
    'the RFC 6962 audit path does not lead from the binding digest to binding.batch.root at any index',
  LEAF_INDEX_MISMATCH:
    'the audit path proves the binding digest at another index than binding.batch.leaf_index',
  BATCH_ROOT_MISMATCH:
    'binding.batch.root is not the root REPORT_DATA binds (thumbprint ‖ batch digest of root and tree_size)',
  PREVIOUS_CLAIM_MALFORMED: 'the previous claim supplied for comparison does not parse',
  CLAIM_NOT_SUCCESSOR: 'prev_claim_hash/claim_sequence do not follow the supplied previous claim',
  CLAIM_PROFILE_MISMATCH:
    'a cmcp.trace-claim/1 claim carries replicas: only /2 lists writers, and /1 would leave them unchecked',
  // replicas (docs/spec/claims.md#replicas)
  REPLICA_BINDING_INVALID:
    "a listed replica's evidence does not bind its key and start-up preimage (thumbprint ‖ SHA-256(JCS(preimage)))",
  REPLICA_EVIDENCE_INVALID:
    "a listed replica's hardware evidence does not verify (the detail names the replica)",
  CLAIM_SIGNER_NOT_TRUSTED:
    'the claim signer is self-asserted: cnf.jwk is neither bound by evidence chaining to a pinned root nor a key the verifier pinned',
  CLAIM_SIGNER_NOT_LISTED: 'the claim is signed by a key that is not one of its listed replicas',
  ENTRY_WRITER_NOT_ATTESTED:
    'an entry names no writing replica, or one the claim does not list with evidence (the detail names both)',
  ENTRY_WRITER_SIGNATURE_INVALID:
    "an entry's writer signature is missing or does not verify under its named replica's key",
  POLICY_HASH_MISMATCH: 'the claim policy_bundle_hash is not the policy bundle hash the verifier pinned',
  CATALOG_HASH_MISMATCH: 'the claim catalog_hash is not the catalog hash the verifier pinned',
  NO_PREVIOUS_CLAIM: 'the verifier supplied no previous claim',
  // hardware evidence (generic)
  EVIDENCE_ABSENT: 'the claim states the hardware binding is absent (reason in detail)',
  EVIDENCE_INCOMPLETE: 'the claim states a binding but carries no evidence this verifier can check',
  EVIDENCE_MALFORMED: 'an evidence field is not valid base64url or has the wrong form',
  AK_NOT_ENROLLED: 'no AK certificate chain: the AK is not anchored to a pinned root',
  AK_CHAIN_UNANCHORED: 'AK certificates parse and certify the AK, but no pinned root is configured',
  AK_CHAIN_MALFORMED: 'an AK certificate is not valid DER X.509',
  AK_CERT_KEY_MISMATCH: 'the AK leaf certificate certifies a different key than the quoting AK',
  AK_PUBLIC_NOT_SUPPLIED: 'only a bare AK key was supplied, so its TPM attributes and name are unknown',
  // TPM structures
  TPM_ATTEST_MALFORMED: 'TPMS_ATTEST does not unmarshal (bad size field or value)',
  TPM_ATTEST_TRUNCATED: 'TPMS_ATTEST (or its TPM2B wrapper) ends before its declared content',
  TPM_ATTEST_TRAILING_BYTES: 'bytes follow the TPMS_ATTEST (or TPM2B) content',
  TPM_ATTEST_BAD_MAGIC: 'TPMS_ATTEST.magic is not TPM_GENERATED_VALUE 0xff544347',
  TPM_ATTEST_NOT_QUOTE: 'TPMS_ATTEST.type is not TPM_ST_ATTEST_QUOTE 0x8018',
  TPM_STRUCTURE_MALFORMED: 'a TPM structure (TPML_*, TPM2B_*, TPMS_NV_PUBLIC) does not unmarshal exactly',
  TPM_SIGNATURE_MALFORMED: 'TPMT_SIGNATURE does not unmarshal exactly',
  TPM_SIGNATURE_UNSUPPORTED: 'TPMT_SIGNATURE algorithm or hash is not supported',
  TPM_FILE_LAYOUT_MISMATCH: 'a TPM file has another layout than its flag takes (the detail names it)',
  PCR_FILE_MALFORMED: 'a tpm2-tools PCR values file does not parse or does not fit the quote selection',
  TPM_SIGNATURE_SCHEME_UNKNOWN:
    'a plain signature whose scheme and hash nothing names (AK TPMT_PUBLIC, --tpm-sig-format)',
  TPM_SIGNATURE_LENGTH_INVALID: 'RSA signature length differs from the modulus size, or ECDSA r/s too long',
  AK_PUBLIC_MALFORMED: 'TPMT_PUBLIC does not unmarshal exactly or is not a valid key',
  AK_PUBLIC_UNSUPPORTED: 'TPMT_PUBLIC key type, curve, size or nameAlg is not supported',
  AK_ATTRIBUTES_INVALID: 'AK is not restricted+sign+fixedTPM+fixedParent, or has decrypt set',
  SIGNATURE_SCHEME_MISMATCH: "the quote's signature scheme/hash differs from the AK's scheme",
  QUOTE_SIGNATURE_INVALID: 'the quote signature does not verify under the AK',
  QUOTE_NONCE_MISMATCH: 'quote extraData ≠ SHA-256(REPORT_DATA) of this claim (exact length compare)',
  QUALIFIED_SIGNER_MISMATCH: 'TPMS_ATTEST.qualifiedSigner is not the TPM name of the AK',
  PCR_SELECTION_MALFORMED: 'the PCR selection carried with the evidence is invalid',
  PCR_SELECTION_MISMATCH: "the quote's PCR selection differs from the selection carried with it",
  PCR_POLICY_MISMATCH: "the quote's PCR selection is not exactly the verifier's required selection",
  NO_PCR_POLICY: 'the verifier supplied no required PCR selection',
  PCR_VALUES_MALFORMED: 'a supplied PCR value is not valid or has the wrong length',
  PCR_VALUE_MISSING: 'a selected PCR has no supplied value',
  PCR_VALUE_UNSELECTED: 'a PCR value is supplied that the quote does not cover',
  PCR_DIGEST_MISMATCH: 'pcrDigest recomputed from the values (selection order) differs from the quote',
  TPM_CLOCK_ROLLBACK:
    'TPMS_CLOCK_INFO is before the previous quote: lower resetCount, lower restartCount in one reset, or lower clock in one reset/restart',
  NO_PREVIOUS_QUOTE:
    'no previous quote (or claim with a TPM quote) was supplied to compare the TPM clock with',
  PREVIOUS_QUOTE_MALFORMED: 'the previous quote supplied for the clock comparison does not parse',
  PREVIOUS_QUOTE_OTHER_SIGNER: 'the previous quote was signed by another key (qualifiedSigner differs)',
  QUOTE_ORDER_UNKNOWN:
    "the quote is before the previous claim's quote: claims are in close order, quotes are taken at open, so an overlapping session and a rollback look alike",
  // audit bundle
  BUNDLE_NOT_PROVIDED: 'no audit bundle was supplied',
  BUNDLE_MALFORMED: 'the audit bundle does not have the bundle v1 shape',
  BUNDLE_EMPTY: 'the audit bundle holds no entries',
  BUNDLE_SESSION_MISMATCH: 'the bundle (or an entry) is for another session than the claim',
  BUNDLE_AGENT_MISMATCH:
    'an entry of the bundle names another agent than the claim agent_id, or none though its type (a call, a relayed request, session open or close) always names one',
  ENTRY_MALFORMED: 'an entry canonical text does not parse as an audit entry v1',
  ENTRY_NOT_CANONICAL: 'an entry canonical text is not its own RFC 8785 form',
  ENTRY_HASH_MISMATCH: 'SHA-256 of an entry stored text differs from its entry_hash (content tampering)',
  CHAIN_ID_MISMATCH: 'an entry (or the bundle) has a chain_id other than the expected one',
  SEQUENCE_OUT_OF_ORDER: 'bundle entries are not listed in sequence order (reordering)',
  SEQUENCE_DUPLICATE: 'two entries share a sequence number',
  SEQUENCE_GAP: 'sequence numbers are not contiguous',
  BUNDLE_NOT_FROM_GENESIS: 'the bundle does not start at sequence 0',
  GENESIS_INVALID: 'entry 0 prev_entry_hash is not "genesis"',
  LINK_BROKEN: 'an entry prev_entry_hash is not the entry_hash of its predecessor',
  TIMESTAMP_MALFORMED: 'an entry timestamp is not RFC 3339 UTC',
  TIMESTAMP_DECREASING: 'an entry timestamp is earlier than its predecessor',
  CHAIN_SUBSTITUTED: 'a self-consistent chain whose root is not the claimed root (substitution)',
  CHAIN_ROOT_MISMATCH: 'entry 0 hash is not the claimed root (and the bundle is not self-consistent)',
  CHAIN_TIP_MISMATCH: 'the entry at the claimed length is not the claimed tip',
  BUNDLE_TRUNCATED: 'the bundle is a valid prefix of the claimed chain but shorter (truncation)',
  BUNDLE_EXTENDS_CLAIM: 'the bundle continues past the claimed tip: the claim is older than the bundle',
  CHAIN_LENGTH_MISMATCH: 'the bundle length differs from the claimed length',
  TRANSCRIPT_MISMATCH: 'a transcript line differs from the audit entry at its sequence number',
  ENTRY_COUNTS_MISMATCH:
    "the claim's entry counts by type (or its tool-call counters) differ from the bundle's entries",
  ENTRY_TYPE_INVALID:
    'a relayed-request entry (resource_read, prompt_get, sampling_relay, …) lacks a member its type requires',
  // certificate chains and trust anchors (TPM AK, SEV-SNP VCEK/VLEK, TDX PCK, collateral signers)
  CHAIN_NOT_SUPPLIED: 'no certificate chain was supplied for the signing key',
  CERT_MALFORMED: 'a certificate is not valid DER/PEM X.509',
  CHAIN_INCOMPLETE: 'no supplied certificate issued a certificate of the chain (missing intermediate)',
  CHAIN_SIGNATURE_INVALID: 'a certificate signature does not verify under its issuer key',
  CHAIN_CA_INVALID: 'an issuing certificate is not a CA (basicConstraints, keyUsage keyCertSign or pathLen)',
  CERT_NOT_VALID_AT_TIME: 'a certificate is expired or not yet valid at the verification time',
  END_ENTITY_INVALID: 'the leaf certificate breaks the end-entity profile (CA flag, EKU, key usage, name)',
  ROOT_NOT_PINNED: 'the chain ends at a self-signed root whose SHA-256 fingerprint is not pinned',
  ANCHOR_PURPOSE_MISMATCH: 'the chain ends at a pinned root for another purpose or product',
  ANCHOR_NOT_ROOT:
    'the chain passes a pinned certificate that is not self-signed and whose entry does not say anchor: intermediate',
  CERT_REVOKED: 'a certificate of the chain is listed in a CRL',
  // trust store and reference values
  TRUST_STORE_INVALID: 'the trust store file does not validate',
  REFERENCE_VALUES_INVALID: 'the reference values file does not validate',
  NO_POLICY: 'the reference values set no requirement for this check',
  TEE_TYPE_NOT_ALLOWED: 'the reference values do not allow this TEE type',
  MEASUREMENT_NOT_ALLOWED: 'a measurement is not one of the values the reference values allow',
  EVIDENCE_BINDING_MISMATCH:
    'the report data / nonce in the evidence is not the expected value (exact length)',
  // AMD SEV-SNP
  SNP_CERT_TABLE_MALFORMED: 'the extended-report certificate table does not parse',
  SNP_REPORT_MALFORMED: 'the SEV-SNP report is not 1184 bytes or a reserved/padding field is not zero',
  SNP_VERSION_UNSUPPORTED: 'the SEV-SNP report version is not in the allow-list (2, 3, 5)',
  SNP_SIGNATURE_ALGO_UNSUPPORTED: 'SIGNATURE_ALGO is not 1 (ECDSA P-384 with SHA-384)',
  SNP_SIGNATURE_MALFORMED: 'the signature r/s are not valid P-384 scalars',
  SNP_SIGNATURE_INVALID:
    'the ECDSA P-384 signature over bytes 0x000-0x29F does not verify under the VCEK/VLEK',
  SNP_SIGNING_KEY_UNSUPPORTED: 'SIGNER_INFO.SIGNING_KEY is neither VCEK (0) nor VLEK (1)',
  SNP_SIGNER_MISMATCH: 'the certificate presented is not the kind of key (VCEK/VLEK) the report names',
  SNP_CERT_KEY_INVALID: 'the VCEK/VLEK certificate key is not an EC P-384 key',
  SNP_PRODUCT_UNKNOWN: 'the product (Milan, Genoa, Turin) could not be determined from configuration or VCEK',
  SNP_PRODUCT_MISMATCH: 'the product named by configuration, VCEK and report CPUID disagree',
  SNP_HWID_MISMATCH: 'the VCEK hwID extension is not the report CHIP_ID',
  SNP_TCB_MISMATCH: 'the VCEK TCB (SPL) extensions are not the report REPORTED_TCB',
  SNP_DEBUG_ENABLED: 'POLICY.DEBUG is set and the reference values do not allow debug',
  SNP_VMPL_NOT_ALLOWED: 'the report VMPL is not allowed by the reference values',
  SNP_TCB_TOO_LOW: 'REPORTED_TCB is below the minimum TCB for this product',
  // Intel TDX
  TDX_QUOTE_MALFORMED: 'the TDX quote does not parse (bad size, type or layout)',
  TDX_QUOTE_TRUNCATED: 'the TDX quote ends before its declared content',
  TDX_VERSION_UNSUPPORTED: 'the quote version is not 4 or 5',
  TDX_BODY_TYPE_UNSUPPORTED: 'the quote body type / TEE type is not a TD report (TDX 1.0 / 1.5)',
  TDX_ATT_KEY_TYPE_UNSUPPORTED: 'the attestation key type is not 2 (ECDSA-256 with P-256)',
  TDX_CERT_DATA_UNSUPPORTED: 'certification data is not QE report (6) with a PCK chain (5) inside',
  TDX_ATTESTATION_KEY_INVALID: 'the attestation key is not a valid P-256 point',
  TDX_QUOTE_SIGNATURE_INVALID: 'the ECDSA P-256 quote signature does not verify under the attestation key',
  TDX_QE_REPORT_SIGNATURE_INVALID: 'the QE report signature does not verify under the PCK certificate key',
  TDX_QE_REPORT_DATA_MISMATCH:
    'QE REPORTDATA is not SHA-256(attestation key ‖ QE auth data) followed by zeros',
  TDX_DEBUG_ENABLED: 'TD_ATTRIBUTES.DEBUG is set',
  TDX_TRAILING_BYTES: 'bytes follow the declared quote and the reference values refuse them',
  COLLATERAL_NOT_SUPPLIED: 'no collateral (TCB info, QE identity, CRLs) was supplied: TCB status unknown',
  COLLATERAL_MALFORMED: 'collateral does not parse',
  COLLATERAL_SIGNATURE_INVALID: 'a collateral signature does not verify over the raw bytes received',
  COLLATERAL_EXPIRED: 'collateral is outside its issueDate/nextUpdate window at the verification time',
  COLLATERAL_MISMATCH: 'collateral is for another platform (FMSPC, PCEID, TDX module, QE identity)',
  TCB_LEVEL_NOT_FOUND: 'no TCB level of the TCB info matches the platform (TCB level not supported)',
  TCB_STATUS_NOT_ACCEPTED: 'the TCB status is not one the reference values accept',
  TDX_MODULE_IDENTITY_NOT_FOUND:
    'TEE_TCB_SVN names a TDX module version (TDX_xx) the TCB info has no tdxModuleIdentities entry for',
  TDX_MODULE_TCB_LEVEL_NOT_FOUND:
    'no TCB level of the matching TDX module identity covers the module ISVSVN (TEE_TCB_SVN[0])',
  // TCG2 event logs
  EVENTLOG_TRUNCATED: 'the event log ends inside an event: a declared size exceeds the remaining bytes',
  EVENTLOG_MALFORMED:
    'the event log is not a well-formed crypto-agile TCG2 log (header, algorithms, sizes or PCR index)',
  EVENTLOG_PCR_MISMATCH: 'a PCR replayed from the event log differs from the quoted value',
  EVENTLOG_BANK_MISSING: 'the event log has no digests for the bank of the quoted PCR values',
  // TDX CC event log (CCEL) and canonical event log (CEL)
  CCEL_TABLE_MALFORMED:
    'the ACPI CCEL table is not 56 bytes, "CCEL", checksummed, TDX (CC type 2), or its LAML is smaller than the log',
  CCEL_EVENT_TRUNCATED: 'the CC event log ends inside an event: a declared size exceeds the remaining bytes',
  CCEL_EVENT_MALFORMED:
    'the CC event log is not a well-formed crypto-agile log (header, algorithms, sizes, MR index, no SHA-384)',
  CCEL_RTMR_MISMATCH: 'an RTMR replayed from the CC event log differs from the quoted RTMR',
  CEL_RECORD_TRUNCATED:
    'the canonical event log ends inside a record: a TLV length exceeds the remaining bytes',
  CEL_RECORD_MALFORMED:
    'a canonical event log record is malformed (TLV order, recnum sequence, index type, digest sizes)',
  CEL_DIGEST_MISMATCH: "a canonical event log record's digest is not the hash of its content",
  CEL_REPLAY_MISMATCH: 'a register replayed from the canonical event log differs from the quoted value',
  // Azure confidential VMs (docs/spec/evidence-azure.md)
  HCL_REPORT_TRUNCATED: 'the Azure HCL report ends before a field or a declared size',
  HCL_REPORT_MALFORMED:
    "the HCL report header is not 'HCLA' v1/v2, its sizes disagree, or its fill is not zero",
  HCL_REPORT_TYPE_UNSUPPORTED: 'the HCL report IGVM report_type is not 2 (SEV-SNP) or 4 (TDX)',
  HCL_REPORT_TYPE_MISMATCH: 'the HCL hardware report area is not the report its report_type names',
  HCL_HASH_TYPE_UNSUPPORTED: 'the HCL report_data_hash_type is not 1, 2 or 3',
  HCL_RUNTIME_DATA_MALFORMED: 'the HCL runtime data is not JSON with exactly one usable HCLAkPub JWK',
  HCL_REPORT_DATA_MISMATCH: 'REPORT_DATA[0:n] of the hardware report is not the hash of the HCL runtime data',
  HCL_AKPUB_INVALID: 'the HCLAkPub JWK does not decode to an RSA or EC public key',
  HCL_AK_MISMATCH: 'the AK presented with the quote is not the HCLAkPub of the HCL report',
  HCL_TD_REPORT_MISMATCH: 'the TD quote body is not the TD report inside the HCL report',
  HCL_EVIDENCE_MISMATCH:
    'the hardware evidence supplied is for the other variant (SNP certificates vs TD quote)',
  // chain trees, checkpoints and receipts (docs/spec/transparency.md)
  TREE_HEAD_SIZE_MISMATCH: 'a claim version 2 names a tree_head.size other than audit_chain.length',
  TREE_HEAD_MISMATCH:
    "the RFC 9162 root recomputed from the bundle's entries is not the claim's tree_head.root",
  RECEIPT_MALFORMED: 'the receipt does not have the receipt shape (docs/spec/transparency.md#receipts)',
  RECEIPT_PENDING:
    'the receipt carries no inclusion proof yet: fetch the complete receipt from its fetch path',
  RECEIPT_ENTRY_MISMATCH:
    "the entry supplied does not hash to the receipt's entry_hash, or names another chain, call or sequence number (a tampered leaf)",
  RECEIPT_LEAF_INDEX_MISMATCH: "the receipt's leaf_index is not its entry's sequence_number (a wrong index)",
  RECEIPT_PROOF_MALFORMED:
    "the inclusion proof has the wrong number of hashes for leaf_index and tree_size, or tree_size is not the checkpoint's size",
  RECEIPT_ROOT_MISMATCH:
    "the inclusion proof does not lead from the entry's leaf at leaf_index to the signed checkpoint's root (a wrong root, index, entry or proof)",
  RECEIPT_SESSION_MISMATCH:
    "the checkpoint's origin names another chain than the receipt, the entry or the claim (a proof from another session)",
  CHECKPOINT_MALFORMED: 'a checkpoint is not a C2SP signed note whose text is a cmcp checkpoint',
  CHECKPOINT_SIGNER_UNKNOWN:
    'no signature on the checkpoint verifies under a gateway key the claim binds or the relying party pinned (signed by another key, or altered)',
  CHECKPOINT_EQUIVOCATION:
    'two signed tree heads of one session disagree: the same size with different roots, or a larger one that the consistency proof (or the entries) does not show extends a smaller one',
  CONSISTENCY_NOT_PROVEN:
    'no consistency proof or bundle was supplied for two checkpoints of different sizes',
  // gateway measurement (docs/spec/measurement.md)
  MEASUREMENT_MALFORMED: 'evidence.measurement does not have the measurement v1 shape',
  MEASUREMENT_INPUTS_MISMATCH: 'the digest recomputed from evidence.measurement.inputs is not its digest',
  MEASUREMENT_CLAIM_MISMATCH:
    'evidence.measurement.digest differs from the claim or preimage gateway_measurement',
  MEASUREMENT_PCR_NOT_QUOTED: 'the measurement PCR is not in the quote selection or has no quoted value',
  MEASUREMENT_PCR_MISMATCH:
    'the quoted measurement PCR is not SHA-256(pcr_before ‖ measurement digest), nor the replay of the measurement event log from pcr_before',
  MEASUREMENT_EVENT_LOG_INVALID:
    'the measurement event log (pcr_events) does not start with this measurement; it cannot be replayed',
} as const;

/** A stable reason code (see {@link REASON_CODES}). */
export type ReasonCode = keyof typeof REASON_CODES;

/** One check: `id` is a stable dotted name (e.g. `claim.signature`, `tpm.pcr_digest`). */
export interface CheckResult {
  id: string;
  status: CheckStatus;
  reason_code: ReasonCode;
  /** Human-readable detail; never contains unbounded attacker-controlled text. */
  detail: string;
}

/**
 * Verdict (docs/spec/claims.md):
 * - `hardware-attested`: hardware signature valid, evidence bound to the claim, signing key
 *   chained to a pinned root.
 * - `hardware-unanchored`: valid hardware-format evidence bound to the claim, but the signing
 *   key is not chained to a pinned root.
 * - `signed-only`: the claim signature is valid; no valid hardware binding.
 * - `invalid`: at least one check failed.
 */
export type Verdict = 'hardware-attested' | 'hardware-unanchored' | 'signed-only' | 'invalid';

/** Verdicts, strongest first. */
export const VERDICT_ORDER: readonly Verdict[] = [
  'hardware-attested',
  'hardware-unanchored',
  'signed-only',
  'invalid',
];

/** True when `verdict` is at least as strong as `minimum`. */
export function verdictAtLeast(verdict: Verdict, minimum: Verdict): boolean {
  return VERDICT_ORDER.indexOf(verdict) <= VERDICT_ORDER.indexOf(minimum);
}

/** A pinned trust anchor used in the verification, identified by SHA-256 of its DER. */
export interface AnchorUsed {
  name: string;
  /** What the anchor vouched for, e.g. `tpm-ak`, `sev-snp-vcek`, `tdx-pck`, `tdx-collateral`. */
  used_for?: string;
  /** Colon-separated uppercase hex SHA-256 of the certificate DER. */
  sha256_fingerprint: string;
  /** True when the anchor is an intermediate pinned with `anchor: intermediate` (a warning). */
  intermediate?: boolean;
}

/**
 * Entries of one audit bundle sharing a caller-asserted execution_id (N ≥ 2). This is an
 * observation for joins only: it does NOT claim the entries were the same logical operation.
 */
export interface ExecutionIdGroup {
  execution_id: string;
  /** Distinct agent_id values among the entries (the registry key is (agent_id, execution_id)). */
  agent_ids: (string | null)[];
  sequence_numbers: number[];
  entry_hashes: string[];
}

/** A replayed TCG2 event log (`verify-evidence --event-log`). */
export interface EventLogSummary {
  /** Events including the Spec ID header. */
  events: number;
  algorithms: { alg: string; digest_size: number }[];
  startup_locality: number | null;
  /** PCRs that received at least one extend (or PCR 0 with a StartupLocality event). */
  covered_pcrs: number[];
  /** bank name → PCR index (decimal string) → lowercase hex of the replayed value. */
  pcrs: Record<string, Record<string, string>>;
}

/**
 * A field of the evidence a relying party appraises, with its value (lowercase hex, or decimal for
 * counters) and whether it is `verified`: covered by a signature that passed and a chain to a
 * pinned root (and, for a PCR, by the quoted pcrDigest).
 */
export interface EvidenceField {
  name: string;
  value: string;
  verified: boolean;
}

/**
 * Who vouches for a claim's signing key (cnf.jwk):
 * - `hardware-attested`: the key is bound into hardware evidence chaining to a pinned root;
 * - `pinned-key`: the relying party pinned this key (RFC 7638 thumbprint);
 * - `self-asserted`: nothing but the claim itself names the key, so anyone could have signed it.
 */
export type ClaimSigner = 'hardware-attested' | 'pinned-key' | 'self-asserted';

/** The full report a verifier prints (text or JSON). */
export interface VerificationReport {
  verdict: Verdict;
  /** Claims only: who vouches for the signing key (see {@link ClaimSigner}). */
  signer?: ClaimSigner;
  /**
   * Claims only: whether the claim meets the relying party's policy — not `invalid`, and
   * `hardware-attested` (or at least the `require` the caller lowered it to), or signed by a
   * pinned key. The exit code of `cmcp verify` is 0 exactly when this is true.
   */
  accepted?: boolean;
  /** Claims only: the weakest verdict the policy accepted without a pinned key. */
  required?: Verdict;
  checks: CheckResult[];
  anchors_used: AnchorUsed[];
  notes: string[];
  execution_id_groups?: ExecutionIdGroup[];
  /** Entries of the audit bundle counted by entry_type (present when a bundle was verified). */
  entry_counts?: Record<string, number>;
  /** Present when an event log was supplied and parsed. */
  event_log?: EventLogSummary;
  /** Every appraised field of the evidence that parsed (see {@link EvidenceField}). */
  fields?: EvidenceField[];
}

/** Id of the check that a hardware signature covers the evidence (TPM quote, SNP report…). */
export const HARDWARE_SIGNATURE_CHECK = 'evidence.signature';
/** Id of the check that the hardware evidence carries this claim's binding (nonce/report data). */
export const HARDWARE_BINDING_CHECK = 'evidence.binding';
/** Id of the check that the hardware signing key chains to a pinned root. */
export const HARDWARE_ANCHOR_CHECK = 'evidence.anchor';
/**
 * Detail of a raw-evidence `evidence.binding` that is `not-applicable` because the relying party
 * gave no nonce / report data: such evidence is never said to be fresh or bound to anything.
 */
export const NOT_FRESH_NO_NONCE = 'not fresh: no nonce given';
/** Id of the claim signature check. */
export const CLAIM_SIGNATURE_CHECK = 'claim.signature';

/** Builds a check result. */
export function check(id: string, status: CheckStatus, reason_code: ReasonCode, detail: string): CheckResult {
  return { id, status, reason_code, detail };
}

/** Shorthand for a passing check with reason `OK`. */
export function pass(id: string, detail: string): CheckResult {
  return check(id, 'pass', 'OK', detail);
}

/** Shorthand for a failing check. */
export function fail(id: string, reason: ReasonCode, detail: string): CheckResult {
  return check(id, 'fail', reason, detail);
}

/**
 * Computes the verdict from a list of checks:
 * 1. any `fail` → `invalid`; a claim signature check that is present and not `pass` → `invalid`;
 * 2. {@link HARDWARE_SIGNATURE_CHECK} and {@link HARDWARE_BINDING_CHECK} both `pass` →
 *    `hardware-attested` when {@link HARDWARE_ANCHOR_CHECK} is `pass`, else `hardware-unanchored`.
 *    For raw evidence (no claim signature check in the list) a binding that is `not-applicable`
 *    (the relying party supplied no nonce) counts like `pass`;
 * 3. otherwise `signed-only`.
 */
export function computeVerdict(checks: readonly CheckResult[]): Verdict {
  if (checks.some((c) => c.status === 'fail')) return 'invalid';
  const status = (id: string) => checks.find((c) => c.id === id)?.status;
  const sig = status(CLAIM_SIGNATURE_CHECK);
  if (sig !== undefined && sig !== 'pass') return 'invalid';
  const binding = status(HARDWARE_BINDING_CHECK);
  // Raw evidence (no claim): a relying party that asked for no nonce gets binding not-applicable,
  // and the evidence can still be hardware-attested. A claim always has a binding to check.
  const bindingOk = binding === 'pass' || (sig === undefined && binding === 'not-applicable');
  if (status(HARDWARE_SIGNATURE_CHECK) === 'pass' && bindingOk) {
    return status(HARDWARE_ANCHOR_CHECK) === 'pass' ? 'hardware-attested' : 'hardware-unanchored';
  }
  return 'signed-only';
}

/** The report note for anchors that are intermediates pinned with `anchor: intermediate`. */
export function intermediateAnchorNotes(anchors: readonly AnchorUsed[]): string[] {
  return anchors
    .filter((a) => a.intermediate)
    .map(
      (a) =>
        `WARNING: ${quoteUntrusted(a.name)} anchors ${a.used_for ?? 'a chain'} as an intermediate CA (trust store says anchor: intermediate), not as a self-signed root.`,
    );
}

/** Bounded, escaped rendering of an untrusted string for `detail` text (max `max` chars). */
export function quoteUntrusted(value: unknown, max = 80): string {
  const s = typeof value === 'string' ? value : String(value);
  const cut = s.length > max ? `${s.slice(0, max)}…` : s;
  return JSON.stringify(cut);
}
