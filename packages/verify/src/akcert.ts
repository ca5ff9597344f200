/**
 * TPM attestation key (AK) certificate chains: the leaf must certify exactly the key that
 * signed the quote, satisfy the AK end-entity profile, and chain to a pinned root
 * (cloud vTPM root, TPM manufacturer root or an operator's AK CA).
 */
import type { KeyObject } from './crypto/keys.js';
import { type AnchorUsed, type CheckResult, check, fail, HARDWARE_ANCHOR_CHECK, pass } from './result.js';
import { rootsFor, type TrustStore } from './trust.js';
import {
  type Cert,
  extendedKeyUsages,
  KU_DIGITAL_SIGNATURE,
  keyUsage,
  spkiSha256,
  validateChain,
} from './x509.js';

/** TCG EKU for AK (AIK) certificates: tcg-kp-AIKCertificate (TCG EK Credential Profile). */
export const EKU_TCG_AIK_CERTIFICATE = '2.23.133.8.3';

/** Purposes of pinned roots that may anchor an AK. */
export const AK_ROOT_PURPOSES = ['cloud-vtpm', 'tpm-manufacturer', 'tpm-ak-root'] as const;

/**
 * AK end-entity profile: when the leaf has an EKU extension it must list tcg-kp-AIKCertificate;
 * when it has keyUsage it must allow digitalSignature. (The CA flag is checked by the chain.)
 */
export function akLeafProblem(leaf: Cert): string | null {
  const eku = extendedKeyUsages(leaf);
  if (eku && !eku.includes(EKU_TCG_AIK_CERTIFICATE)) {
    return `AK certificate EKU ${eku.join(',').slice(0, 80)} does not include tcg-kp-AIKCertificate ${EKU_TCG_AIK_CERTIFICATE}`;
  }
  const ku = keyUsage(leaf);
  if (ku !== null && (ku & KU_DIGITAL_SIGNATURE) === 0)
    return 'AK certificate keyUsage lacks digitalSignature';
  return null;
}

/** Input of {@link verifyAkCertChain}. */
export interface AkChainInput {
  /** AK certificate chain, leaf first (intermediates and root in any order after it). */
  certs: readonly Cert[];
  /** The key that signed the quote; undefined when it did not parse. */
  akKey: KeyObject | undefined;
  trustStore: TrustStore;
  at: Date;
}

/**
 * The `evidence.anchor` check for a TPM quote:
 * - no certificates → `absent` AK_NOT_ENROLLED;
 * - leaf certifies another key → `fail` AK_CERT_KEY_MISMATCH (the quote is never bound to it);
 * - chain to a pinned AK root valid at `at` → `pass` (the root is returned as the anchor used);
 * - chain valid up to an unpinned root → `absent` (ROOT_NOT_PINNED / ANCHOR_PURPOSE_MISMATCH);
 * - anything else → `fail` with the chain reason.
 */
export function verifyAkCertChain(input: AkChainInput): { check: CheckResult; anchor?: AnchorUsed } {
  const leaf = input.certs[0];
  if (!leaf) {
    return {
      check: check(
        HARDWARE_ANCHOR_CHECK,
        'absent',
        'AK_NOT_ENROLLED',
        'no AK certificate chain: the AK is not anchored to a pinned root',
      ),
    };
  }
  if (!input.akKey) {
    return { check: fail(HARDWARE_ANCHOR_CHECK, 'DEPENDENCY_FAILED', 'the AK key did not parse') };
  }
  const leafSpki = spkiSha256(leaf.node.publicKey);
  const akSpki = spkiSha256(input.akKey);
  if (leafSpki !== akSpki) {
    return {
      check: fail(
        HARDWARE_ANCHOR_CHECK,
        'AK_CERT_KEY_MISMATCH',
        `the AK certificate certifies key SPKI SHA-256 ${leafSpki.slice(0, 16)}…, the quote was signed by ${akSpki.slice(0, 16)}…: refusing to bind the quote to the certificate`,
      ),
    };
  }
  const roots = rootsFor(input.trustStore, AK_ROOT_PURPOSES);
  const r = validateChain({
    certs: input.certs,
    roots,
    otherRoots: input.trustStore.roots.filter((x) => !roots.includes(x)),
    at: input.at,
    leafProfile: akLeafProblem,
    what: 'AK',
    usedFor: 'tpm-ak',
  });
  if (r.status === 'anchored') {
    return { check: pass(HARDWARE_ANCHOR_CHECK, `AK certificate chain ${r.detail}`), anchor: r.anchor };
  }
  if (r.status === 'unpinned') {
    return { check: check(HARDWARE_ANCHOR_CHECK, 'absent', r.code, `AK certificate chain ${r.detail}`) };
  }
  return { check: fail(HARDWARE_ANCHOR_CHECK, r.code, `AK certificate chain: ${r.detail}`) };
}
