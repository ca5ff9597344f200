/**
 * The error codes @cmcp/verify owns (registered by ./index.ts; the gateway and native/ register
 * their own next to them):
 *
 * - Byte-layout parse errors ({@link AbiError}, packages/verify/src/abi/errors.ts): the code is
 *   also the reason code a failed `*_parse` check reports (REASON_CODES in result.ts).
 * - Certificates, collateral and policy files of the verifier.
 * - Batched bindings' inclusion proofs, canonical JSON, and the `cmcp-verify` command line.
 *
 * JSON-RPC codes: -32080..-32084 for evidence the caller supplied (-32084: a batched binding's
 * proof), -32085 for transparency formats, -32086 for attested-TLS refusals; -32602 for input
 * the verifier refuses.
 */
import type { ErrorSpec } from './spec.js';

const parse = (summary: string): ErrorSpec => ({ http: 400, rpc: -32080, summary });

/** Byte-layout parse errors (one class: AbiError). */
export const ABI_ERRORS = {
  TPM_ATTEST_MALFORMED: parse('TPMS_ATTEST does not unmarshal (bad size field or value).'),
  TPM_ATTEST_TRUNCATED: parse('TPMS_ATTEST (or its TPM2B wrapper) ends before its declared content.'),
  TPM_ATTEST_TRAILING_BYTES: parse('Bytes follow the TPMS_ATTEST (or TPM2B) content.'),
  TPM_ATTEST_BAD_MAGIC: parse('TPMS_ATTEST.magic is not TPM_GENERATED_VALUE 0xff544347.'),
  TPM_ATTEST_NOT_QUOTE: parse('TPMS_ATTEST.type is not TPM_ST_ATTEST_QUOTE 0x8018.'),
  TPM_SIGNATURE_MALFORMED: parse('TPMT_SIGNATURE does not unmarshal exactly.'),
  TPM_SIGNATURE_UNSUPPORTED: parse('TPMT_SIGNATURE algorithm or hash is not supported.'),
  AK_PUBLIC_MALFORMED: parse('TPMT_PUBLIC does not unmarshal exactly.'),
  AK_PUBLIC_UNSUPPORTED: parse('TPMT_PUBLIC key type, curve or scheme is not one this layout knows.'),
  TPM_STRUCTURE_MALFORMED: parse(
    'A TPM 2.0 structure (TPML_PCR_SELECTION, TPML_DIGEST, TPM2B_*, TPMS_NV_PUBLIC) does not unmarshal exactly.',
  ),
  SNP_REPORT_MALFORMED: parse(
    'The SEV-SNP ATTESTATION_REPORT is not 1184 bytes or a reserved/padding field is not zero.',
  ),
  SNP_VERSION_UNSUPPORTED: parse('The SEV-SNP report version is not in the allow-list (2, 3, 5).'),
  SNP_SIGNATURE_MALFORMED: parse('The SEV-SNP report signature slots have non-zero padding.'),
  SNP_CERT_TABLE_MALFORMED: parse('The SEV-SNP extended-report certificate table does not parse.'),
  TDX_QUOTE_MALFORMED: parse('The TDX quote does not parse (bad size, type or layout).'),
  TDX_QUOTE_TRUNCATED: parse('The TDX quote ends before its declared content.'),
  TDX_VERSION_UNSUPPORTED: parse('The TDX quote version is not 4 or 5.'),
  TDX_BODY_TYPE_UNSUPPORTED: parse('The TDX quote body type / TEE type is not a TD report (TDX 1.0 / 1.5).'),
  TDX_ATT_KEY_TYPE_UNSUPPORTED: parse('The TDX attestation key type is not 2 (ECDSA-256 with P-256).'),
  TDX_CERT_DATA_UNSUPPORTED: parse(
    'TDX certification data is not a QE report (6) with a PCK chain (5) inside.',
  ),
  HCL_REPORT_TRUNCATED: parse('The Azure HCL report ends before a field or a declared size.'),
  HCL_REPORT_MALFORMED: parse(
    "The Azure HCL report header is not 'HCLA' v1/v2, its sizes disagree, or its zero fill is not zero.",
  ),
  HCL_REPORT_TYPE_UNSUPPORTED: parse('The HCL report IGVM report_type is not 2 (SEV-SNP) or 4 (TDX).'),
  HCL_REPORT_TYPE_MISMATCH: parse('The HCL report hardware area is not the report its report_type names.'),
  HCL_HASH_TYPE_UNSUPPORTED: parse(
    'The HCL report report_data_hash_type is not 1, 2 or 3 (SHA-256/384/512).',
  ),
  HCL_RUNTIME_DATA_MALFORMED: parse(
    'The HCL runtime data is not a JSON object with a keys array holding exactly one usable HCLAkPub JWK.',
  ),
  TPM_FILE_LAYOUT_MISMATCH: parse(
    'A TPM file has another layout than its flag takes (e.g. a TPMT_SIGNATURE given as the AK); the message names what it is.',
  ),
  PCR_FILE_MALFORMED: parse(
    'A tpm2-tools PCR values file (-F serialized or -F values) does not parse or does not fit the quote selection.',
  ),
  TPM_SIGNATURE_SCHEME_UNKNOWN: parse(
    'A plain signature (tpm2_quote -f plain) whose scheme and hash neither the AK TPMT_PUBLIC nor --tpm-sig-format gives.',
  ),
  EVENTLOG_TRUNCATED: parse('The TCG2 event log ends inside an event.'),
  EVENTLOG_MALFORMED: parse('The TCG2 event log is not a consistent crypto-agile log.'),
  CCEL_TABLE_MALFORMED: parse(
    'The ACPI CCEL table is not 56 bytes with signature "CCEL", a zero checksum sum, a zero reserved field and CC type 2 (TDX).',
  ),
  CCEL_EVENT_TRUNCATED: parse('The TDX CC event log ends inside an event.'),
  CCEL_EVENT_MALFORMED: parse(
    'The TDX CC event log is not a consistent crypto-agile log (header, algorithms, sizes or MR index).',
  ),
  CEL_RECORD_TRUNCATED: parse('The canonical event log (CEL) ends inside a record.'),
  CEL_RECORD_MALFORMED: parse(
    'A canonical event log (CEL) record is not recnum, index, digests and content TLVs in sequence.',
  ),
} as const satisfies Record<string, ErrorSpec>;

