/**
 * AMD SEV-SNP guest side: checks of the ATTESTATION_REPORT and of the certificate table of an
 * extended report (both layouts are `@cmcp/verify/abi/snp`'s: SEV-SNP ABI 56860 Table 22, GHCB
 * 56421 §4.1.8.1), and the /dev/sev-guest SNP_GET_REPORT / SNP_GET_EXT_REPORT ioctls (Linux
 * include/uapi/linux/sev-guest.h: struct snp_report_req is built here) through koffi, used when
 * configfs-tsm is missing.
 */
import { closeSync, openSync } from 'node:fs';
import {
  AbiError,
  parseCertTable as abiParseCertTable,
  parseMsgReportRsp,
  parseSnpReport,
  SNP_REPORT_DATA_OFFSET,
  SNP_REPORT_SIZE,
  type SnpCertEntry,
} from '@cmcp/verify/abi';
import koffi from 'koffi';
import { CmcpError } from '../errors.js';

export {
  buildCertTable,
  guidBytes,
  SNP_CERT_GUIDS,
  type SnpCertEntry,
  type SnpCertKind,
} from '@cmcp/verify/abi';
export { SNP_REPORT_DATA_OFFSET, SNP_REPORT_SIZE };

type SnpErrorCode =
  | 'SNP_REPORT_MALFORMED'
  | 'CERT_TABLE_MALFORMED'
  | 'SEV_GUEST_IOCTL_FAILED'
  | 'SEV_GUEST_ABSENT';

/** A failure of the SEV-SNP guest side; `code` is registered (NATIVE_ERRORS / ABI_ERRORS). */
export class SnpError extends CmcpError {
  declare readonly code: SnpErrorCode;

  constructor(code: SnpErrorCode, message: string) {
    super(code, message);
    this.name = 'SnpError';
  }
}

/** Runs an `@cmcp/verify/abi` parser; an AbiError it throws becomes an SnpError `code` with its message. */
function fromAbi<T>(code: SnpErrorCode, parse: () => T): T {
  try {
    return parse();
  } catch (err) {
    if (err instanceof AbiError) throw new SnpError(code, err.message);
    throw err;
  }
}

/**
 * Parses the certificate table of an extended report (layout: `@cmcp/verify/abi/snp/certtable`).
 * An empty blob is an empty table.
 * @throws SnpError CERT_TABLE_MALFORMED
 */
export function parseCertTable(blob: Buffer): SnpCertEntry[] {
  return fromAbi('CERT_TABLE_MALFORMED', () => abiParseCertTable(blob));
}

/**
 * Checks an ATTESTATION_REPORT the firmware just produced (parsed by
 * `@cmcp/verify/abi/snp/report`: size, version, reserved bytes) and that it carries
 * `reportData`. Returns the exact report (a trailing area the kernel may leave is cut off).
 * @throws SnpError SNP_REPORT_MALFORMED; returns `reportDataMatches` false when REPORT_DATA differs.
 */
export function checkSnpReport(
  report: Buffer,
  reportData: Buffer,
): { report: Buffer; reportDataMatches: boolean } {
  if (report.length < SNP_REPORT_SIZE) {
    throw new SnpError(
      'SNP_REPORT_MALFORMED',
      `report is ${report.length} bytes, expected ${SNP_REPORT_SIZE}`,
    );
  }
  const exact = Buffer.from(report.subarray(0, SNP_REPORT_SIZE));
  const parsed = fromAbi('SNP_REPORT_MALFORMED', () => parseSnpReport(exact));
  if (parsed.signatureAlgo !== 1) {
    throw new SnpError(
      'SNP_REPORT_MALFORMED',
      `signature algorithm ${parsed.signatureAlgo} is not ECDSA P-384`,
    );
  }
  return { report: exact, reportDataMatches: parsed.reportData.equals(reportData) };
}

// ---- /dev/sev-guest ioctl (no configfs-tsm) ----

/** _IOWR('S', nr, struct snp_guest_request_ioctl) with sizeof = 32. */
const iowr = (nr: number) => ((3 << 30) | (32 << 16) | (0x53 << 8) | nr) >>> 0;
export const SNP_GET_REPORT = iowr(0x0);
export const SNP_GET_EXT_REPORT = iowr(0x2);
/** struct snp_report_req: user_data[64], vmpl u32, rsvd[28]. */
export const SNP_REPORT_REQ_SIZE = 96;
/** struct snp_report_resp: data[4000] holding MSG_REPORT_RSP (status, report_size, rsvd[24], report). */
export const SNP_REPORT_RESP_SIZE = 4000;
/** Certificate buffer for the extended request: page multiple (the kernel insists), 4 pages. */
export const SNP_CERTS_SIZE = 4 * 4096;

