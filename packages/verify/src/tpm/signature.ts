/**
 * TPM quote signature layer: TPMS_ATTEST, TPMT_SIGNATURE and the AK's TPMT_PUBLIC are parsed
 * (abi/tpm), the AK's attributes and scheme are checked, and the signature is verified over the
 * exact attest bytes. Produces the checks `tpm.attest_parse`, `tpm.signature_parse`,
 * `tpm.ak_public`, `tpm.ak_attributes`, `tpm.signature_scheme`, `evidence.signature` and, when
 * the signature verifies, a {@link VerifiedTpmQuote}.
 */
import { AbiError } from '../abi/errors.js';
import { parseTpmsAttest, type TpmsAttestQuote } from '../abi/tpm/attest.js';
import { algName, TPM_ALG } from '../abi/tpm/constants.js';
import { AK_ATTRIBUTE_RULE, akAttributeProblem } from '../abi/tpm/public.js';
import type { TpmtSignature } from '../abi/tpm/signature.js';
import { hashInfo } from '../crypto/hash.js';
import { ecCurveSize, type KeyObject, rsaModulusBytes } from '../crypto/keys.js';
import { verifyEcdsaP1363, verifyRsaPkcs1, verifyRsaPss } from '../crypto/signatures.js';
import { type CheckResult, check, fail, HARDWARE_SIGNATURE_CHECK, pass, type ReasonCode } from '../result.js';
import { parseTpmtPublic, parseTpmtSignature, STRONG_HASHES, type TpmtPublic } from './ak.js';

/** A quote whose signature verified under the AK. */
export interface VerifiedTpmQuote {
  attest: TpmsAttestQuote;
  signature: TpmtSignature;
  key: KeyObject;
  /** The AK's public area, when it was supplied as TPMT_PUBLIC. */
  akPublic?: TpmtPublic;
}

/** Output of {@link verifyQuoteSignature}: the checks and whatever parsed. */
export interface TpmSignatureResult {
  checks: CheckResult[];
  attest?: TpmsAttestQuote;
  signature?: TpmtSignature;
  akPublic?: TpmtPublic;
  verified?: VerifiedTpmQuote;
}

/** Input of {@link verifyQuoteSignature} (a subset of the quote input). */
export interface TpmSignatureInput {
  /** TPMS_ATTEST bytes exactly as signed (no TPM2B prefix). */
  attest: Uint8Array;
  /**
   * TPMT_SIGNATURE wire bytes, an already-parsed signature, or a function that reads one (e.g. a
   * `-f plain` file under the AK's scheme; its AbiError becomes the `tpm.signature_parse` reason).
   */
  signature: Uint8Array | TpmtSignature | (() => TpmtSignature);
  /** The AK as TPMT_PUBLIC wire bytes, or a bare public key (attributes, scheme, name `absent`). */
  ak: { public: Uint8Array } | { key: KeyObject };
}

type Parsed<T> = { ok: true; value: T } | { ok: false; code: ReasonCode; detail: string };

function errText(err: unknown): string {
  return (err instanceof Error ? err.message : String(err)).slice(0, 120);
}

/** Runs a parser; an AbiError becomes its code, anything else `fallback`. */
export function parseOr<T>(fn: () => T, fallback: ReasonCode): Parsed<T> {
  try {
    return { ok: true, value: fn() };
  } catch (err) {
    if (err instanceof AbiError) return { ok: false, code: err.code, detail: err.message };
    return { ok: false, code: fallback, detail: errText(err) };
  }
}

/** Outcome of {@link tpmSignatureCheck}. */
export type TpmSignatureCheck =
  | { ok: true; valid: boolean }
  | { ok: false; code: 'TPM_SIGNATURE_LENGTH_INVALID'; detail: string };

function leftPad(b: Uint8Array, size: number): Buffer {
  return b.length >= size ? Buffer.from(b) : Buffer.concat([Buffer.alloc(size - b.length), b]);
}

/**
 * Checks a TPM signature over `message` (the TPMS_ATTEST bytes) under `key`.
 * - The hash is taken from `sig.hashAlg` and the padding from `sig.sigAlg`; never assumed.
 * - RSASSA: PKCS#1 v1.5. RSAPSS: MGF1 with the same hash, salt length = digest length or the
 *   maximum (emLen − hLen − 2), the two a TPM may use (Part 1 Annex B.7). Signature length must
 *   equal the modulus size.
 * - ECDSA: r and s are left-padded to the curve size (they may be shorter); longer values are
 *   refused. High-S signatures are accepted (TPMs do not normalise S).
 * @returns `valid` false when it does not verify or the key type does not fit the scheme;
 *   TPM_SIGNATURE_LENGTH_INVALID for an RSA signature whose length is not the modulus size or an
 *   ECDSA r/s longer than the curve size.
 */
