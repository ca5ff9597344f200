/** The TPM verifier: AK and signature, appraisal, the evidence entry; and the layouts it uses. */
export {
  parseTpmsAttest,
  type TpmsAttestQuote,
  type TpmsClockInfo,
  unwrapTpm2bAttest,
} from '../abi/tpm/attest.js';
export { algName, TPM_ALG, TPM_GENERATED_VALUE, TPM_ST_ATTEST_QUOTE } from '../abi/tpm/constants.js';
export {
  layoutMismatch,
  parseSerializedPcrs,
  readTpmPublicFile,
  splitPcrValues,
  type TpmPcrEntry,
  type TpmPublicFile,
  tpmFileLayout,
} from '../abi/tpm/files.js';
export type { PcrSelection } from '../abi/tpm/pcr.js';
export { AK_ATTRIBUTE_RULE, akAttributeProblem, TPMA_OBJECT, type TpmScheme } from '../abi/tpm/public.js';
export type { TpmtSignature } from '../abi/tpm/signature.js';
export { hashInfo } from '../crypto/hash.js';
export { parseTpmtPublic, parseTpmtSignature, STRONG_HASHES, type TpmtPublic } from './ak.js';
export {
  declaredSelectionCheck,
  extraDataCheck,
  pcrDigestCheck,
  pcrPinsCheck,
  pcrPolicyCheck,
  qualifiedSignerCheck,
} from './appraise.js';
export { type RawTpmEvidence, TPM_KIND } from './evidence.js';
export {
  akPlainScheme,
  PLAIN_SIGNATURE_FORMATS,
  type PlainScheme,
  plainSchemeByName,
  plainSignature,
} from './files.js';
export { computePcrDigest, describeSelection, type PcrValue, pcrDigest, sameSelection } from './pcr.js';
export { type TpmQuoteInput, type TpmQuoteResult, verifyTpmQuote } from './quote.js';
export {
  tpmSignatureCheck,
  type VerifiedTpmQuote,
  verifyQuoteSignature,
  verifyTpmSignature,
} from './signature.js';
