/**
 * Endorsement keys: the TCG default EK templates and the NV indices of their certificates
 * (TCG EK Credential Profile for TPM Family 2.0, version 2.5, §2.2.1.4 "Low Range" templates
 * L-1 and L-2, §2.2.1.5 "High Range" template H-3; certificate indices §2.2.1.4/§2.2.1.5).
 * The EK a TPM holds is derived deterministically from its endorsement seed and the template,
 * so recreating it with TPM2_CreatePrimary gives the key its certificate was issued for.
 */
import { createHash } from 'node:crypto';
import { TpmError } from './errors.js';
import { TPM2_ALG_AES, TPM2_ALG_CFB, TPM2_ALG_SHA384, TPM2_ECC_NIST_P384 } from './public.js';
import {
  TPM2_ALG_ECC,
  TPM2_ALG_NULL,
  TPM2_ALG_RSA,
  TPM2_ALG_SHA256,
  TPM2_ECC_NIST_P256,
  TPMA_OBJECT,
  WireWriter,
} from './wire.js';

export type EkAlgorithm = 'rsa2048' | 'ecc-p256' | 'ecc-p384';

/** TPM_CC_PolicySecret (Part 2 §6.5.2). */
const TPM_CC_POLICY_SECRET = 0x00000151;
/** TPM_RH_ENDORSEMENT (Part 2 §7.4). */
const TPM_RH_ENDORSEMENT = 0x4000000b;

/**
 * PolicySecret(TPM_RH_ENDORSEMENT) digest with an empty policyRef (Part 3 §23.4):
 * H(H(0…0 ‖ TPM_CC_PolicySecret ‖ Name(TPM_RH_ENDORSEMENT)) ‖ policyRef). This is the
 * profile's PolicyA; for SHA-256 it is 837197674484b3f8…331469aa.
 */
export function policySecretEndorsement(hash: 'sha256' | 'sha384'): Buffer {
  const size = hash === 'sha256' ? 32 : 48;
  const step1 = createHash(hash)
    .update(Buffer.alloc(size))
    .update(new WireWriter().u32(TPM_CC_POLICY_SECRET).u32(TPM_RH_ENDORSEMENT).done())
    .digest();
  return createHash(hash).update(step1).digest();
}

/**
 * PolicyB_SHA384 of the profile's high-range templates (EK Credential Profile 2.5 Table 13):
 * PolicyOR of PolicyA (PolicySecret(TPM_RH_ENDORSEMENT)) and PolicyC (an NV-index policy).
 * The H templates also set userWithAuth, so the EK is usable with its (empty) authValue and
 * this policy is only needed for admin actions.
 */
const POLICY_B_SHA384 = Buffer.from(
  'b26e7d28d11a50bc53d882bcf5fd3a1a074148bb35d3b4e4cb1c0ad9bde419cacb47ba09699646150f9fc000f3f80e12',
  'hex',
);

export interface EkProfile {
  algorithm: EkAlgorithm;
  /** NV index of the EK certificate. */
  certIndex: number;
  /** NV indices of an optional template / nonce override (not supported: refused when present). */
  templateIndex: number;
  nonceIndex: number | null;
  /** The usual persistent handle a provisioning tool leaves the EK at (informational). */
  persistentHandle: number;
  /** Whether using the EK (ActivateCredential, as a parent) needs PolicySecret(TPM_RH_ENDORSEMENT). */
  needsPolicy: boolean;
}

export const EK_PROFILES: Record<EkAlgorithm, EkProfile> = {
  rsa2048: {
    algorithm: 'rsa2048',
    certIndex: 0x01c00002,
    templateIndex: 0x01c00004,
    nonceIndex: 0x01c00003,
    persistentHandle: 0x81010001,
    needsPolicy: true,
  },
  'ecc-p256': {
    algorithm: 'ecc-p256',
    certIndex: 0x01c0000a,
    templateIndex: 0x01c0000c,
    nonceIndex: 0x01c0000b,
    persistentHandle: 0x81010002,
    needsPolicy: true,
  },
  'ecc-p384': {
    algorithm: 'ecc-p384',
    certIndex: 0x01c00016,
    templateIndex: 0x01c00017,
    nonceIndex: null,
    persistentHandle: 0x81010016,
    needsPolicy: false,
  },
};

/** fixedTPM | fixedParent | sensitiveDataOrigin | adminWithPolicy | restricted | decrypt = 0x000300B2. */
const EK_ATTRS_LOW =
  TPMA_OBJECT.fixedTPM |
  TPMA_OBJECT.fixedParent |
  TPMA_OBJECT.sensitiveDataOrigin |
  TPMA_OBJECT.adminWithPolicy |
  TPMA_OBJECT.restricted |
  TPMA_OBJECT.decrypt;
/** The high-range templates add userWithAuth: 0x000300F2. */
const EK_ATTRS_HIGH = EK_ATTRS_LOW | TPMA_OBJECT.userWithAuth;

/** TPMT_PUBLIC wire bytes of the default EK template for `alg`. */
export function ekTemplate(alg: EkAlgorithm): Buffer {
  const w = new WireWriter();
  switch (alg) {
    case 'rsa2048': // L-1
      w.u16(TPM2_ALG_RSA).u16(TPM2_ALG_SHA256).u32(EK_ATTRS_LOW).tpm2b(policySecretEndorsement('sha256'));
      w.u16(TPM2_ALG_AES).u16(128).u16(TPM2_ALG_CFB).u16(TPM2_ALG_NULL).u16(2048).u32(0);
      w.tpm2b(Buffer.alloc(256));
      break;
    case 'ecc-p256': // L-2
      w.u16(TPM2_ALG_ECC).u16(TPM2_ALG_SHA256).u32(EK_ATTRS_LOW).tpm2b(policySecretEndorsement('sha256'));
      w.u16(TPM2_ALG_AES).u16(128).u16(TPM2_ALG_CFB).u16(TPM2_ALG_NULL);
      w.u16(TPM2_ECC_NIST_P256).u16(TPM2_ALG_NULL);
      w.tpm2b(Buffer.alloc(32)).tpm2b(Buffer.alloc(32));
      break;
    case 'ecc-p384': // H-3
      w.u16(TPM2_ALG_ECC).u16(TPM2_ALG_SHA384).u32(EK_ATTRS_HIGH).tpm2b(POLICY_B_SHA384);
      w.u16(TPM2_ALG_AES).u16(256).u16(TPM2_ALG_CFB).u16(TPM2_ALG_NULL);
      w.u16(TPM2_ECC_NIST_P384).u16(TPM2_ALG_NULL);
      w.tpm2b(Buffer.alloc(0)).tpm2b(Buffer.alloc(0));
      break;
    default:
      throw new TpmError('TPM_BAD_INPUT', `unknown EK algorithm: ${String(alg)}`);
  }
  return w.done();
}
