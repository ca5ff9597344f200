/** The SEV-SNP verifier: signature and chain, appraisal, the evidence entry; and the layouts it uses. */
export {
  parseSnpReport,
  SNP_REPORT_SIZE,
  SNP_SIGNED_END,
  SNP_SIGNING_KEY,
  SNP_VERSIONS,
  type SnpReport,
} from '../abi/snp/report.js';
export { decodeSnpTcb, productFromCpuid, type SnpProduct, type SnpTcb } from '../abi/snp/tcb.js';
export { p384Key } from '../crypto/keys.js';
export { appraiseSnpReport, snpBindingCheck } from './appraise.js';
export { type RawSnpEvidence, SNP_KIND } from './evidence.js';
export { type SnpInput, type SnpResult, verifySnpReport } from './report.js';
export { type SnpSignatureInput, type VerifiedSnpReport, verifySnpSignature } from './signature.js';
export { productFromName, productNameExtension, SNP_OID, splExtension } from './vcek.js';
