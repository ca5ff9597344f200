/**
 * The Azure confidential VM paravisor (HCL) report in the vTPM (docs/spec/evidence-azure.md):
 * NV index 0x01400001 holds it (the layout is @cmcp/verify/abi/azure), and the persistent key
 * 0x81000003 is the AK whose public key the report's runtime data names (HCLAkPub). Only NV
 * access and the AK's parent lookup are here; parsing is the verifier's abi.
 */
import { HCL_REPORT_NV_INDEX } from '@cmcp/verify/abi';
import type { EkAlgorithm } from './ek.js';
import { hierarchyQualifiedName, qualifiedNameOf } from './public.js';
import type { Tpm } from './tpm.js';

export { HCL_REPORT_NV_INDEX };
/** The Azure vTPM attestation key (HCLAkPub) persistent handle. */
export const HCL_AK_HANDLE = 0x81000003;

/** Hierarchies a primary AK may belong to (Part 2 §7.4): endorsement, owner, platform, null. */
const HIERARCHIES = [0x4000000b, 0x40000001, 0x4000000c, 0x40000007];
/** EK templates whose children the AK may be (TCG EK Credential Profile low-range templates). */
const EK_ALGORITHMS: readonly EkAlgorithm[] = ['rsa2048', 'ecc-p256'];

/**
 * The HCL report NV index contents, or null when the index is not defined (not an Azure CVM).
 * @throws TpmError TPM_RC, TPM_UNREACHABLE, TPM_CLOSED, TPM_BAD_RESPONSE
 */
export function readHclReport(t: Tpm): Buffer | null {
  return t.readNv(HCL_REPORT_NV_INDEX);
}

/** True when the HCL report NV index is defined. @throws TpmError */
export function hasHclReport(t: Tpm): boolean {
  return t.nvPublic(HCL_REPORT_NV_INDEX) !== null;
}

/**
 * The Qualified Name of the parent of the key at `handle` (Part 1 §16.5): a hierarchy (primary
 * key) or an EK made from a default template (EK child); null when the key is absent or its
 * parent is neither. Creating an EK to compare costs a TPM2_CreatePrimary; it is flushed.
 * @throws TpmError
 */
export function parentQualifiedNameOf(t: Tpm, handle: number): Buffer | null {
  const pub = t.readPublic(handle);
  if (!pub) return null;
  const primary = HIERARCHIES.map(hierarchyQualifiedName).find((qn) =>
    qualifiedNameOf(qn, pub.name).equals(pub.qualifiedName),
  );
  if (primary) return primary;
  for (const alg of EK_ALGORITHMS) {
    const ek = t.createEk(alg);
    try {
      if (qualifiedNameOf(ek.qualifiedName, pub.name).equals(pub.qualifiedName)) return ek.qualifiedName;
    } finally {
      ek.flush();
    }
  }
  return null;
}
