/**
 * TPM 2.0 provider: quotes sha256 PCRs with qualifyingData = SHA-256(REPORT_DATA)
 * (design §4; TPM 2.0 Part 3 §18.4 TPM2_Quote). The TPM is opened lazily and reopened after
 * a failure, so a TPM that comes back is used again without restarting the gateway.
 */

import { type AkAlgorithm, Tpm, type TpmAk, TpmError } from '../../native/tpm/index.js';
import { tpmQualifyingData } from '../format/binding.js';
import { b64u } from '../format/canonical.js';
import { type AttestationProvider, BindingError, type BoundEvidence } from './provider.js';

/** A hierarchy's Qualified Name is its 4-byte handle (TPM 2.0 Part 1 §16). */
function parentQualifiedName(hierarchy: number): Buffer {
  const b = Buffer.alloc(4);
  b.writeUInt32BE(hierarchy >>> 0);
  return b;
}

export interface TpmProviderOptions {
  /** tpm2-tss TCTI configuration string. */
  tcti: string;
  akAlgorithm: AkAlgorithm;
  /** sha256-bank PCR indices to quote. */
  pcrs: number[];
}

export class TpmProvider implements AttestationProvider {
  readonly name = 'tpm';
  private tpm: Tpm | null = null;
  private ak: TpmAk | null = null;
  /** Serialises device access: one TPM command sequence at a time. */
  private queue: Promise<unknown> = Promise.resolve();

  constructor(private readonly opts: TpmProviderOptions) {}

  bind(reportData: Buffer): Promise<BoundEvidence> {
    const run = this.queue.then(() => this.bindNow(reportData));
    this.queue = run.catch(() => undefined);
    return run;
  }

  private bindNow(reportData: Buffer): BoundEvidence {
    try {
      if (!this.tpm || !this.ak) {
        this.tpm = Tpm.open(this.opts.tcti);
        this.ak = this.tpm.createAk(this.opts.akAlgorithm);
      }
      const q = this.tpm.quote(
        this.ak,
        tpmQualifyingData(reportData),
        [...this.opts.pcrs].sort((a, b) => a - b),
      );
      const pcrValues: Record<string, string> = {};
      for (const [i, v] of Object.entries(q.pcrValues)) pcrValues[i] = b64u(v);
      return {
        tpm: {
          attest: b64u(q.attest),
          signature: b64u(q.signature),
          ak_public: b64u(q.akPublic),
          ak_parent_qualified_name: b64u(parentQualifiedName(this.ak.hierarchy)),
          pcr_selection: q.pcrSelection,
          pcr_values: pcrValues,
          ak_cert_chain: [],
        },
      };
    } catch (e) {
      this.reset();
      if (e instanceof TpmError) throw new BindingError(e.code, e.message);
      throw new BindingError('TPM_FAILED', (e as Error).message);
    }
  }

  private reset(): void {
    try {
      this.tpm?.close();
    } catch {
      // the device is already gone; nothing more to release
    }
    this.tpm = null;
    this.ak = null;
  }

  close(): void {
    this.reset();
  }
}
