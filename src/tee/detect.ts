/**
 * Provider selection (docs/spec/attestation.md#selection-and-tiers). An explicit provider is used as configured. `auto` tries
 * SEV-SNP, then TDX (both through configfs-tsm; SEV-SNP also through /dev/sev-guest), then an
 * Azure CVM (a TPM holding the HCL report at NV 0x01400001), then a TPM, and never falls back to `software`, which stays explicit and dev-mode only. `minimum_tier`
 * refuses to start below the configured tier. The result says which provider was chosen and why,
 * for the start-up log and the gateway chain's `attestation_provider` entry.
 */

import { existsSync, readFileSync } from 'node:fs';
import { hasHclReport, Tpm } from '../../native/tpm/index.js';
import { TSM_REPORT_ROOT, tsmProvider } from '../../native/tsm/configfs.js';
import type { AttestationConfig } from '../config/index.js';
import { CmcpError } from '../errors/index.js';
import { AzureCvmProvider } from './azure-provider.js';
import { type AttestationProvider, type AttestationTier, SoftwareProvider, TIER_RANK } from './provider.js';
import { TpmProvider } from './tpm-provider.js';
import { SevSnpProvider, TdxProvider } from './tsm-provider.js';
import { loadCertFiles } from './x509.js';

/** A start-up refusal: `code` is ATTESTATION_UNAVAILABLE or ATTESTATION_TIER_TOO_LOW. */
export class AttestationStartError extends CmcpError {
  declare readonly code: 'ATTESTATION_UNAVAILABLE' | 'ATTESTATION_TIER_TOO_LOW';
  constructor(code: 'ATTESTATION_UNAVAILABLE' | 'ATTESTATION_TIER_TOO_LOW', message: string) {
    super(code, message);
    this.name = 'AttestationStartError';
  }
}

export interface Candidate {
  provider: 'sev-snp' | 'tdx' | 'azure-cvm' | 'tpm';
  available: boolean;
  reason: string;
}

export interface ProviderSelection {
  provider: AttestationProvider;
  /** Recorded in the gateway chain (`attestation_provider`) and logged. */
  detail: {
    provider: string;
    tier: AttestationTier;
    minimum_tier: AttestationTier | null;
    /** `configured` or `auto-detected`, with why. */
    reason: string;
    candidates?: Candidate[];
  };
}

function tpmProvider(
  a: Extract<AttestationConfig, { provider: 'tpm' | 'auto' }>,
  instanceId: string | undefined,
): TpmProvider {
  return new TpmProvider({
    ...(instanceId === undefined ? {} : { instanceId }),
    tcti: a.tcti,
    akAlgorithm: a.ak_algorithm,
    pcrs: a.pcrs,
    measurementPcr: a.measurement_pcr,
    enrollmentRecord: a.enrollment?.record ?? null,
    platformAk: a.platform_ak,
    platformAkChain: loadCertFiles(a.platform_ak_chain),
    eventLog: a.measurement_event_log ?? null,
  });
}

function azureProvider(
  a: Extract<AttestationConfig, { provider: 'azure-cvm' | 'auto' }>,
  instanceId: string | undefined,
): AzureCvmProvider {
  return new AzureCvmProvider(
    { vcekChain: loadCertFiles(a.vcek_chain), tdQuote: a.td_quote ? readFileSync(a.td_quote) : null },
    {
      ...(instanceId === undefined ? {} : { instanceId }),
      tcti: a.tcti,
      akAlgorithm: 'rsa2048',
      pcrs: a.pcrs,
      measurementPcr: a.measurement_pcr,
      eventLog: a.measurement_event_log ?? null,
    },
  );
}

function tsmOptions(a: Extract<AttestationConfig, { provider: 'sev-snp' | 'tdx' | 'auto' }>) {
  return { tsmPath: a.tsm_path, sevGuestDevice: a.sev_guest_device, timeoutMs: a.tsm_timeout_ms };
}

/** Probes configfs-tsm: its provider name, or why there is none. */
async function probeTsm(root: string): Promise<{ provider: string | null; why: string }> {
  try {
    const p = await tsmProvider(root);
    return p === null
      ? { provider: null, why: `no configfs-tsm report directory at ${root}` }
      : { provider: p, why: `configfs-tsm at ${root} reports provider ${JSON.stringify(p.slice(0, 40))}` };
  } catch (e) {
    return {
      provider: null,
      why: `configfs-tsm at ${root} is unusable: ${(e as Error).message.slice(0, 120)}`,
    };
  }
}

