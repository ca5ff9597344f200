/**
 * Azure CVM signature layer: the HCL report is parsed (abi/azure), HCLAkPub is taken from its
 * runtime data, the hardware report is verified by the platform verifier it belongs to (SEV-SNP:
 * the report itself under the VCEK chain; TDX: the host's TD quote under the PCK chain with its
 * collateral), and the vTPM quote is verified under exactly HCLAkPub.
 *
 * The hardware checks keep their ids (`evidence.signature`, `evidence.anchor`, `snp.*`, `tdx.*`):
 * they are what anchors the chain. The vTPM quote's signature check is `azure.quote_signature`,
 * its extraData check stays `evidence.binding` (the relying party's nonce, or the claim's
 * SHA-256(REPORT_DATA)).
 */
import { type HclReport, parseHclReport } from '../abi/azure/hcl.js';
import { type HclRuntimeData, parseHclRuntimeData } from '../abi/azure/runtime-data.js';
import { AbiError } from '../abi/errors.js';
import type { SnpProduct } from '../abi/snp/tcb.js';
import type { TdxQuote } from '../abi/tdx/quote.js';
import { jwkPublicKey, type KeyObject } from '../crypto/keys.js';
import {
  type AnchorUsed,
  type CheckResult,
  check,
  fail,
  HARDWARE_ANCHOR_CHECK,
  HARDWARE_BINDING_CHECK,
  HARDWARE_SIGNATURE_CHECK,
  pass,
} from '../result.js';
import { appraiseSnpReport } from '../snp/appraise.js';
import { verifySnpSignature } from '../snp/signature.js';
import type { TdxCollateral } from '../tdx/collateral.js';
import { verifyTdxQuote } from '../tdx/quote.js';
import { type TpmQuoteInput, type TpmQuoteResult, verifyTpmQuote } from '../tpm/quote.js';
import type { ReferenceValues, TrustStore } from '../trust.js';

/** The hardware evidence beside the HCL report. */
export interface AzureHardwareInput {
  /** SEV-SNP: VCEK/VLEK, ASK/ASVK, ARK files (DER or PEM). */
  snpCerts?: readonly Uint8Array[];
  snpProduct?: SnpProduct;
  /** TDX: the quote the host's QE made of the HCL report's TD report. */
  tdxQuote?: Uint8Array;
  tdxCollateral?: TdxCollateral;
}

/** Parsed HCL report and its HCLAkPub key, with their checks. */
export interface ParsedHcl {
  checks: CheckResult[];
  hcl?: HclReport;
  runtime?: HclRuntimeData;
  akKey?: KeyObject;
}

const dep = (id: string, what: string) => fail(id, 'DEPENDENCY_FAILED', what);
const abiCode = (err: unknown) => (err instanceof AbiError ? err.code : 'HCL_REPORT_MALFORMED');

/** `azure.hcl_parse` and `azure.runtime_data` (HCLAkPub as a key). */
export function parseHclChecks(bytes: Uint8Array): ParsedHcl {
  const out: ParsedHcl = { checks: [] };
  try {
    const hcl = parseHclReport(bytes);
    out.hcl = hcl;
    out.checks.push(
      pass(
        'azure.hcl_parse',
        `HCL report v${hcl.version}, ${hcl.kind === 'sev-snp' ? 'SEV-SNP report' : 'TDX TD report'}, ${hcl.runtimeData.length} bytes of runtime data (${hcl.hash})`,
      ),
    );
  } catch (err) {
    out.checks.push(fail('azure.hcl_parse', abiCode(err), (err as Error).message.slice(0, 160)));
    out.checks.push(dep('azure.runtime_data', 'the HCL report did not parse'));
    return out;
  }
  try {
    out.runtime = parseHclRuntimeData(out.hcl.runtimeData);
  } catch (err) {
    out.checks.push(fail('azure.runtime_data', abiCode(err), (err as Error).message.slice(0, 160)));
    return out;
  }
  try {
    const { kid: _kid, ...jwk } = out.runtime.akPub;
    out.akKey = jwkPublicKey(jwk as Record<string, unknown>);
    out.checks.push(pass('azure.runtime_data', `HCLAkPub is a ${out.runtime.akPub.kty} key`));
  } catch {
    out.checks.push(
      fail('azure.runtime_data', 'HCL_AKPUB_INVALID', 'the HCLAkPub JWK is not a usable public key'),
    );
  }
  return out;
}