export function tpmSignatureCheck(
  message: Uint8Array,
  sig: TpmtSignature,
  key: KeyObject,
): TpmSignatureCheck {
  const hash = hashInfo(sig.hashAlg);
  if (!hash || !STRONG_HASHES.has(sig.hashAlg)) return { ok: true, valid: false };
  if (sig.sigAlg === TPM_ALG.ECDSA) {
    const size = ecCurveSize(key);
    if (!size) return { ok: true, valid: false };
    if (sig.r.length > size || sig.s.length > size) {
      return {
        ok: false,
        code: 'TPM_SIGNATURE_LENGTH_INVALID',
        detail: `ECDSA r/s longer than ${size} bytes`,
      };
    }
    return {
      ok: true,
      valid: verifyEcdsaP1363(
        hash.node,
        message,
        key,
        Buffer.concat([leftPad(sig.r, size), leftPad(sig.s, size)]),
      ),
    };
  }
  const modBytes = rsaModulusBytes(key);
  if (modBytes === null) return { ok: true, valid: false };
  if (sig.sig.length !== modBytes) {
    return {
      ok: false,
      code: 'TPM_SIGNATURE_LENGTH_INVALID',
      detail: `RSA signature is ${sig.sig.length} bytes, modulus is ${modBytes} bytes`,
    };
  }
  // RSAPSS: the salt is the digest length or the largest the modulus allows (emLen − hLen − 2);
  // both are permitted (Part 1 Annex B.7; FIPS 186-4 §5.5), nothing else is tried, and an RSAPSS
  // signature is never checked as PKCS#1 v1.5 or the reverse.
  const valid =
    sig.sigAlg === TPM_ALG.RSAPSS
      ? verifyRsaPss(hash.node, message, key, sig.sig, hash.size) ||
        verifyRsaPss(hash.node, message, key, sig.sig, modBytes - hash.size - 2)
      : verifyRsaPkcs1(hash.node, message, key, sig.sig);
  return { ok: true, valid };
}

/** True when `sig` verifies over `message` under `key` (see {@link tpmSignatureCheck}). */
export function verifyTpmSignature(message: Uint8Array, sig: TpmtSignature, key: KeyObject): boolean {
  const r = tpmSignatureCheck(message, sig, key);
  return r.ok && r.valid;
}

/** AK checks from its TPMT_PUBLIC: `tpm.ak_public`, `tpm.ak_attributes`, `tpm.signature_scheme`. */
function akChecks(akBytes: Uint8Array, sig: TpmtSignature | undefined, out: TpmSignatureResult): boolean {
  const checks = out.checks;
  const akR = parseOr(() => parseTpmtPublic(akBytes), 'AK_PUBLIC_MALFORMED');
  if (!akR.ok) {
    checks.push(fail('tpm.ak_public', akR.code, akR.detail));
    checks.push(fail('tpm.ak_attributes', 'DEPENDENCY_FAILED', 'AK public area did not parse'));
    checks.push(fail('tpm.signature_scheme', 'DEPENDENCY_FAILED', 'AK public area did not parse'));
    return false;
  }
  const ak = akR.value;
  out.akPublic = ak;
  checks.push(
    pass('tpm.ak_public', `${algName(ak.type)} ${ak.keyBits}-bit AK, name ${ak.name.toString('hex')}`),
  );
  const problem = akAttributeProblem(ak.objectAttributes);
  checks.push(
    problem
      ? fail('tpm.ak_attributes', 'AK_ATTRIBUTES_INVALID', problem)
      : pass('tpm.ak_attributes', AK_ATTRIBUTE_RULE),
  );
  if (!sig) {
    checks.push(fail('tpm.signature_scheme', 'DEPENDENCY_FAILED', 'TPMT_SIGNATURE did not parse'));
    return false;
  }
  if (ak.scheme.scheme !== sig.sigAlg || ak.scheme.hashAlg !== sig.hashAlg) {
    checks.push(
      fail(
        'tpm.signature_scheme',
        'SIGNATURE_SCHEME_MISMATCH',
        `quote signed with ${algName(sig.sigAlg)}/${algName(sig.hashAlg)}, AK scheme is ` +
          `${algName(ak.scheme.scheme)}/${ak.scheme.hashAlg === null ? 'none' : algName(ak.scheme.hashAlg)}`,
      ),
    );
    return false;
  }
  checks.push(
    pass('tpm.signature_scheme', `matches the AK scheme ${algName(sig.sigAlg)}/${algName(sig.hashAlg)}`),
  );
  return true;
}

