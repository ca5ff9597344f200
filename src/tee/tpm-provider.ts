/**
 * TPM 2.0 provider: quotes sha256 PCRs with qualifyingData = SHA-256(REPORT_DATA)
 * (docs/spec/binding.md; TPM 2.0 Part 3 §18.4 TPM2_Quote). The TPM is opened at start-up (and lazily
 * reopened after a failure, so a TPM that comes back is used again without restarting).
 *
 * Which AK signs (docs/spec/tpm.md#ek-and-ak-enrollment), in order:
 *  1. `enrolled`: the persistent, EK-parented AK that `cmcp tpm enroll` certified, named by the
 *     enrollment record; its AK certificate chain is carried in every claim.
 *  2. `platform`: a cloud-provisioned AK with its certificate in NV (Azure Trusted Launch: AK at
 *     0x81000003, certificate at NV 0x01C101D0), used only when the certificate's key is the AK.
 *  3. `ephemeral`: a primary AK of the endorsement hierarchy, no certificate (hardware-unanchored).
 * When an enrollment record is configured but cannot be used, binding fails with the reason
 * (it never silently degrades to an unanchored key).
 *
 * Measurement (docs/spec/measurement.md): the gateway measurement digest is extended into the measurement
 * PCR once, and that PCR is in every quote; the claim carries the PCR value read just before the
 * extend, so PCR = SHA-256(pcr_before ‖ digest) can be checked. A policy reload re-measures the
 * gateway (docs/spec/policy.md#operator-controls): the new digest is extended on top, and later claims carry it with
 * the PCR value read just before that extend.
 *
 * The extend waits until the gateway listens ({@link TpmProvider.listening}): a start that fails
 * (a busy port) extends nothing. Every extend is recorded in the measurement PCR's event log
 * (src/measure/pcr-event-log.ts), shared by the gateways on this TPM, and each quote carries the
 * events from this gateway's extend to the quoted value, so another gateway's later extend does
 * not invalidate this one's claims (docs/spec/measurement.md#event-log).
 */

import { X509Certificate } from 'node:crypto';
import type { MeasurementJson } from '@cmcp/verify/formats';
import { b64u, fromB64u, tpmQualifyingData } from '@cmcp/verify/formats';
import {
  type AkAlgorithm,
  flushInstanceLeftovers,
  hierarchyQualifiedName,
  openInstanceAk,
  parsePublic,
  publicKeyOf,
  qualifiedNameOf,
  spkiDer,
  Tpm,
  type TpmAk,
  TpmError,
} from '../../native/tpm/index.js';
import { type GatewayMeasurement, pcrExtend } from '../measure/index.js';
import { defaultEventLogPath, PcrEventLog } from '../measure/pcr-event-log.js';
import { EnrollmentError, type EnrollmentRecord, readEnrollmentRecord } from './enrollment.js';
import {
  type AttestationProvider,
  type AttestationTier,
  BindingError,
  type BoundEvidence,
} from './provider.js';
import { trimDer } from './x509.js';

/** Azure Trusted Launch / Confidential VM vTPM: AK persistent handle and its certificate's NV index. */
export const AZURE_AK_HANDLE = 0x81000003;
export const AZURE_AK_CERT_NV = 0x01c101d0;

/** Hierarchies a platform AK may be a primary key of (Part 2 §7.4), tried in this order. */
const HIERARCHIES = [0x4000000b, 0x40000001, 0x4000000c, 0x40000007];

export interface TpmProviderOptions {
  /** tpm2-tss TCTI configuration string. */
  tcti: string;
  /** Algorithm of an ephemeral AK. */
  akAlgorithm: AkAlgorithm;
  /** sha256-bank PCR indices to quote (the measurement PCR is added). */
  pcrs: number[];
  /** PCR the gateway measurement is extended into; null: no extend (measurement still carried). */
  measurementPcr?: number | null;
  /** Enrollment record written by `cmcp tpm enroll`; absent: platform AK, else ephemeral. */
  enrollmentRecord?: string | null;
  /** Look for a cloud platform AK (default true). */
  platformAk?: boolean;
  /** DER certificates above the platform AK certificate, carried after it in claims. */
  platformAkChain?: Buffer[];
  /**
   * The gateway's instance_id: its transient leftovers are flushed at open, and the ephemeral AK
   * is this instance's persistent AK (native/tpm/instance-ak.ts). Absent (`cmcp start --check`):
   * a transient AK, flushed at close.
   */
  instanceId?: string;
  /** The measurement PCR's event log file (default: {@link defaultEventLogPath}). */
  eventLog?: string | null;
}

type AkSource = 'enrolled' | 'platform' | 'ephemeral';

