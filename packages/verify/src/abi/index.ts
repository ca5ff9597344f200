/**
 * `@cmcp/verify/abi`: one owner per hardware byte layout (as go-sev-guest's `abi/`). Parsers
 * return plain typed values and throw {@link AbiError}; there is no crypto and no policy here.
 * Every layout's parsers are exported flat (`parseTpmsAttest`, `parseSnpReport`, …) and per
 * platform as a namespace (`tpm`, `snp`, `tdx`, `azure`, `eventlog`).
 * - `tpm/`: TPMS_ATTEST, TPMT_SIGNATURE, TPMT_PUBLIC, TPMA_OBJECT and the AK attribute rule,
 *   TPML_PCR_SELECTION, TPML_DIGEST, TPM2B_*, TPMS_NV_PUBLIC (TPM 2.0 Part 2).
 * - `snp/`: ATTESTATION_REPORT, TCB_VERSION per product, the extended-report certificate table.
 * - `tdx/`: DCAP quote v4/v5, TD report, QE report, certification data.
 * - `azure/`: the Azure CVM paravisor (HCL) report and its runtime data.
 * - `eventlog/`: the TCG2 crypto-agile event log.
 * - `reader.ts`: the bounded byte reader and writer all of them use.
 */

export * as azure from './azure/index.js';
export * from './azure/index.js';
export * from './errors.js';
export * as eventlog from './eventlog/index.js';
export * from './eventlog/index.js';
export * from './reader.js';
export * from './snp/index.js';
export * as snp from './snp/index.js';
export * from './tdx/index.js';
export * as tdx from './tdx/index.js';
export * from './tpm/index.js';
export * as tpm from './tpm/index.js';
