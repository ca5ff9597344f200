/**
 * Registered error codes of the verifier package and of the native attestation layer (part of
 * the one registry, {@link ERRORS} in ./index.ts, which spreads these tables in).
 *
 * - Byte-layout parse errors ({@link AbiError}, packages/verify/src/abi/errors.ts): the code is
 *   also the reason code a failed `*_parse` check reports (REASON_CODES in result.ts).
 * - Certificates, collateral and policy files of the verifier.
 * - The native TPM (tpm2-tss) and configfs-tsm / sev-guest layers used by the gateway.
 *
 * JSON-RPC codes: -32080..-32084 for evidence the caller supplied (-32084: a batched binding's proof), -32090..-32093 for the
 * gateway's own attestation hardware.
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

const hw = (http: number, rpc: number, summary: string): ErrorSpec => ({ http, rpc, summary });

/** The gateway's own attestation hardware (native/). */
export const ATTESTATION_ERRORS = {
  TSS_LIBRARY_MISSING: hw(503, -32090, 'The libtss2-* shared libraries could not be loaded.'),
  TCTI_INIT_FAILED: hw(503, -32090, 'Tss2_TctiLdr_Initialize failed: bad TCTI string or nothing listening.'),
  TPM_UNREACHABLE: hw(503, -32090, 'The TCTI layer failed mid-session (TPM gone, socket closed, I/O error).'),
  TPM_RC: hw(500, -32090, 'The TPM or a tpm2-tss layer returned a non-success TSS2_RC.'),
  TPM_BAD_INPUT: hw(400, -32090, 'The TPM layer refused its input before talking to the TPM.'),
  TPM_CLOSED: hw(500, -32090, 'The TPM connection or key was closed or flushed.'),
  PCR_CHANGED: hw(503, -32090, 'PCR values kept changing between TPM2_PCR_Read and TPM2_Quote.'),
  TPM_BAD_RESPONSE: hw(500, -32090, 'The TPM answered with something inconsistent with the request.'),
  TPM_BUSY: hw(
    500,
    -32090,
    'An ESYS context was used while an asynchronous TPM command was in flight on it (a caller did not serialise).',
  ),
  TSM_ABSENT: hw(503, -32091, 'No configfs-tsm report directory (no TSM provider loaded).'),
  TSM_ENTRY_FAILED: hw(500, -32091, 'mkdir of the configfs-tsm report entry failed.'),
  TSM_WRITE_REFUSED: hw(500, -32091, 'The kernel refused the configfs-tsm inblob write.'),
  TSM_READ_FAILED: hw(500, -32091, 'Reading a configfs-tsm attribute failed, or the report was empty.'),
  TSM_GENERATION_CHANGED: hw(503, -32091, 'Another writer raced the configfs-tsm report entry.'),
  TSM_PROVIDER_MISMATCH: hw(500, -32091, 'The configfs-tsm provider is not the one asked for.'),
  TSM_TIMEOUT: hw(503, -32091, 'The configfs-tsm report did not appear within the timeout.'),
  CERT_TABLE_MALFORMED: hw(500, -32092, 'The SEV-SNP certificate table from the host does not parse.'),
  SEV_GUEST_IOCTL_FAILED: hw(500, -32092, 'An SNP_GET_REPORT / SNP_GET_EXT_REPORT ioctl failed.'),
  SEV_GUEST_ABSENT: hw(503, -32092, 'The /dev/sev-guest device cannot be opened.'),
} as const satisfies Record<string, ErrorSpec>;