export class TpmProvider implements AttestationProvider {
  readonly name: string = 'tpm';
  readonly tier: AttestationTier = 'tpm';
  private tpm: Tpm | null = null;
  // protected: the Azure CVM provider (./azure-provider.ts) chooses its AK itself
  protected ak: TpmAk | null = null;
  protected akSource: AkSource = 'ephemeral';
  protected chain: string[] = [];
  protected notes: string[] = [];
  private measurement: GatewayMeasurement | null = null;
  /** Set once the measurement is in the PCR: the value before and after our extend, its event id. */
  private measured: { before: Buffer; after: Buffer; event: string } | null = null;
  /** Set by listening(): only then is the measurement extended. */
  private extendAs: string | null = null;
  private readonly eventLog: PcrEventLog | null;
  /** Serialises device access: one TPM command sequence at a time. */
  private queue: Promise<unknown> = Promise.resolve();

  constructor(protected readonly opts: TpmProviderOptions) {
    const pcr = opts.measurementPcr;
    this.eventLog =
      pcr == null ? null : new PcrEventLog(opts.eventLog ?? defaultEventLogPath(opts.tcti, pcr));
  }

  /** Runs `fn` after every earlier device operation has finished (an async one included). */
  private serial<T>(fn: () => T | Promise<T>): Promise<T> {
    const run = this.queue.then(fn);
    this.queue = run.catch(() => undefined);
    return run;
  }

  async start(measurement: GatewayMeasurement | null): Promise<Record<string, unknown>> {
    this.measurement = measurement;
    return this.serial(() => this.readyReport());
  }

  /**
   * The gateway is listening as `instance`: the measurement is extended now (and recorded in the
   * event log). Never throws: a failure is returned (`ok: false`) and retried at the next bind.
   */
  listening(instance: string): Promise<Record<string, unknown>> {
    return this.serial(() => {
      this.extendAs = instance;
      return this.readyReport();
    });
  }

  /**
   * After a policy reload: the new measurement is extended into the measurement PCR (once, on
   * top of whatever is there: `pcr_before` is the value read just before this extend), in the
   * same queue as quotes, so a quote requested before this call carries the previous measurement
   * and its PCR state, and every quote requested after it carries this one. When the TPM is not
   * reachable now, the extend happens at the next bind (ensureReady).
   */
  remeasure(measurement: GatewayMeasurement): Promise<Record<string, unknown>> {
    return this.serial(() => {
      this.measurement = measurement;
      // The new digest is not in the PCR yet: ensureMeasured extends it.
      this.measured = null;
      return this.readyReport();
    });
  }

  /**
   * Brings the TPM to ready (ensureReady) and says how it went, for the gateway chain; never
   * throws: a failure resets the context and is returned (`ok: false`), retried at the next bind.
   */
  private readyReport(): Record<string, unknown> {
    try {
      this.ensureReady();
      return { ok: true, reason: null, ...this.describe() };
    } catch (e) {
      const err = this.toBindingError(e);
      this.reset();
      return { ok: false, reason: err.reason, error: err.message.slice(0, 300), ...this.describe() };
    }
  }

  /** What the gateway chain records about the AK and the measurement. */
  describe(): Record<string, unknown> {
    return {
      ak_source: this.ak ? this.akSource : null,
      ak_name: this.ak ? this.ak.name.toString('hex') : null,
      ak_handle: this.ak?.persistentHandle != null ? `0x${this.ak.persistentHandle.toString(16)}` : null,
      ak_cert_chain_length: this.chain.length,
      pcrs: this.quotePcrs(),
      measurement_pcr: this.opts.measurementPcr ?? null,
      pcr_before: this.measured ? b64u(this.measured.before) : null,
      pcr_after: this.measured ? b64u(this.measured.after) : null,
      notes: this.notes,
    };
  }

  measurementEvidence(): MeasurementJson | null {
    if (!this.measurement) return null;
    const pcr = this.opts.measurementPcr;
    if (pcr == null || !this.measured) return this.measurement.json;
    return { ...this.measurement.json, pcr, pcr_before: b64u(this.measured.before) };
  }

  private quotePcrs(): number[] {
    const set = new Set(this.opts.pcrs);
    if (this.opts.measurementPcr != null) set.add(this.opts.measurementPcr);
    return [...set].sort((a, b) => a - b);
  }

  bind(reportData: Buffer): Promise<BoundEvidence> {
    return this.serial(() => this.bindNow(reportData));
  }

