/** Native TPM 2.0 layer (tpm2-tss via koffi). */
export { TpmError, type TpmErrorCode } from './errors.js';
export { type AkAlgorithm, akTemplate, TPM_RH_ENDORSEMENT, Tpm, type TpmAk, type TpmQuote } from './tpm.js';