/** `evidence.signature`: the quote signature over the raw attest bytes, whether or not they parsed. */
function signatureCheck(
  attest: Uint8Array,
  sig: TpmtSignature | undefined,
  key: KeyObject | undefined,
  schemeOk: boolean,
): CheckResult {
  if (!sig || !key) {
    return fail(
      HARDWARE_SIGNATURE_CHECK,
      'DEPENDENCY_FAILED',
      `${!sig ? 'signature' : 'AK public area'} did not parse`,
    );
  }
  if (!schemeOk)
    return fail(
      HARDWARE_SIGNATURE_CHECK,
      'SIGNATURE_SCHEME_MISMATCH',
      'not verified under a mismatched scheme',
    );
  const scheme = `${algName(sig.sigAlg)}/${algName(sig.hashAlg)}`;
  let v: TpmSignatureCheck;
  try {
    v = tpmSignatureCheck(attest, sig, key);
  } catch (err) {
    return fail(HARDWARE_SIGNATURE_CHECK, 'QUOTE_SIGNATURE_INVALID', errText(err));
  }
  if (!v.ok) return fail(HARDWARE_SIGNATURE_CHECK, v.code, v.detail);
  if (!v.valid) {
    return fail(
      HARDWARE_SIGNATURE_CHECK,
      'QUOTE_SIGNATURE_INVALID',
      `${scheme} signature does not verify over the ${attest.length} attest bytes`,
    );
  }
  return pass(HARDWARE_SIGNATURE_CHECK, `TPM quote signature (${scheme}) verifies under the AK`);
}

/**
 * Parses the quote, signature and AK and verifies the signature (TPM 2.0 Part 2 §10.12.12,
 * §11.3.4, §12.2.4; Part 3 §18.4). A check whose input did not parse fails with the parse reason.
 */
export function verifyQuoteSignature(input: TpmSignatureInput): TpmSignatureResult {
  const out: TpmSignatureResult = { checks: [] };
  const checks = out.checks;
  const attestR = parseOr(() => parseTpmsAttest(input.attest), 'TPM_ATTEST_MALFORMED');
  if (attestR.ok) {
    out.attest = attestR.value;
    checks.push(pass('tpm.attest_parse', `TPMS_ATTEST quote, ${input.attest.length} bytes consumed exactly`));
  } else checks.push(fail('tpm.attest_parse', attestR.code, attestR.detail));
  const sigInput = input.signature;
  const sigR =
    sigInput instanceof Uint8Array
      ? parseOr(() => parseTpmtSignature(sigInput), 'TPM_SIGNATURE_MALFORMED')
      : typeof sigInput === 'function'
        ? parseOr(sigInput, 'TPM_SIGNATURE_MALFORMED')
        : { ok: true as const, value: sigInput };
  if (sigR.ok) {
    out.signature = sigR.value;
    checks.push(
      pass('tpm.signature_parse', `${algName(sigR.value.sigAlg)} with ${algName(sigR.value.hashAlg)}`),
    );
  } else checks.push(fail('tpm.signature_parse', sigR.code, sigR.detail));
  let key: KeyObject | undefined;
  let schemeOk = true;
  if ('public' in input.ak) {
    schemeOk = akChecks(input.ak.public, out.signature, out);
    key = out.akPublic?.key;
  } else {
    key = input.ak.key;
    const why = 'only a bare AK key was supplied (no TPMT_PUBLIC)';
    for (const id of ['tpm.ak_public', 'tpm.ak_attributes', 'tpm.signature_scheme']) {
      checks.push(check(id, 'absent', 'AK_PUBLIC_NOT_SUPPLIED', why));
    }
  }
  const sigCheck = signatureCheck(input.attest, out.signature, key, schemeOk);
  checks.push(sigCheck);
  if (sigCheck.status === 'pass' && out.attest && out.signature && key) {
    out.verified = {
      attest: out.attest,
      signature: out.signature,
      key,
      ...(out.akPublic ? { akPublic: out.akPublic } : {}),
    };
  }
  return out;
}
