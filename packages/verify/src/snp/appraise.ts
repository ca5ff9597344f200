/**
 * SEV-SNP binding and appraisal: REPORT_DATA against the expected 64 bytes (`evidence.binding`),
 * then the report against the reference values: POLICY.DEBUG (bit 19), VMPL, minimum TCB per
 * product, MEASUREMENT and HOST_DATA. Source: SEV-SNP Firmware ABI 56860 Table 9 (guest policy),
 * Table 22 (ATTESTATION_REPORT).
 */
import { SNP_POLICY_DEBUG, type SnpReport } from '../abi/snp/report.js';
import { decodeSnpTcb, type SnpProduct } from '../abi/snp/tcb.js';
import {
  type CheckResult,
  check,
  fail,
  HARDWARE_BINDING_CHECK,
  NOT_FRESH_NO_NONCE,
  pass,
} from '../result.js';
import type { ReferenceValues, SnpTcbMinimum } from '../trust.js';

/** `evidence.binding`: REPORT_DATA equals the expected 64 bytes; null/undefined ⇒ not-applicable. */
export function snpBindingCheck(
  report: SnpReport | undefined,
  expected: Uint8Array | null | undefined,
): CheckResult {
  if (expected == null) {
    return check(HARDWARE_BINDING_CHECK, 'not-applicable', 'NOT_SUPPLIED', NOT_FRESH_NO_NONCE);
  }
  if (!report) return fail(HARDWARE_BINDING_CHECK, 'DEPENDENCY_FAILED', 'the report did not parse');
  const want = Buffer.from(expected);
  return want.length === 64 && report.reportData.equals(want)
    ? pass(HARDWARE_BINDING_CHECK, 'REPORT_DATA equals the expected 64 bytes')
    : fail(
        HARDWARE_BINDING_CHECK,
        'EVIDENCE_BINDING_MISMATCH',
        `REPORT_DATA ${report.reportData.toString('hex').slice(0, 16)}… is not the expected ${want.length}-byte value`,
      );
}

function minimumTcbCheck(
  report: SnpReport,
  product: SnpProduct | undefined,
  rv: ReferenceValues['sev_snp'],
): CheckResult {
  const min: SnpTcbMinimum | undefined = product ? rv?.minimum_tcb?.[product] : undefined;
  if (!product)
    return fail(
      'snp.minimum_tcb',
      'DEPENDENCY_FAILED',
      'the product is unknown, so the TCB layout is unknown',
    );
  if (!min) return check('snp.minimum_tcb', 'not-applicable', 'NO_POLICY', `no minimum TCB for ${product}`);
  const t = decodeSnpTcb(report.reportedTcb, product);
  const low = (Object.keys(min) as (keyof SnpTcbMinimum)[]).filter((k) => {
    const want = min[k];
    const got = t[k];
    return want !== undefined && (got === undefined || got < want);
  });
  return low.length
    ? fail(
        'snp.minimum_tcb',
        'SNP_TCB_TOO_LOW',
        `REPORTED_TCB ${JSON.stringify(t)} below minimum ${JSON.stringify(min)} (${product}): ${low.join(', ')}`,
      )
    : pass('snp.minimum_tcb', `REPORTED_TCB ${JSON.stringify(t)} ≥ minimum for ${product}`);
}

/**
 * Appraisal checks, in order (ids stable): `snp.debug`, `snp.vmpl`, `snp.minimum_tcb`,
 * `snp.measurement`, `snp.host_data`. All fail with DEPENDENCY_FAILED when the report did not parse.
 */
export function appraiseSnpReport(
  report: SnpReport | undefined,
  product: SnpProduct | undefined,
  referenceValues: ReferenceValues | undefined,
): CheckResult[] {
  const ids = ['snp.debug', 'snp.vmpl', 'snp.minimum_tcb', 'snp.measurement', 'snp.host_data'];
  if (!report) return ids.map((id) => fail(id, 'DEPENDENCY_FAILED', 'the report did not parse'));
  const rv = referenceValues?.sev_snp;
  const debug = (report.policy & SNP_POLICY_DEBUG) !== 0n;
  const mhex = report.measurement.toString('hex');
  const hhex = report.hostData.toString('hex');
  return [
    !debug
      ? pass('snp.debug', 'POLICY.DEBUG is clear')
      : rv?.allow_debug
        ? pass('snp.debug', 'POLICY.DEBUG is set; the reference values allow debug')
        : fail(
            'snp.debug',
            'SNP_DEBUG_ENABLED',
            `POLICY 0x${report.policy.toString(16)} has DEBUG (bit 19) set`,
          ),
    !rv?.vmpl
      ? check('snp.vmpl', 'not-applicable', 'NO_POLICY', `VMPL ${report.vmpl}; no VMPL requirement`)
      : rv.vmpl.includes(report.vmpl)
        ? pass('snp.vmpl', `VMPL ${report.vmpl} is allowed`)
        : fail('snp.vmpl', 'SNP_VMPL_NOT_ALLOWED', `VMPL ${report.vmpl} is not one of ${rv.vmpl.join(', ')}`),
    minimumTcbCheck(report, product, rv),
    !rv?.measurements
      ? check(
          'snp.measurement',
          'not-applicable',
          'NO_POLICY',
          `MEASUREMENT ${mhex}; no expected measurement`,
        )
      : rv.measurements.includes(mhex)
        ? pass('snp.measurement', `MEASUREMENT ${mhex} is expected`)
        : fail('snp.measurement', 'MEASUREMENT_NOT_ALLOWED', `MEASUREMENT ${mhex} is not an expected value`),
    !rv?.host_data
      ? check('snp.host_data', 'not-applicable', 'NO_POLICY', 'no expected HOST_DATA')
      : rv.host_data.includes(hhex)
        ? pass('snp.host_data', 'HOST_DATA is expected')
        : fail('snp.host_data', 'MEASUREMENT_NOT_ALLOWED', `HOST_DATA ${hhex} is not an expected value`),
  ];
}
