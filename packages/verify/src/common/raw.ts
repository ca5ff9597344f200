/** Options every raw-evidence input shares (../evidence.ts). */
import type { ReferenceValues, TrustStore } from '../trust.js';

/** Options common to raw evidence. */
export interface RawEvidenceOptions {
  trustStore?: TrustStore;
  referenceValues?: ReferenceValues;
  /** Verification time; defaults to now. */
  now?: Date;
}