/** Certificates, collateral and policy files the relying party supplies. */
export const VERIFY_INPUT_ERRORS = {
  CERT_MALFORMED: { http: 400, rpc: -32081, summary: 'A certificate is not valid DER/PEM X.509.' },
  CHAIN_NOT_SUPPLIED: { http: 400, rpc: -32081, summary: 'No certificate was supplied.' },
  AK_CHAIN_MALFORMED: { http: 400, rpc: -32081, summary: 'An AK certificate is not valid DER X.509.' },
  COLLATERAL_MALFORMED: { http: 400, rpc: -32082, summary: 'TDX collateral does not parse.' },
  COLLATERAL_MISMATCH: {
    http: 400,
    rpc: -32082,
    summary: 'TDX collateral is for another platform (FMSPC, PCEID, TDX module, QE identity).',
  },
  CERT_REVOKED: { http: 400, rpc: -32082, summary: 'A certificate of the chain is listed in a CRL.' },
  COLLATERAL_SIGNATURE_INVALID: {
    http: 400,
    rpc: -32082,
    summary: 'A TDX collateral signature does not verify over the raw bytes received.',
  },
  COLLATERAL_EXPIRED: {
    http: 400,
    rpc: -32082,
    summary: 'TDX collateral is outside its issueDate/nextUpdate window at the verification time.',
  },
  TCB_STATUS_NOT_ACCEPTED: {
    http: 400,
    rpc: -32082,
    summary: 'The TDX TCB status is not one the reference values accept.',
  },
  DEPENDENCY_FAILED: {
    http: 400,
    rpc: -32082,
    summary: 'A verification step could not run because an input it needs failed an earlier step.',
  },
  TCB_LEVEL_NOT_FOUND: {
    http: 400,
    rpc: -32082,
    summary: 'No TCB level of the TDX collateral covers the platform.',
  },
  TRUST_STORE_INVALID: { http: 400, rpc: -32083, summary: 'The trust store file does not validate.' },
  REFERENCE_VALUES_INVALID: {
    http: 400,
    rpc: -32083,
    summary: 'The reference values file does not validate.',
  },
} as const satisfies Record<string, ErrorSpec>;

