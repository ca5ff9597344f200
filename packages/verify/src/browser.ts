/**
 * The browser entry of @cmcp/verify (bundled by `npm run build:browser`): everything a page
 * needs to verify claims, bundles and raw evidence it fetched itself — the verifiers, the trust
 * store and reference values parsers (from YAML text; no file loading), and the report
 * renderers. The Node-only parts (file loaders, `defaultAttestationDir`, the CLI) stay out.
 */
export { type BundleExpectations, type BundleVerification, verifyBundle } from './bundle.js';
export { type VerifyClaimOptions, verifyClaim } from './claim.js';
export {
  type RawAzureEvidence,
  type RawEventLogEvidence,
  type RawSnpEvidence,
  type RawTdxEvidence,
  type RawTpmEvidence,
  verifyAzureCvmEvidence,
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
