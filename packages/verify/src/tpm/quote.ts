/**
 * TPM2_Quote verification, reusable by claims and raw evidence: the signature layer
 * ({@link verifyQuoteSignature}), then binding and appraisal (./appraise.ts). The AK
 * certificate chain is checked by the evidence entry (./evidence.ts), not here.
 */
import type { TpmsAttestQuote } from '../abi/tpm/attest.js';
import type { PcrSelection } from '../abi/tpm/pcr.js';
import type { TpmtSignature } from '../abi/tpm/signature.js';
import type { KeyObject } from '../crypto/keys.js';
import type { CheckResult } from '../result.js';
import type { TpmtPublic } from './ak.js';
import {
  declaredSelectionCheck,
  extraDataCheck,
  pcrDigestCheck,
  pcrPolicyCheck,
  qualifiedSignerCheck,
} from './appraise.js';
import type { PcrValue } from './pcr.js';
import { type TpmSignatureInput, type VerifiedTpmQuote, verifyQuoteSignature } from './signature.js';

/** Input of {@link verifyTpmQuote}. All byte strings are wire format. */
export interface TpmQuoteInput extends TpmSignatureInput {
  /**
   * The Qualified Name of the AK's parent (TPM 2.0 Part 1 §16): for a primary key, the 4-byte
   * hierarchy handle (e.g. TPM_RH_ENDORSEMENT 0x4000000B). When given, qualifiedSigner must equal
   * the AK's Qualified Name nameAlg ‖ H_nameAlg(parentQN ‖ Name); when absent, it must equal the
   * AK's Name.
   */
  akParentQualifiedName?: Uint8Array;
  /** Expected extraData (qualifyingData), compared at exact length; null skips (not-applicable). */
  expectedExtraData: Uint8Array | null;
  /** Description of the expected extraData for details, e.g. "SHA-256(REPORT_DATA)". */
  expectedExtraDataLabel?: string;
  /** PCR values to recompute pcrDigest from; undefined ⇒ the digest check is `absent`. */
  pcrValues?: readonly PcrValue[];
  /** The selection the evidence says it covers (e.g. the claim's pcr_selection). */
  declaredSelection?: readonly PcrSelection[];
  /** The verifier's policy: the quote must select exactly this set. */
  requiredSelection?: readonly PcrSelection[];
}

/** Result of {@link verifyTpmQuote}: the checks, and the parsed structures where they parsed. */
export interface TpmQuoteResult {
  checks: CheckResult[];
  attest?: TpmsAttestQuote;
  signature?: TpmtSignature;
  akPublic?: TpmtPublic;
  /** Set when `evidence.signature` passed. */
  verified?: VerifiedTpmQuote;
  /** The key that was (or would have been) used: the AK's, or the bare key supplied. */
  key?: KeyObject;
}

/**
 * Verifies a TPM2_Quote and returns one check per property, in this order (ids stable):
 * `tpm.attest_parse`, `tpm.signature_parse`, `tpm.ak_public`, `tpm.ak_attributes`,
 * `tpm.signature_scheme`, `evidence.signature` (quote signature under the AK),
 * `evidence.binding` (extraData equals the expected value exactly), `tpm.qualified_signer`,
 * `tpm.pcr_selection`, `tpm.pcr_policy`, `tpm.pcr_digest`.
 *
 * A check whose input did not parse fails with the parse reason (never skipped). Checks the
 * caller supplied no input for are `absent` (evidence missing) or `not-applicable` (no policy).
 */
export function verifyTpmQuote(input: TpmQuoteInput): TpmQuoteResult {
  const s = verifyQuoteSignature(input);
  const { attest, signature } = s;
  const checks = [
    ...s.checks,
    extraDataCheck(
      attest,
      input.expectedExtraData,
      input.expectedExtraDataLabel ?? 'expected qualifyingData',
    ),
    qualifiedSignerCheck(
      attest,
      { supplied: 'public' in input.ak, ...(s.akPublic ? { parsed: s.akPublic } : {}) },
      input.akParentQualifiedName,
    ),
    declaredSelectionCheck(attest, input.declaredSelection),
    pcrPolicyCheck(attest, input.requiredSelection),
    pcrDigestCheck(attest, signature, input.pcrValues),
  ];
  const key = s.akPublic?.key ?? ('key' in input.ak ? input.ak.key : undefined);
  return {
    checks,
    ...(attest ? { attest } : {}),
    ...(signature ? { signature } : {}),
    ...(s.akPublic ? { akPublic: s.akPublic } : {}),
    ...(s.verified ? { verified: s.verified } : {}),
    ...(key ? { key } : {}),
  };
}
