/**
 * Azure confidential VM provider (docs/spec/evidence-azure.md): on an Azure CVM the guest cannot
 * ask the SEV-SNP firmware or the TDX module for a report with its own REPORT_DATA; the
 * paravisor (HCL) took one at boot, bound to the vTPM attestation key HCLAkPub, and left it in
 * vTPM NV 0x01400001. This provider binds the session digest through a TPM2_Quote under that
 * AK (the persistent key 0x81000003) with qualifyingData = SHA-256(REPORT_DATA), exactly as the
 * TPM provider does, and carries the HCL report beside the quote (`evidence.azure_hcl`) with
 * what verifies its hardware report: the VCEK chain (SEV-SNP) or the TD quote the host made of
 * the TD report (TDX), both from files the operator fetched from the Azure IMDS.
 *
 * At start-up the AK at 0x81000003 must be the HCLAkPub of the HCL report; a different key is
 * refused (HCL_AK_MISMATCH), never quoted with: the report would vouch for another key.
 */
import { createPublicKey, type KeyObject, X509Certificate } from 'node:crypto';
import { parseHclReport, parseHclRuntimeData, parseTdxQuoteHead } from '@cmcp/verify/abi';
import type { AzureHclEvidenceJson } from '@cmcp/verify/formats';
import { b64u } from '@cmcp/verify/formats';
import {
  HCL_AK_HANDLE,
  parentQualifiedNameOf,
  parsePublic,
  publicKeyOf,
  readHclReport,
  spkiDer,
  type Tpm,
} from '../../native/tpm/index.js';
import { type AttestationTier, BindingError, type BoundEvidence } from './provider.js';
import { TpmProvider, type TpmProviderOptions } from './tpm-provider.js';

/** What verifies the HCL report's hardware report, as configured. */
export interface AzureHardwareFiles {
  /** SEV-SNP: VCEK, ASK, ARK certificates (DER). */
  vcekChain: Buffer[];
  /** TDX: the TD quote of the HCL TD report. */
  tdQuote: Buffer | null;
}

type CertKind = AzureHclEvidenceJson['certs'][number]['kind'];

function certKind(der: Buffer): CertKind {
  const cn = /CN=([^\n,]+)/.exec(new X509Certificate(der).subject)?.[1] ?? '';
  if (cn === 'SEV-VCEK') return 'vcek';
  if (cn === 'SEV-VLEK') return 'vlek';
  if (cn.startsWith('ARK-')) return 'ark';
  if (cn.startsWith('SEV-')) return 'ask';
  return 'other';
}

/** HCLAkPub of an HCL report as a key. @throws BindingError HCL_REPORT_MALFORMED */
function hclAkPub(report: Buffer): { key: KeyObject; kind: 'sev-snp' | 'tdx'; reportData: Buffer } {
  try {
    const hcl = parseHclReport(report);
    const { kid: _kid, ...jwk } = parseHclRuntimeData(hcl.runtimeData).akPub;
    return {
      key: createPublicKey({ key: jwk as never, format: 'jwk' }),
      kind: hcl.kind,
      reportData: hcl.reportData,
    };
  } catch (e) {
    throw new BindingError(
      'HCL_REPORT_MALFORMED',
      `the HCL report at NV 0x01400001 does not parse: ${(e as Error).message.slice(0, 160)}`,
    );
  }
}

export class AzureCvmProvider extends TpmProvider {
  override readonly name: string = 'azure-cvm';
  /** The quote is vouched for by a confidential-VM hardware report. */
  override readonly tier: AttestationTier = 'tee';
  private hcl: { report: Buffer; kind: 'sev-snp' | 'tdx' } | null = null;
  private readonly certs: AzureHclEvidenceJson['certs'];

  constructor(
    private readonly hardware: AzureHardwareFiles,
    opts: TpmProviderOptions,
  ) {
    super({ ...opts, enrollmentRecord: null, platformAk: false });
    this.certs = hardware.vcekChain.map((der) => ({ kind: certKind(der), der: b64u(der) }));
  }

  /** The AK is the persistent key 0x81000003, and it must be the report's HCLAkPub. */
  protected override selectAk(tpm: Tpm): void {
    const report = readHclReport(tpm);
    if (!report)
      throw new BindingError(
        'HCL_REPORT_ABSENT',
        'no HCL report at vTPM NV 0x01400001: not an Azure confidential VM',
      );
    const hcl = hclAkPub(report);
    const parent = parentQualifiedNameOf(tpm, HCL_AK_HANDLE);
    if (!parent)
      throw new BindingError(
        'HCL_AK_ABSENT',
        'no usable AK at 0x81000003 (absent, or its parent is neither a hierarchy nor a default EK)',
      );
    const ak = tpm.loadPersistentAk(HCL_AK_HANDLE, parent);
    if (!ak) throw new BindingError('HCL_AK_ABSENT', 'no key at 0x81000003');
    if (!spkiDer(publicKeyOf(parsePublic(ak.publicArea))).equals(spkiDer(hcl.key))) {
      ak.flush();
      throw new BindingError('HCL_AK_MISMATCH', 'the AK at 0x81000003 is not the HCLAkPub of the HCL report');
    }
    this.ak = ak;
    this.akSource = 'platform';
    this.chain = [];
    this.hcl = { report, kind: hcl.kind };
    this.notes.push(...this.hardwareNotes(hcl.kind, hcl.reportData));
  }

  /** What a relying party will miss: no VCEK chain (SNP), no TD quote or one of another TD report (TDX). */
  private hardwareNotes(kind: 'sev-snp' | 'tdx', reportData: Buffer): string[] {
    if (kind === 'sev-snp')
      return this.certs.length
        ? []
        : [
            'no vcek_chain configured: a verifier cannot check the HCL report signature (claims verify invalid)',
          ];
    const q = this.hardware.tdQuote;
    if (!q)
      return ['no td_quote configured: the TD report is not signed (claims verify signed-only at best)'];
    try {
      return parseTdxQuoteHead(q).body.reportData.equals(reportData)
        ? []
        : ['td_quote is not a quote of this HCL TD report (REPORTDATA differs): claims verify invalid'];
    } catch (e) {
      return [`td_quote does not parse: ${(e as Error).message.slice(0, 120)}`];
    }
  }

  override describe(): Record<string, unknown> {
    return {
      ...super.describe(),
      hcl_report: this.hcl ? { kind: this.hcl.kind, bytes: this.hcl.report.length } : null,
      vcek_chain_length: this.certs.length,
      td_quote: this.hardware.tdQuote !== null,
    };
  }

  override async bind(reportData: Buffer): Promise<BoundEvidence> {
    const ev = await super.bind(reportData);
    const hcl = this.hcl;
    if (!hcl) throw new BindingError('HCL_REPORT_ABSENT', 'the HCL report was not read');
    return {
      ...ev,
      azure_hcl: {
        report: b64u(hcl.report),
        certs: hcl.kind === 'sev-snp' ? this.certs : [],
        ...(hcl.kind === 'tdx' && this.hardware.tdQuote ? { td_quote: b64u(this.hardware.tdQuote) } : {}),
        source: 'vtpm-nv',
      },
    };
  }
}
