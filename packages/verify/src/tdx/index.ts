/** The TDX verifier: signature and chain, appraisal, collateral, the evidence entry; and the layouts it uses. */
export {
  parseTdxQuote,
  type QeReport,
  TDX_TEE_TYPE,
  type TdReport,
  type TdxQuote,
} from '../abi/tdx/quote.js';
export { appraiseTdxQuote, tdxBindingCheck } from './appraise.js';
export {
  type CcelCheckInput,
  type CcelCheckResult,
  type CcelReplay,
  replayCcel,
  verifyCcel,
} from './ccel.js';
export * from './collateral.js';
export { type RawTdxEvidence, TDX_KIND } from './evidence.js';
export { type PckExtension, pckExtension, pckLeafProblem } from './pck.js';
export { type TdxInput, type TdxResult, verifyTdxQuote } from './quote.js';
export {
  INTEL_QE_VENDOR_ID,
  type TdxSignatureResult,
  type VerifiedTdxQuote,
  verifyTdxSignature,
} from './signature.js';
