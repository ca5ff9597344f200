/**
 * TPM quote binding and appraisal: extraData against the expected qualifyingData
 * (`evidence.binding`), qualifiedSigner against the AK's (Qualified) Name, the PCR selection
 * against the declared one and the verifier's policy, pcrDigest against supplied PCR values,
 * and PCR values against reference-value pins. Sources: TPM 2.0 Part 2 §10.12.12 (TPMS_ATTEST),
 * Part 1 §16 (Names), Part 3 §18.4 (TPM2_Quote).
 */
import type { TpmsAttestQuote } from '../abi/tpm/attest.js';
import { algName, TPM_ALG } from '../abi/tpm/constants.js';
import type { PcrSelection } from '../abi/tpm/pcr.js';
import type { TpmtSignature } from '../abi/tpm/signature.js';
import { digest, hashInfo } from '../crypto/hash.js';
import {
  type CheckResult,
  check,
  fail,
  HARDWARE_BINDING_CHECK,
  NOT_FRESH_NO_NONCE,
  pass,
} from '../result.js';
import type { TpmtPublic } from './ak.js';
import { describeSelection, type PcrValue, pcrDigest, sameSelection } from './pcr.js';

const parseDep = (id: string) => fail(id, 'DEPENDENCY_FAILED', 'TPMS_ATTEST did not parse');

/** `evidence.binding`: extraData equals the expected qualifyingData at exact length. */
export function extraDataCheck(
  attest: TpmsAttestQuote | undefined,
  expected: Uint8Array | null,
  label: string,
): CheckResult {
  if (expected === null) {
    return check(HARDWARE_BINDING_CHECK, 'not-applicable', 'NOT_SUPPLIED', NOT_FRESH_NO_NONCE);
  }
  if (!attest) return parseDep(HARDWARE_BINDING_CHECK);
  const want = Buffer.from(expected);
  if (attest.extraData.length === want.length && attest.extraData.equals(want)) {
    return pass(HARDWARE_BINDING_CHECK, `extraData equals ${label} (${want.length} bytes)`);
  }
  return fail(
    HARDWARE_BINDING_CHECK,
    'QUOTE_NONCE_MISMATCH',
    `extraData (${attest.extraData.length} bytes) is not ${label} (${want.length} bytes): the quote is for another binding`,
  );
}

/**
 * `tpm.qualified_signer`: with a parent Qualified Name (for a primary key, its 4-byte hierarchy
 * handle), qualifiedSigner must be nameAlg ‖ H_nameAlg(parentQN ‖ Name); otherwise the AK Name.
 */
export function qualifiedSignerCheck(
  attest: TpmsAttestQuote | undefined,
  ak: { supplied: boolean; parsed?: TpmtPublic },
  parentQualifiedName: Uint8Array | undefined,
): CheckResult {
  const id = 'tpm.qualified_signer';
  if (!attest) return parseDep(id);
  if (!ak.supplied)
    return check(id, 'absent', 'AK_PUBLIC_NOT_SUPPLIED', 'AK name unknown without TPMT_PUBLIC');
  if (!ak.parsed) return fail(id, 'DEPENDENCY_FAILED', 'AK public area did not parse');
  const name = ak.parsed.name;
  let expected: Buffer | null = name;
  let label = 'the AK name';
  if (parentQualifiedName) {
    const h = hashInfo(name.readUInt16BE(0));
    expected = h ? Buffer.concat([name.subarray(0, 2), digest(h.node, parentQualifiedName, name)]) : null;
    label = `the AK qualified name under parent ${Buffer.from(parentQualifiedName).toString('hex')}`;
  }
  if (!expected || !attest.qualifiedSigner.equals(expected)) {
    return fail(
      id,
      'QUALIFIED_SIGNER_MISMATCH',
      `qualifiedSigner ${attest.qualifiedSigner.toString('hex').slice(0, 70)} is not ${label}${
        parentQualifiedName
          ? ''
          : " (a TPM key's qualified name is not its name: give the parent's qualified name, --ak-parent-name or --ak-parent)"
      }`,
    );
  }
  return pass(id, `qualifiedSigner equals ${label}`);
}