  /**
   * The quote runs on koffi's worker thread (Tpm.quoteAsync), so the event loop stays free while
   * the TPM signs; the serial queue keeps every other use of the ESYS context out meanwhile.
   */
  private async bindNow(reportData: Buffer): Promise<BoundEvidence> {
    try {
      this.ensureReady();
      const tpm = this.tpm as Tpm;
      const ak = this.ak as TpmAk;
      const q = await tpm.quoteAsync(ak, tpmQualifyingData(reportData), this.quotePcrs());
      const pcrValues: Record<string, string> = {};
      for (const [i, v] of Object.entries(q.pcrValues)) pcrValues[i] = b64u(v);
      const out: BoundEvidence = {
        tpm: {
          attest: b64u(q.attest),
          signature: b64u(q.signature),
          ak_public: b64u(q.akPublic),
          ak_parent_qualified_name: b64u(ak.parentQualifiedName),
          pcr_selection: q.pcrSelection,
          pcr_values: pcrValues,
          ak_cert_chain: [...this.chain],
          ak_source: this.akSource,
        },
      };
      const m = this.measurementEvidence();
      if (m) out.measurement = this.withEvents(m, q.pcrValues);
      return out;
    } catch (e) {
      this.reset();
      throw this.toBindingError(e);
    }
  }

  /** The event log from this gateway's extend to the quoted measurement PCR value. */
  private withEvents(m: MeasurementJson, quoted: Record<number, Buffer>): MeasurementJson {
    const pcr = this.opts.measurementPcr;
    const value = pcr == null ? undefined : quoted[pcr];
    if (pcr == null || !this.measured || !this.measurement || !value) return m;
    const own = {
      digest: this.measurement.json.digest,
      event: 'cmcp.gateway_measurement',
      instance: this.extendAs ?? '',
    };
    let events = [own];
    try {
      events = this.eventLog?.since(this.measured.event, pcr, this.measured.before, value) ?? events;
    } catch {
      // an unreadable log: the claim carries its own event; a later extend then fails the replay
    }
    return { ...m, pcr_events: events };
  }

  private toBindingError(e: unknown): BindingError {
    if (e instanceof BindingError) return e;
    if (e instanceof EnrollmentError) return new BindingError(e.reason, e.message);
    if (e instanceof TpmError) return new BindingError(e.code, e.message);
    return new BindingError('TPM_FAILED', (e as Error).message);
  }

  /** Opens the TPM, selects the AK and extends the measurement, as far as not done yet. */
  private ensureReady(): void {
    let opened = false;
    if (!this.tpm || !this.ak) {
      this.reset();
      this.tpm = Tpm.open(this.opts.tcti);
      this.notes = [];
      this.flushLeftovers(this.tpm);
      this.selectAk(this.tpm);
      opened = true;
    }
    if (opened || !this.measured) this.ensureMeasured(this.tpm);
  }

  protected selectAk(tpm: Tpm): void {
    if (this.opts.enrollmentRecord) {
      this.ak = this.loadEnrolled(tpm, readEnrollmentRecord(this.opts.enrollmentRecord));
      this.akSource = 'enrolled';
      return;
    }
    if (this.opts.platformAk !== false) {
      const platform = this.loadPlatformAk(tpm);
      if (platform) {
        this.ak = platform.ak;
        this.chain = platform.chain;
        this.akSource = 'platform';
        return;
      }
    }
    this.ak = this.instanceAk(tpm);
    this.chain = [];
    this.akSource = 'ephemeral';
  }

  /** Transient objects an earlier (killed) process of this instance left in the TPM. */
  private flushLeftovers(tpm: Tpm): void {
    if (this.opts.instanceId === undefined) return;
    try {
      const n = flushInstanceLeftovers(tpm, this.opts.instanceId);
      if (n) this.notes.push(`flushed ${n} transient object(s) left by an earlier process of this instance`);
    } catch (e) {
      // Quoting does not depend on it; only a lost TPM stops here.
      if (e instanceof TpmError && e.code === 'TPM_UNREACHABLE') throw e;
      this.notes.push(`could not look for leftover transients: ${(e as Error).message.slice(0, 120)}`);
    }
  }

  /** The uncertified AK: this instance's persistent one, else a transient one. */
  private instanceAk(tpm: Tpm): TpmAk {
    if (this.opts.instanceId === undefined) return tpm.createAk(this.opts.akAlgorithm);
    const r = openInstanceAk(tpm, this.opts.akAlgorithm, this.opts.instanceId);
    if (r.note) this.notes.push(r.note);
    return r.ak;
  }

