/**
 * @cmcp/verify — the relying party's library: verifies cmcp claims and audit bundles, and raw
 * TPM 2.0, SEV-SNP and TDX evidence, offline, trusting only the pinned roots it is given.
 * Deeper modules are reachable as subpaths (`@cmcp/verify/format/canonical`,
 * `@cmcp/verify/abi/tpm/attest`, `@cmcp/verify/tpm/index`, …).
 */
export { type BundleExpectations, type BundleVerification, verifyBundle } from './bundle.js';
export { type VerifyClaimOptions, verifyClaim } from './claim.js';
export {
  type RawEventLogEvidence,
  type RawSnpEvidence,
  type RawTdxEvidence,
  type RawTpmEvidence,
  verifyEventLogEvidence,
  verifyRawEvidence,
  verifySnpEvidence,
  verifyTdxEvidence,
  verifyTpmEvidence,
} from './evidence.js';
export { EVIDENCE_KINDS, evidenceKind, type RawEvidenceByKind } from './kinds.js';
export { renderJson, renderText } from './render.js';
export {
  type CheckResult,
  type CheckStatus,
  computeVerdict,
  REASON_CODES,
  type ReasonCode,
  type Verdict,
  type VerificationReport,
} from './result.js';
export { parseReferenceValues, parseTrustStore, type ReferenceValues, type TrustStore } from './trust.js';
export { defaultAttestationDir, loadReferenceValues, loadTrustStore } from './trust-files.js';