/** `tpm.pcr_selection`: the quote selects exactly what the evidence declares. */
export function declaredSelectionCheck(
  attest: TpmsAttestQuote | undefined,
  declared: readonly PcrSelection[] | undefined,
): CheckResult {
  const id = 'tpm.pcr_selection';
  if (!declared) return check(id, 'absent', 'NOT_SUPPLIED', 'no declared PCR selection supplied');
  if (!attest) return parseDep(id);
  if (!sameSelection(attest.pcrSelect, declared)) {
    return fail(
      id,
      'PCR_SELECTION_MISMATCH',
      `quote selects ${describeSelection(attest.pcrSelect)}, evidence declares ${describeSelection(declared)}`,
    );
  }
  return pass(id, `quote selects ${describeSelection(attest.pcrSelect)}`);
}

/** `tpm.pcr_policy`: the quote selects exactly the verifier's required selection. */
export function pcrPolicyCheck(
  attest: TpmsAttestQuote | undefined,
  required: readonly PcrSelection[] | undefined,
): CheckResult {
  const id = 'tpm.pcr_policy';
  if (!required) return check(id, 'not-applicable', 'NO_PCR_POLICY', 'no required PCR selection');
  if (!attest) return parseDep(id);
  if (!sameSelection(attest.pcrSelect, required)) {
    return fail(
      id,
      'PCR_POLICY_MISMATCH',
      `quote selects ${describeSelection(attest.pcrSelect)}, policy requires exactly ${describeSelection(required)}`,
    );
  }
  return pass(id, `selection is exactly ${describeSelection(required)}`);
}

/** `tpm.pcr_digest`: pcrDigest recomputed in selection order with the signing scheme's hash. */
export function pcrDigestCheck(
  attest: TpmsAttestQuote | undefined,
  sig: TpmtSignature | undefined,
  values: readonly PcrValue[] | undefined,
): CheckResult {
  const id = 'tpm.pcr_digest';
  if (!values) return check(id, 'absent', 'NOT_SUPPLIED', 'no PCR values supplied');
  if (!attest || !sig)
    return fail(id, 'DEPENDENCY_FAILED', `${!attest ? 'TPMS_ATTEST' : 'signature'} did not parse`);
  const d = pcrDigest(attest.pcrSelect, values, sig.hashAlg);
  const over = `${algName(sig.hashAlg)} over ${describeSelection(attest.pcrSelect)}`;
  if (!d.ok) return fail(id, d.code, d.detail);
  if (!d.digest.equals(attest.pcrDigest)) {
    return fail(
      id,
      'PCR_DIGEST_MISMATCH',
      `${over} is ${d.digest.toString('hex')}, quote has ${attest.pcrDigest.toString('hex')}`,
    );
  }
  return pass(id, `${over} equals pcrDigest`);
}

/**
 * The `tpm.pcr_values` check: each pinned SHA-256 PCR (reference values, index → allowed hex
 * values) must have a supplied value among the allowed ones, and those values must be the
 * quoted ones (`tpm.pcr_digest` passed, found in `checks`).
 */
export function pcrPinsCheck(
  pins: Record<string, string[]>,
  values: readonly PcrValue[],
  checks: readonly CheckResult[],
): CheckResult {
  const bad = Object.entries(pins).filter(([i, allowed]) => {
    const v = values.find((p) => p.hashAlg === TPM_ALG.SHA256 && p.index === Number(i));
    return !v || !allowed.includes(Buffer.from(v.value).toString('hex'));
  });
  if (bad.length) {
    return fail(
      'tpm.pcr_values',
      'MEASUREMENT_NOT_ALLOWED',
      `PCR ${bad.map(([i]) => i).join(', ')} not an expected value`,
    );
  }
  if (checks.find((c) => c.id === 'tpm.pcr_digest')?.status !== 'pass') {
    return fail('tpm.pcr_values', 'DEPENDENCY_FAILED', 'the PCR values are not the quoted ones');
  }
  return pass('tpm.pcr_values', `PCR ${Object.keys(pins).join(', ')} have expected values (and are quoted)`);
}