/**
 * A batched session binding (docs/spec/binding.md#batched-bindings): the claim's leaf index, tree
 * size, root and RFC 6962 audit path. Each is also the reason code of the failed check.
 */
export const BINDING_BATCH_ERRORS = {
  TREE_SIZE_OUT_OF_RANGE: {
    http: 400,
    rpc: -32084,
    summary:
      'binding.batch.tree_size is not a whole number from 1 to 1024 (the largest batch a claim may name).',
  },
  LEAF_INDEX_OUT_OF_RANGE: {
    http: 400,
    rpc: -32084,
    summary: 'binding.batch.leaf_index is not a whole number below binding.batch.tree_size.',
  },
  INCLUSION_PROOF_INVALID: {
    http: 400,
    rpc: -32084,
    summary:
      'The RFC 6962 audit path does not lead from the session binding digest to binding.batch.root at any leaf index (a tampered or truncated proof).',
  },
  LEAF_INDEX_MISMATCH: {
    http: 400,
    rpc: -32084,
    summary:
      'The audit path proves the session binding digest at another leaf index than binding.batch.leaf_index.',
  },
  BATCH_ROOT_MISMATCH: {
    http: 400,
    rpc: -32084,
    summary:
      'binding.batch.root is not the root the evidence binds (REPORT_DATA is not key_thumbprint ‖ batch digest of that root and tree size).',
  },
} as const satisfies Record<string, ErrorSpec>;

/** Canonical JSON, and the command line's input and keys (`cmcp-verify`, embedded as `cmcp verify`). */
export const VERIFIER_ERRORS = {
  CANONICAL_JSON_INVALID: {
    http: 400,
    rpc: -32602,
    summary:
      "A value cannot be canonicalised under cmcp's JCS profile (RFC 8785): a lone surrogate, a non-finite number, an integer beyond ±(2^53−1), or nesting deeper than 128.",
  },
  VERIFY_INPUT_INVALID: {
    http: 400,
    rpc: -32602,
    summary: '`cmcp verify` / `verify-evidence`: an unreadable file or a bad flag (exit code 2).',
  },
  VERIFY_KEY_INVALID: {
    http: 400,
    rpc: -32602,
    summary:
      "`cmcp verify --key`: not an Ed25519 public JWK file or RFC 7638 thumbprint — a claim file (its cnf.jwk is whichever key signed it) or a JWK with private members is refused; pin the gateway's key from a trusted source (exit code 2).",
  },
  EAR_KEY_REQUIRED: {
    http: 400,
    rpc: -32602,
    summary:
      '`cmcp verify --format ear`: no `--ear-key` was given to sign the attestation result (exit code 2).',
  },
  EAR_KEY_INVALID: {
    http: 400,
    rpc: -32602,
    summary:
      '`cmcp verify --ear-key`: not a private P-256, P-384 or Ed25519 key in PEM or JWK (exit code 2).',
  },
} as const satisfies Record<string, ErrorSpec>;

/**
 * Transparency formats (docs/spec/transparency.md): a chain's Merkle tree state, its proofs,
 * signed notes, checkpoints and receipts that do not parse or do not fit. Verification failures
 * of well-formed input are reason codes of the verifier's checks (result.ts), not these.
 */
const tlog = (summary: string): ErrorSpec => ({ http: 400, rpc: -32085, summary });

/** Codes of packages/verify/src/transparency/ (TransparencyError). */
export const TRANSPARENCY_ERRORS = {
  TREE_LEAF_MALFORMED: tlog(
    'A tree leaf is not an entry_hash of 64 lowercase hex (or a leaf hash of 32 bytes).',
  ),
  TREE_SIZE_INVALID: tlog(
    'A tree size, leaf index or proof bound is not a whole number ≥ 0 within 2^53 − 1.',
  ),
  TREE_STATE_MALFORMED: tlog(
    'A serialised tree frontier does not have one 32-byte hash per set bit of its size.',
  ),
  TREE_NODE_MISSING: tlog('A proof needs a perfect subtree node the reader does not have.'),
  PROOF_RANGE_INVALID: tlog(
    'A proof was asked for a leaf index not below the tree size, or between sizes whose first exceeds the second.',
  ),
  NOTE_MALFORMED: tlog(
    'A signed note (C2SP signed-note) does not parse: control characters, no blank line before the signatures, or a bad signature line.',
  ),
  NOTE_KEY_INVALID: tlog(
    'A note verifier key (name+hex key ID+base64 type‖key) does not parse, is not Ed25519 (type 0x01) or its key ID is not the one its name and key give.',
  ),
  CHECKPOINT_MALFORMED: tlog(
    'A checkpoint note text (C2SP tlog-checkpoint) is not origin, decimal size and base64 32-byte root lines, or its origin is not a cmcp chain.',
  ),
  RECEIPT_MALFORMED: tlog('A receipt (docs/spec/transparency.md#receipts) does not have the receipt shape.'),
} as const satisfies Record<string, ErrorSpec>;