/** True when a TPM answers on `tcti` (opened, one PCR read, closed); `hcl`: it holds an HCL report. */
function probeTpm(tcti: string): { ok: boolean; hcl: boolean; why: string } {
  let tpm: Tpm | null = null;
  try {
    tpm = Tpm.open(tcti);
    tpm.readPcrs([0]);
    const hcl = hasHclReport(tpm);
    return {
      ok: true,
      hcl,
      why: `a TPM answers on ${tcti}${hcl ? ' and holds an HCL report at NV 0x01400001' : ''}`,
    };
  } catch (e) {
    return { ok: false, hcl: false, why: `no TPM on ${tcti}: ${(e as Error).message.slice(0, 120)}` };
  } finally {
    tpm?.close();
  }
}

async function autoDetect(
  a: Extract<AttestationConfig, { provider: 'auto' }>,
  instanceId: string | undefined,
): Promise<ProviderSelection> {
  const candidates: Candidate[] = [];
  const root = a.tsm_path ?? TSM_REPORT_ROOT;
  const tsm = await probeTsm(root);
  // 1. SEV-SNP
  if (tsm.provider === 'sev_guest') {
    candidates.push({ provider: 'sev-snp', available: true, reason: tsm.why });
  } else if (existsSync(a.sev_guest_device)) {
    candidates.push({
      provider: 'sev-snp',
      available: true,
      reason: `${a.sev_guest_device} exists (${tsm.why})`,
    });
  } else {
    candidates.push({
      provider: 'sev-snp',
      available: false,
      reason: `${tsm.why}; no ${a.sev_guest_device}`,
    });
  }
  // 2. TDX
  candidates.push(
    tsm.provider === 'tdx_guest'
      ? { provider: 'tdx', available: true, reason: tsm.why }
      : { provider: 'tdx', available: false, reason: tsm.why },
  );
  // 3. TPM — only probed when no confidential-VM provider was found (docs/spec/binding.md: prefer SNP/TDX)
  if (!candidates.some((c) => c.available)) {
    const t = probeTpm(a.tcti);
    // an Azure CVM's vTPM holds the HCL report: its quote is then vouched for by the CPU's report
    if (t.hcl) candidates.push({ provider: 'azure-cvm', available: true, reason: t.why });
    candidates.push({ provider: 'tpm', available: t.ok, reason: t.why });
  } else {
    candidates.push({
      provider: 'tpm',
      available: false,
      reason: 'not probed: a confidential-VM provider is preferred',
    });
  }
  const chosen = candidates.find((c) => c.available);
  if (!chosen) {
    throw new AttestationStartError(
      'ATTESTATION_UNAVAILABLE',
      `attestation provider auto found no hardware (${candidates.map((c) => `${c.provider}: ${c.reason}`).join('; ')}); ` +
        'auto never falls back to software: configure `provider: software` with dev_mode for development',
    );
  }
  const provider =
    chosen.provider === 'sev-snp'
      ? new SevSnpProvider(tsmOptions(a))
      : chosen.provider === 'tdx'
        ? new TdxProvider(tsmOptions(a))
        : chosen.provider === 'azure-cvm'
          ? azureProvider(a, instanceId)
          : tpmProvider(a, instanceId);
  return {
    provider,
    detail: {
      provider: provider.name,
      tier: provider.tier,
      minimum_tier: a.minimum_tier ?? null,
      reason: `auto-detected: ${chosen.reason}`,
      candidates,
    },
  };
}

/**
 * Builds the configured provider (or detects one), then applies `minimum_tier`.
 * @param instanceId the gateway's instance_id (a TPM provider keeps this instance's AK and flushes
 *   only this instance's leftovers, native/tpm/instance-ak.ts); absent for `cmcp start --check`.
 * @throws AttestationStartError
 */
export async function selectProvider(a: AttestationConfig, instanceId?: string): Promise<ProviderSelection> {
  let sel: ProviderSelection;
  if (a.provider === 'auto') {
    sel = await autoDetect(a, instanceId);
  } else {
    const provider =
      a.provider === 'tpm'
        ? tpmProvider(a, instanceId)
        : a.provider === 'sev-snp'
          ? new SevSnpProvider(tsmOptions(a))
          : a.provider === 'tdx'
            ? new TdxProvider(tsmOptions(a))
            : a.provider === 'azure-cvm'
              ? azureProvider(a, instanceId)
              : new SoftwareProvider();
    sel = {
      provider,
      detail: {
        provider: provider.name,
        tier: provider.tier,
        minimum_tier: a.minimum_tier ?? null,
        reason:
          provider.name === 'software'
            ? 'configured (dev mode): no hardware evidence; claims verify as signed-only'
            : 'configured',
      },
    };
  }
  const min = a.minimum_tier;
  if (min && TIER_RANK[sel.provider.tier] < TIER_RANK[min]) {
    sel.provider.close();
    throw new AttestationStartError(
      'ATTESTATION_TIER_TOO_LOW',
      `attestation provider ${sel.provider.name} (tier ${sel.provider.tier}) is below minimum_tier ${min} (${sel.detail.reason})`,
    );
  }
  return sel;
}