/** Hardware checks and what they yielded. */
export interface HardwareResult {
  checks: CheckResult[];
  anchors: AnchorUsed[];
  notes: string[];
  tdQuote?: TdxQuote;
}

/** Ids the hardware layer always reports, so a missing input still fails visibly. */
const HW_IDS = [HARDWARE_SIGNATURE_CHECK, HARDWARE_ANCHOR_CHECK];

/**
 * The hardware report's checks: SEV-SNP (`snp.*` of {@link verifySnpSignature} and the SNP
 * appraisal) or TDX ({@link verifyTdxQuote} of the TD quote; its REPORTDATA check is
 * `azure.td_quote_report_data`, compared with the HCL TD report's REPORTDATA).
 */
export function hardwareChecks(
  hcl: HclReport | undefined,
  hw: AzureHardwareInput,
  ctx: { trustStore: TrustStore; at: Date; referenceValues?: ReferenceValues },
): HardwareResult {
  const out: HardwareResult = { checks: [], anchors: [], notes: [] };
  if (!hcl) {
    out.checks.push(...HW_IDS.map((id) => dep(id, 'the HCL report did not parse')));
    return out;
  }
  if (hcl.kind === 'sev-snp') {
    if (hw.tdxQuote) {
      out.checks.push(
        fail('azure.hardware', 'HCL_EVIDENCE_MISMATCH', 'a TD quote was supplied for an SEV-SNP HCL report'),
      );
    }
    const s = verifySnpSignature({
      report: hcl.hwReport,
      certs: hw.snpCerts ?? [],
      ...(hw.snpProduct ? { product: hw.snpProduct } : {}),
      trustStore: ctx.trustStore,
      at: ctx.at,
    });
    out.checks.push(...s.checks, ...appraiseSnpReport(s.report, s.product, ctx.referenceValues));
    out.anchors.push(...s.anchors);
    return out;
  }
  if (hw.snpCerts?.length) {
    out.checks.push(
      fail(
        'azure.hardware',
        'HCL_EVIDENCE_MISMATCH',
        'SEV-SNP certificates were supplied for a TDX HCL report',
      ),
    );
  }
  if (!hw.tdxQuote) {
    out.checks.push(
      check(
        HARDWARE_SIGNATURE_CHECK,
        'absent',
        'NOT_SUPPLIED',
        'a TD report is MAC’d, not signed: give the TD quote the host made of it',
      ),
      check(HARDWARE_ANCHOR_CHECK, 'absent', 'NOT_SUPPLIED', 'no TD quote, so no PCK chain'),
    );
    return out;
  }
  const t = verifyTdxQuote({
    quote: hw.tdxQuote,
    expectedReportData: hcl.reportData,
    trustStore: ctx.trustStore,
    at: ctx.at,
    ...(ctx.referenceValues ? { referenceValues: ctx.referenceValues } : {}),
    ...(hw.tdxCollateral ? { collateral: hw.tdxCollateral } : {}),
  });
  out.checks.push(
    ...t.checks.map((c) =>
      c.id === HARDWARE_BINDING_CHECK ? { ...c, id: 'azure.td_quote_report_data' } : c,
    ),
  );
  out.anchors.push(...t.anchors);
  out.notes.push(...t.notes);
  if (t.quote) out.tdQuote = t.quote;
  return out;
}

/**
 * The vTPM quote under HCLAkPub: {@link verifyTpmQuote} with the AK given as the presented
 * TPMT_PUBLIC (claims; then `azure.ak_match` compares it with HCLAkPub) or HCLAkPub itself.
 * Its `evidence.signature` is reported as `azure.quote_signature`.
 */
export function quoteChecks(
  akKey: KeyObject | undefined,
  input: Omit<TpmQuoteInput, 'ak'> & { akPublic?: Uint8Array },
): TpmQuoteResult {
  const { akPublic, ...rest } = input;
  if (!akPublic && !akKey) {
    const ids = ['azure.quote_signature', HARDWARE_BINDING_CHECK];
    return { checks: ids.map((id) => dep(id, 'no HCLAkPub key to verify the quote under')) };
  }
  const q = verifyTpmQuote({
    ...rest,
    ak: akPublic ? { public: akPublic } : { key: akKey as KeyObject },
  });
  q.checks = q.checks.map((c) =>
    c.id === HARDWARE_SIGNATURE_CHECK ? { ...c, id: 'azure.quote_signature' } : c,
  );
  return q;
}