const tlsRefusal = (summary: string): ErrorSpec => ({ http: 400, rpc: -32086, summary });

/**
 * Attested TLS (docs/spec/attested-tls.md#client-checks): why a client refused a server before
 * sending any request. Each is also the reason `cmcp-verify tls` reports.
 */
export const ATTESTED_TLS_ERRORS = {
  TLS_EVIDENCE_MISSING: tlsRefusal(
    'The server certificate carries no tcg-dice-conceptual-message-wrapper extension and no evidence document was given (e.g. a plain TLS server, whatever its chain).',
  ),
  TLS_EVIDENCE_MALFORMED: tlsRefusal(
    'The evidence extension is not a DER UTF8String holding a JSON CMW record of application/vnd.cmcp.tls-evidence+json, or the document inside is not a cmcp.tls-evidence/1 document.',
  ),
  TLS_KEY_NOT_BOUND: tlsRefusal(
    "The SHA-256 of the server certificate's SubjectPublicKeyInfo is not the spki_sha256 the evidence binds (evidence copied into another key's certificate, or a rotated key).",
  ),
  TLS_KEY_NOT_GENERATED: tlsRefusal(
    'The bound TLS key came from files (key_origin "file"): it existed outside the gateway process; refused unless the client allows file keys.',
  ),
  TLS_BINDING_INVALID: tlsRefusal(
    'The binding does not hold together: not a cmcp.tls-binding/1 preimage, key_thumbprint is not the RFC 7638 thumbprint of cnf.jwk, or evidence.report_data is not key_thumbprint ‖ SHA-256(JCS(preimage)).',
  ),
  TLS_EVIDENCE_ABSENT: tlsRefusal(
    'The gateway could not bind its TLS key (evidence.status "absent", the provider\'s reason in the message).',
  ),
  TLS_EVIDENCE_INVALID: tlsRefusal(
    "The hardware evidence does not verify over the binding's REPORT_DATA (e.g. a quote of another gateway, a bad signature or chain); the failed check and its reason are in the message.",
  ),
  TLS_EVIDENCE_UNANCHORED: tlsRefusal(
    'The hardware evidence verifies but chains to no root the client pinned (hardware-unanchored); refused unless the client allows it.',
  ),
  TLS_MEASUREMENT_MISMATCH: tlsRefusal(
    'The bound gateway_measurement is not one the client expects (or the client pinned none).',
  ),
  TLS_POLICY_MISMATCH: tlsRefusal('The bound policy_bundle_hash is not the one the client pinned.'),
  TLS_CATALOG_MISMATCH: tlsRefusal('The bound catalog_hash is not the one the client pinned.'),
  TLS_EVIDENCE_EXPIRED: tlsRefusal(
    "The binding's not_after (or the certificate's notAfter) has passed, or its issued_at or notBefore lies in the future beyond the allowed clock skew.",
  ),
  TLS_EVIDENCE_STALE: tlsRefusal("The binding's issued_at is older than the client's maximum age."),
  TLS_BINDING_REPLAYED: tlsRefusal(
    'The binding is older than one this client already accepted from the same server and gateway instance (a replayed earlier binding).',
  ),
} as const satisfies Record<string, ErrorSpec>;

/** Every code @cmcp/verify owns. */
export const VERIFY_ERRORS = {
  ...VERIFIER_ERRORS,
  ...ABI_ERRORS,
  ...VERIFY_INPUT_ERRORS,
  ...BINDING_BATCH_ERRORS,
  ...TRANSPARENCY_ERRORS,
  ...ATTESTED_TLS_ERRORS,
} as const satisfies Record<string, ErrorSpec>;
