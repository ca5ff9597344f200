/**
 * Confidential-VM providers (docs/spec/attestation.md#sev-snp-and-tdx-through-configfs-tsm): SEV-SNP and TDX reports through Linux
 * configfs-tsm, REPORT_DATA = the 64-byte binding (docs/spec/binding.md) carried whole. SEV-SNP falls back
 * to the /dev/sev-guest ioctl when configfs-tsm is missing. Every failure becomes a BindingError
 * with a stable reason; the gateway keeps serving.
 */
import { X509Certificate } from 'node:crypto';
import { existsSync } from 'node:fs';
import type { MeasurementJson, SevSnpEvidenceJson } from '@cmcp/verify/formats';
import { b64u } from '@cmcp/verify/formats';
import { TSM_REPORT_ROOT, TsmError, tsmReport } from '../../native/tsm/configfs.js';
import { checkSnpReport, parseCertTable, SnpError, snpReportViaIoctl } from '../../native/tsm/snp.js';
import { checkTdxQuote, TdxError } from '../../native/tsm/tdx.js';
import type { GatewayMeasurement } from '../measure/index.js';
import { type AttestationProvider, BindingError, type BoundEvidence } from './provider.js';

/** Reason codes by TsmError code (machine-readable, stable). */
const TSM_REASONS: Record<string, string> = {
  TSM_ABSENT: 'DEVICE_ABSENT',
  TSM_ENTRY_FAILED: 'CONFIGFS_ENTRY_FAILED',
  TSM_WRITE_REFUSED: 'CONFIGFS_WRITE_REFUSED',
  TSM_READ_FAILED: 'CONFIGFS_READ_FAILED',
  TSM_GENERATION_CHANGED: 'GENERATION_CHANGED',
  TSM_PROVIDER_MISMATCH: 'PROVIDER_MISMATCH',
  TSM_TIMEOUT: 'CONFIGFS_TIMEOUT',
};

function toBindingError(e: unknown): BindingError {
  if (e instanceof BindingError) return e;
  if (e instanceof TsmError) return new BindingError(TSM_REASONS[e.code] ?? e.code, e.message);
  if (e instanceof SnpError) {
    const reason =
      e.code === 'SEV_GUEST_ABSENT'
        ? 'DEVICE_ABSENT'
        : e.code === 'SNP_REPORT_MALFORMED'
          ? 'EVIDENCE_MALFORMED'
          : e.code;
    return new BindingError(reason, e.message);
  }
  if (e instanceof TdxError) return new BindingError('EVIDENCE_MALFORMED', e.message);
  return new BindingError('PROVIDER_FAULT', (e as Error).message);
}

export interface TsmProviderOptions {
  /** configfs-tsm report directory (default /sys/kernel/config/tsm/report). */
  tsmPath?: string;
  /** SEV-SNP only: guest device for the ioctl fallback (default /dev/sev-guest). */
  sevGuestDevice?: string;
  timeoutMs?: number;
}

abstract class TsmProviderBase implements AttestationProvider {
  abstract readonly name: string;
  readonly tier = 'tee' as const;
  protected measurement: MeasurementJson | null = null;
  private queue: Promise<unknown> = Promise.resolve();

  constructor(protected readonly opts: TsmProviderOptions) {}

  protected get root(): string {
    return this.opts.tsmPath ?? TSM_REPORT_ROOT;
  }

  async start(measurement: GatewayMeasurement | null): Promise<Record<string, unknown>> {
    this.measurement = measurement?.json ?? null;
    return { ok: true, reason: null, tsm_path: this.root, source: this.source() };
  }

  /** REPORT_DATA carries the measurement (via the preimage): no device work, effective at once. */
  async remeasure(measurement: GatewayMeasurement): Promise<Record<string, unknown>> {
    this.measurement = measurement.json;
    return { ok: true, reason: null };
  }

  /** Where reports will come from right now. */
  abstract source(): string;

  measurementEvidence(): MeasurementJson | null {
    return this.measurement;
  }

