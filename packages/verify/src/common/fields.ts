/**
 * "Everything parsed is shown": the fields a relying party appraises, listed in every report with
 * their values, each marked `verified` or not. A field is verified when the evidence signature
 * covering it passed and the signing key chains to a pinned root (`evidence.signature` and
 * `evidence.anchor` pass); a PCR value also needs `tpm.pcr_digest` to pass (it is covered only
 * through the quoted pcrDigest). A PCR the quote does not select — e.g. one only an event log
 * replays — is unverified however the log replays.
 */
import type { SnpReport } from '../abi/snp/report.js';
import type { TdxQuote } from '../abi/tdx/quote.js';
import type { TpmsAttestQuote } from '../abi/tpm/attest.js';
import { algName } from '../abi/tpm/constants.js';
import type { PcrSelection } from '../abi/tpm/pcr.js';
import {
  type CheckResult,
  type EventLogSummary,
  type EvidenceField,
  HARDWARE_ANCHOR_CHECK,
  HARDWARE_SIGNATURE_CHECK,
} from '../result.js';

/** A field before marking: what covers it. */
export interface FieldSource {
  name: string;
  value: string;
  /** `signature`: inside the signed evidence; `quoted-pcr`: a PCR value the quote selects; `none`. */
  covered: 'signature' | 'quoted-pcr' | 'none';
}

/** Marks fields verified from the checks (see the module comment). */
export function markFields(fields: readonly FieldSource[], checks: readonly CheckResult[]): EvidenceField[] {
  const ok = (id: string) => checks.some((c) => c.id === id && c.status === 'pass');
  const signed = ok(HARDWARE_SIGNATURE_CHECK) && ok(HARDWARE_ANCHOR_CHECK);
  return fields.map((f) => ({
    name: f.name,
    value: f.value,
    verified: signed && (f.covered === 'signature' || (f.covered === 'quoted-pcr' && ok('tpm.pcr_digest'))),
  }));
}

const hex = (b: Uint8Array) => Buffer.from(b).toString('hex');

/** TPM: extraData, pcrDigest, clock info, firmwareVersion, every supplied or replayed PCR. */
export function tpmFields(
  attest: TpmsAttestQuote | undefined,
  pcrValues: readonly { hashAlg: number; index: number; value: Uint8Array }[],
  eventLog?: EventLogSummary,
): FieldSource[] {
  const out: FieldSource[] = [];
  const selected = (sel: readonly PcrSelection[], alg: number, i: number) =>
    sel.some((s) => s.hashAlg === alg && s.pcrs.includes(i));
  if (attest) {
    const c = attest.clockInfo;
    out.push(
      { name: 'tpm.extraData', value: hex(attest.extraData), covered: 'signature' },
      { name: 'tpm.pcrDigest', value: hex(attest.pcrDigest), covered: 'signature' },
      { name: 'tpm.clockInfo.clock', value: String(c.clock), covered: 'signature' },
      { name: 'tpm.clockInfo.resetCount', value: String(c.resetCount), covered: 'signature' },
      { name: 'tpm.clockInfo.restartCount', value: String(c.restartCount), covered: 'signature' },
      { name: 'tpm.clockInfo.safe', value: c.safe ? '1' : '0', covered: 'signature' },
      {
        name: 'tpm.firmwareVersion',
        value: `0x${attest.firmwareVersion.toString(16).padStart(16, '0')}`,
        covered: 'signature',
      },
    );
  }
  const seen = new Set<string>();
  for (const v of pcrValues) {
    const name = `tpm.pcr.${algName(v.hashAlg)}.${v.index}`;
    seen.add(name);
    const quoted = attest ? selected(attest.pcrSelect, v.hashAlg, v.index) : false;
    out.push({ name, value: hex(v.value), covered: quoted ? 'quoted-pcr' : 'none' });
  }
  for (const [bank, pcrs] of Object.entries(eventLog?.pcrs ?? {})) {
    for (const [i, value] of Object.entries(pcrs)) {
      const name = `tpm.pcr.${bank}.${i}`;
      if (seen.has(name)) continue;
      out.push({ name: `eventlog.pcr.${bank}.${i}`, value, covered: 'none' });
    }
  }
  return out;
}

/** SEV-SNP: REPORT_DATA, MEASUREMENT, HOST_DATA, POLICY, TCB values, CHIP_ID (and VMPL). */
export function snpFields(r: SnpReport | undefined): FieldSource[] {
  if (!r) return [];
  const f = (name: string, value: string): FieldSource => ({
    name: `snp.${name}`,
    value,
    covered: 'signature',
  });
  return [
    f('REPORT_DATA', hex(r.reportData)),
    f('MEASUREMENT', hex(r.measurement)),
    f('HOST_DATA', hex(r.hostData)),
    f('POLICY', `0x${r.policy.toString(16).padStart(16, '0')}`),
    f('VMPL', String(r.vmpl)),
    f('CURRENT_TCB', hex(r.currentTcb)),
    f('REPORTED_TCB', hex(r.reportedTcb)),
    f('COMMITTED_TCB', hex(r.committedTcb)),
    f('LAUNCH_TCB', hex(r.launchTcb)),
    f('CHIP_ID', hex(r.chipId)),
  ];
}

/** TDX: MRTD, RTMR0–3, REPORTDATA, MRCONFIGID, TEE_TCB_SVN (and TD_ATTRIBUTES). */
export function tdxFields(q: TdxQuote | undefined): FieldSource[] {
  if (!q) return [];
  const b = q.body;
  const f = (name: string, value: Uint8Array): FieldSource => ({
    name: `tdx.${name}`,
    value: hex(value),
    covered: 'signature',
  });
  return [
    f('MRTD', b.mrTd),
    ...b.rtmr.map((r, i) => f(`RTMR${i}`, r)),
    f('REPORTDATA', b.reportData),
    f('MRCONFIGID', b.mrConfigId),
    f('TEE_TCB_SVN', b.teeTcbSvn),
    ...(b.teeTcbSvn2 ? [f('TEE_TCB_SVN_2', b.teeTcbSvn2)] : []),
    f('TD_ATTRIBUTES', b.tdAttributes),
  ];
}
