/** The Azure confidential VM verifier (HCL report → HCLAkPub → vTPM quote); and the layouts it uses. */
export {
  HCL_REPORT_NV_INDEX,
  type HclReport,
  parseHclReport,
} from '../abi/azure/hcl.js';
export { HCL_AKPUB_KID, type HclRuntimeData, parseHclRuntimeData } from '../abi/azure/runtime-data.js';
export { akMatchCheck, reportDataCheck, tdReportCheck } from './appraise.js';
export { AZURE_CVM_KIND, type AzureHclInput, type RawAzureEvidence, verifyAzureHcl } from './evidence.js';
export { type AzureHardwareInput, hardwareChecks, parseHclChecks, quoteChecks } from './signature.js';