  bind(reportData: Buffer): Promise<BoundEvidence> {
    // The measurement in force when the binding was requested (the preimage names it), even if
    // a policy reload re-measures the gateway while this report waits its turn.
    const measurement = this.measurement;
    // One report at a time: a configfs entry per request, but the PSP/TDX module serialises anyway.
    const run = this.queue.then(async () => {
      try {
        const ev = await this.bindNow(reportData);
        if (measurement) ev.measurement = measurement;
        return ev;
      } catch (e) {
        throw toBindingError(e);
      }
    });
    this.queue = run.catch(() => undefined);
    return run;
  }

  protected abstract bindNow(reportData: Buffer): Promise<BoundEvidence>;

  close(): void {}
}

/** SEV-SNP: configfs-tsm (`provider` sev_guest), else /dev/sev-guest. */
export class SevSnpProvider extends TsmProviderBase {
  readonly name = 'sev-snp';

  source(): string {
    if (existsSync(this.root)) return 'configfs-tsm';
    return existsSync(this.opts.sevGuestDevice ?? '/dev/sev-guest') ? 'sev-guest-ioctl' : 'none';
  }

  protected async bindNow(reportData: Buffer): Promise<BoundEvidence> {
    let raw: Buffer;
    let table: Buffer | null;
    let source: SevSnpEvidenceJson['source'];
    if (existsSync(this.root)) {
      const r = await tsmReport({
        root: this.root,
        inblob: reportData,
        provider: 'sev_guest',
        auxblob: true,
        ...(this.opts.timeoutMs ? { timeoutMs: this.opts.timeoutMs } : {}),
      });
      raw = r.outblob;
      table = r.auxblob;
      source = 'configfs-tsm';
    } else {
      const device = this.opts.sevGuestDevice ?? '/dev/sev-guest';
      if (!existsSync(device)) {
        throw new BindingError('DEVICE_ABSENT', `neither configfs-tsm (${this.root}) nor ${device} exists`);
      }
      const r = snpReportViaIoctl(device, reportData);
      raw = r.report;
      table = r.certTable?.some((b) => b !== 0) ? r.certTable : null;
      source = 'sev-guest-ioctl';
    }
    const { report, reportDataMatches } = checkSnpReport(raw, reportData);
    if (!reportDataMatches) {
      throw new BindingError(
        'REPORT_DATA_MISMATCH',
        'the SEV-SNP report does not carry the REPORT_DATA asked for',
      );
    }
    // The ioctl's certificate buffer is zero-padded after the table: the parser stops at the terminator.
    const entries = table ? parseCertTable(table) : [];
    for (const e of entries) {
      if (e.kind === 'other') continue;
      try {
        new X509Certificate(e.data);
      } catch {
        throw new BindingError(
          'CERT_TABLE_MALFORMED',
          `the ${e.kind.toUpperCase()} entry of the certificate table is not an X.509 certificate`,
        );
      }
    }
    return {
      tpm: null,
      sev_snp: {
        report: b64u(report),
        certs: entries.map((e) => ({ guid: e.guid, kind: e.kind, der: b64u(e.data) })),
        source,
      },
    };
  }
}

/** TDX: configfs-tsm (`provider` tdx_guest) → a DCAP quote. There is no TDREPORT fallback. */
export class TdxProvider extends TsmProviderBase {
  readonly name = 'tdx';

  source(): string {
    return existsSync(this.root) ? 'configfs-tsm' : 'none';
  }

  protected async bindNow(reportData: Buffer): Promise<BoundEvidence> {
    if (!existsSync(this.root)) {
      throw new BindingError(
        'DEVICE_ABSENT',
        `configfs-tsm (${this.root}) does not exist; TDX quotes need it`,
      );
    }
    const r = await tsmReport({
      root: this.root,
      inblob: reportData,
      provider: 'tdx_guest',
      auxblob: false,
      ...(this.opts.timeoutMs ? { timeoutMs: this.opts.timeoutMs } : {}),
    });
    if (!checkTdxQuote(r.outblob, reportData).reportDataMatches) {
      throw new BindingError(
        'REPORT_DATA_MISMATCH',
        'the TDX quote does not carry the REPORT_DATA asked for',
      );
    }
    return { tpm: null, tdx: { quote: b64u(r.outblob), source: 'configfs-tsm' } };
  }
}
