/**
 * The Azure CVM links between the hardware report and the vTPM quote: REPORT_DATA[0:n] is the
 * hash of the runtime data (`azure.report_data`), the AK presented with the quote is HCLAkPub
 * (`azure.ak_match`), and for TDX the host's TD quote carries the TD report the HCL report holds
 * (`azure.td_report`). Source: azure-cvm-tooling `az-cvm-vtpm` (HCL report → runtime data →
 * HCLAkPub → TPM quote); Intel TDX Module ABI "TDINFO_STRUCT" and DCAP quote TD report body.
 */
import type { HclReport } from '../abi/azure/hcl.js';
import type { TdxQuote } from '../abi/tdx/quote.js';
import { digest } from '../crypto/hash.js';
import type { KeyObject } from '../crypto/keys.js';
import { type CheckResult, fail, pass } from '../result.js';

const dep = (id: string, what: string) => fail(id, 'DEPENDENCY_FAILED', what);
const HASH_BYTES = { sha256: 32, sha384: 48, sha512: 64 } as const;

/** `azure.report_data`: REPORT_DATA[0:n] = H(runtime data), H the report's hash type. */
export function reportDataCheck(hcl: HclReport | undefined): CheckResult {
  const id = 'azure.report_data';
  if (!hcl) return dep(id, 'the HCL report did not parse');
  const n = HASH_BYTES[hcl.hash];
  const want = digest(hcl.hash, hcl.runtimeData);
  const got = hcl.reportData.subarray(0, n);
  return got.equals(want)
    ? pass(
        id,
        `REPORT_DATA[0:${n}] = ${hcl.hash.toUpperCase()}(runtime data, ${hcl.runtimeData.length} bytes)`,
      )
    : fail(
        id,
        'HCL_REPORT_DATA_MISMATCH',
        `REPORT_DATA[0:${n}] ${got.toString('hex').slice(0, 16)}… ≠ ${hcl.hash}(runtime data) ${want.toString('hex').slice(0, 16)}…`,
      );
}

function spki(k: KeyObject): Buffer {
  return k.export({ format: 'der', type: 'spki' }) as Buffer;
}

/** `azure.ak_match`: the AK public area presented with the quote is the HCLAkPub key. */
export function akMatchCheck(
  hclAk: KeyObject | undefined,
  presented: KeyObject | undefined,
  supplied: boolean,
): CheckResult {
  const id = 'azure.ak_match';
  if (!supplied) return pass(id, 'the quote is checked under HCLAkPub itself (no other AK presented)');
  if (!hclAk) return dep(id, 'no HCLAkPub key');
  if (!presented) return dep(id, 'the presented AK public area did not parse');
  return spki(hclAk).equals(spki(presented))
    ? pass(id, 'the AK public area presented with the quote is HCLAkPub')
    : fail(id, 'HCL_AK_MISMATCH', 'the AK public area presented with the quote is not HCLAkPub');
}

/**
 * `azure.td_report`: the TD quote's body carries the HCL report's TD report: REPORTDATA, the
 * TEE_TCB_INFO fields (TEE_TCB_SVN, MRSEAM, MRSIGNERSEAM, SEAMATTRIBUTES), TDATTRIBUTES, XFAM,
 * MRTD, MRCONFIGID, MROWNER, MROWNERCONFIG and RTMR0-3 equal. The MAC, the hashes of
 * REPORTMACSTRUCT and SERVTD_HASH are not in a v4 body and stay unverified.
 */
export function tdReportCheck(hcl: HclReport | undefined, quote: TdxQuote | undefined): CheckResult {
  const id = 'azure.td_report';
  const td = hcl?.tdReport;
  if (!td) return dep(id, 'the HCL report did not parse as a TDX report');
  if (!quote) return dep(id, 'the TD quote did not parse');
  const b = quote.body;
  const pairs: [string, Buffer, Buffer][] = [
    ['REPORTDATA', td.reportData, b.reportData],
    // TEE_TCB_INFO: VALID 8, TEE_TCB_SVN 16, MRSEAM 48, MRSIGNERSEAM 48, ATTRIBUTES 8
    ['TEE_TCB_SVN', td.teeTcbInfo.subarray(8, 24), b.teeTcbSvn],
    ['MRSEAM', td.teeTcbInfo.subarray(24, 72), b.mrSeam],
    ['MRSIGNERSEAM', td.teeTcbInfo.subarray(72, 120), b.mrSignerSeam],
    ['SEAMATTRIBUTES', td.teeTcbInfo.subarray(120, 128), b.seamAttributes],
    ['TDATTRIBUTES', td.tdAttributes, b.tdAttributes],
    ['XFAM', td.xfam, b.xfam],
    ['MRTD', td.mrTd, b.mrTd],
    ['MRCONFIGID', td.mrConfigId, b.mrConfigId],
    ['MROWNER', td.mrOwner, b.mrOwner],
    ['MROWNERCONFIG', td.mrOwnerConfig, b.mrOwnerConfig],
    ...td.rtmr.map((r, i): [string, Buffer, Buffer] => [`RTMR${i}`, r, b.rtmr[i] as Buffer]),
  ];
  const bad = pairs.filter(([, a, q]) => !a.equals(q)).map(([n]) => n);
  return bad.length
    ? fail(
        id,
        'HCL_TD_REPORT_MISMATCH',
        `the TD quote body differs from the HCL TD report in ${bad.join(', ')}`,
      )
    : pass(
        id,
        'the TD quote body carries the HCL TD report (REPORTDATA, TEE_TCB_INFO, TD attributes, MRTD, RTMR0-3)',
      );
}