/** snp_report_req bytes. */
export function snpReportRequest(reportData: Buffer, vmpl = 0): Buffer {
  if (reportData.length !== 64) throw new SnpError('SNP_REPORT_MALFORMED', 'REPORT_DATA must be 64 bytes');
  const b = Buffer.alloc(SNP_REPORT_REQ_SIZE);
  reportData.copy(b, 0);
  b.writeUInt32LE(vmpl, 64);
  return b;
}

/** The report inside an snp_report_resp (MSG_REPORT_RSP, layout in `@cmcp/verify/abi/snp/report`). */
export function snpReportFromResponse(resp: Buffer): Buffer {
  const r = fromAbi('SNP_REPORT_MALFORMED', () => parseMsgReportRsp(resp));
  if (r.status !== 0)
    throw new SnpError('SEV_GUEST_IOCTL_FAILED', `MSG_REPORT_RSP status 0x${r.status.toString(16)}`);
  return r.report;
}

interface IoctlBinding {
  plain: (fd: number, req: number, arg: Record<string, unknown>) => number;
  ext: (fd: number, req: number, arg: Record<string, unknown>) => number;
}
let ioctlBinding: IoctlBinding | null = null;

/** koffi bindings of ioctl(2) for struct snp_guest_request_ioctl (loaded once). */
export function sevGuestIoctl(): IoctlBinding {
  if (ioctlBinding) return ioctlBinding;
  const libc = koffi.load('libc.so.6');
  // struct snp_guest_request_ioctl { __u8 msg_version; __u64 req_data; __u64 resp_data; __u64 exitinfo2; }
  const reqIoctl = koffi.struct('cmcp_snp_guest_request_ioctl', {
    msg_version: 'uint8_t',
    req_data: 'void *',
    resp_data: 'void *',
    exitinfo2: 'uint64_t',
  });
  // glibc's ioctl is variadic; its third argument is read as one pointer, so a fixed prototype
  // is call-compatible on x86-64 and aarch64.
  const plain = libc.func('ioctl', 'int', ['int', 'unsigned long', koffi.inout(koffi.pointer(reqIoctl))]);
  ioctlBinding = {
    plain: plain as IoctlBinding['plain'],
    ext: plain as IoctlBinding['ext'],
  };
  return ioctlBinding;
}

/**
 * SNP_GET_EXT_REPORT (report + certificate table), falling back to SNP_GET_REPORT when the
 * extended request is refused. Not exercisable without an SEV-SNP guest.
 * @throws SnpError SEV_GUEST_ABSENT | SEV_GUEST_IOCTL_FAILED | SNP_REPORT_MALFORMED
 */
export function snpReportViaIoctl(
  device: string,
  reportData: Buffer,
): { report: Buffer; certTable: Buffer | null } {
  let fd: number;
  try {
    fd = openSync(device, 'r+');
  } catch (e) {
    throw new SnpError(
      'SEV_GUEST_ABSENT',
      `cannot open ${device}: ${(e as NodeJS.ErrnoException).code ?? 'error'}`,
    );
  }
  try {
    const io = sevGuestIoctl();
    const resp = Buffer.alloc(SNP_REPORT_RESP_SIZE);
    // struct snp_ext_report_req { struct snp_report_req data; __u64 certs_address; __u32 certs_len; } (112 bytes)
    const certs = Buffer.alloc(SNP_CERTS_SIZE);
    const extReq = Buffer.alloc(112);
    snpReportRequest(reportData).copy(extReq, 0);
    extReq.writeBigUInt64LE(BigInt(koffi.address(certs)), 96);
    extReq.writeUInt32LE(SNP_CERTS_SIZE, 104);
    const arg = { msg_version: 1, req_data: extReq, resp_data: resp, exitinfo2: 0n };
    if (io.ext(fd, SNP_GET_EXT_REPORT, arg) === 0) {
      return { report: snpReportFromResponse(resp), certTable: certs };
    }
    const arg2 = { msg_version: 1, req_data: snpReportRequest(reportData), resp_data: resp, exitinfo2: 0n };
    if (io.plain(fd, SNP_GET_REPORT, arg2) !== 0) {
      throw new SnpError(
        'SEV_GUEST_IOCTL_FAILED',
        `SNP_GET_REPORT failed (errno ${koffi.errno()}, exitinfo2 0x${BigInt(arg2.exitinfo2 as bigint).toString(16)})`,
      );
    }
    return { report: snpReportFromResponse(resp), certTable: null };
  } finally {
    closeSync(fd);
  }
}