  private loadEnrolled(tpm: Tpm, rec: EnrollmentRecord): TpmAk {
    const hex = `0x${rec.ak_handle.toString(16)}`;
    let ak: TpmAk | null;
    try {
      ak = tpm.loadPersistentAk(rec.ak_handle, fromB64u(rec.ak_parent_qualified_name));
    } catch (e) {
      if (e instanceof TpmError && e.code === 'TPM_BAD_INPUT') {
        throw new BindingError(
          'AK_ENROLLMENT_MISMATCH',
          `the key at ${hex} is not the enrolled AK: ${e.message}`,
        );
      }
      throw e;
    }
    if (!ak)
      throw new BindingError(
        'AK_NOT_PERSISTED',
        `no key at the enrolled AK handle ${hex} (evicted, or TPM cleared)`,
      );
    if (b64u(ak.publicArea) !== rec.ak_public) {
      ak.flush();
      throw new BindingError(
        'AK_ENROLLMENT_MISMATCH',
        `the key at ${hex} is not the enrolled AK (public area differs)`,
      );
    }
    const leaf = rec.ak_cert_chain[0];
    let leafOk = false;
    try {
      leafOk =
        leaf !== undefined &&
        spkiDer(new X509Certificate(fromB64u(leaf)).publicKey).equals(
          spkiDer(publicKeyOf(parsePublic(ak.publicArea))),
        );
    } catch {
      leafOk = false;
    }
    if (!leafOk) {
      ak.flush();
      throw new BindingError('AK_CERT_KEY_MISMATCH', 'the enrolled AK certificate does not certify the AK');
    }
    this.chain = [...rec.ak_cert_chain];
    return ak;
  }

  /**
   * A cloud platform AK (Azure) when both the key and its certificate exist and the certificate
   * certifies that key. A certificate for another key is refused (recorded in notes): binding a
   * quote to a certificate of a different key would claim an anchor that does not exist.
   */
  private loadPlatformAk(tpm: Tpm): { ak: TpmAk; chain: string[] } | null {
    const certBytes = tpm.readNv(AZURE_AK_CERT_NV);
    const pub = certBytes ? tpm.readPublic(AZURE_AK_HANDLE) : null;
    if (!certBytes || !pub) return null;
    let cert: X509Certificate;
    try {
      cert = new X509Certificate(trimDer(certBytes));
    } catch {
      this.notes.push('platform AK certificate at NV 0x01c101d0 does not parse: ignored');
      return null;
    }
    let keyMatches = false;
    try {
      keyMatches = spkiDer(cert.publicKey).equals(spkiDer(publicKeyOf(parsePublic(pub.publicArea))));
    } catch {
      keyMatches = false;
    }
    if (!keyMatches) {
      this.notes.push('platform AK certificate certifies another key than the AK at 0x81000003: refused');
      return null;
    }
    const parent = HIERARCHIES.map(hierarchyQualifiedName).find((qn) =>
      qualifiedNameOf(qn, pub.name).equals(pub.qualifiedName),
    );
    if (!parent) {
      this.notes.push(
        'platform AK at 0x81000003 is not a primary key of a hierarchy: its parent QN is unknown',
      );
      return null;
    }
    let ak: TpmAk | null;
    try {
      ak = tpm.loadPersistentAk(AZURE_AK_HANDLE, parent);
    } catch (e) {
      this.notes.push(`platform AK refused: ${(e as Error).message.slice(0, 120)}`);
      return null;
    }
    return ak ? { ak, chain: [cert.raw, ...(this.opts.platformAkChain ?? [])].map((d) => b64u(d)) } : null;
  }

  /**
   * Extends the measurement into its PCR once per TPM boot: after a TPM reset (the PCR is back to
   * zeros although we extended it) the extend is repeated.
   */
  private ensureMeasured(tpm: Tpm): void {
    const pcr = this.opts.measurementPcr;
    if (pcr == null || !this.measurement || this.extendAs === null || !this.eventLog) return;
    if (this.measured) {
      const now = tpm.readPcrs([pcr])[pcr] as Buffer;
      if (!(now.every((b) => b === 0) && !this.measured.after.every((b) => b === 0))) return;
      this.notes.push(`PCR ${pcr} was reset since the measurement: extended again`);
    }
    const bytes = this.measurement.bytes;
    const event = {
      digest: this.measurement.json.digest,
      event: 'cmcp.gateway_measurement',
      instance: this.extendAs,
    };
    this.measured = this.eventLog.extend(pcr, event, () => {
      const before = tpm.readPcrs([pcr])[pcr] as Buffer;
      tpm.extendPcr(pcr, bytes);
      return { before, after: tpm.readPcrs([pcr])[pcr] as Buffer };
    });
    if (!this.measured.after.equals(pcrExtend(this.measured.before, bytes))) {
      this.notes.push(`PCR ${pcr} was extended by someone else while measuring`);
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
    this.chain = [];
  }

  close(): void {
    this.reset();
  }
}
