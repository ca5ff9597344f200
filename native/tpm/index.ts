/** Native TPM 2.0 layer (tpm2-tss via koffi). */
export { makeCredential } from './credential.js';
export { EK_PROFILES, type EkAlgorithm, ekTemplate } from './ek.js';
export { TpmError, type TpmErrorCode } from './errors.js';
export {
  HCL_AK_HANDLE,
  HCL_REPORT_NV_INDEX,
  hasHclReport,
  parentQualifiedNameOf,
  readHclReport,
} from './hcl.js';
export {
  flushInstanceLeftovers,
  type InstanceAk,
  instanceAkHandle,
  instanceTag,
  openInstanceAk,
  transientHandles,
} from './instance-ak.js';
export {
  akAttributeProblem,
  hierarchyQualifiedName,
  nameOfPublic,
  parsePublic,
  publicKeyOf,
  qualifiedNameOf,
  spkiDer,
} from './public.js';
export {
  type AkAlgorithm,
  type AkBlobs,
  akTemplate,
  isHandleAbsent,
  type NvPublic,
  type ReadPublicResult,
  TPM_RH_ENDORSEMENT,
  Tpm,
  type TpmAk,
  type TpmEk,
  type TpmQuote,
} from './tpm.js';
