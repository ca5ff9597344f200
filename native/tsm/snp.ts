/**
 * AMD SEV-SNP guest side: the ATTESTATION_REPORT layout (SEV-SNP ABI spec 56860, Table 22),
 * the GHCB certificate table returned with extended reports (GHCB spec 56421 §4.1.8.1: entries of
 * {GUID[16], offset u32 LE, length u32 LE}, terminated by an all-zero entry, offsets from the
 * table start), and the /dev/sev-guest SNP_GET_REPORT / SNP_GET_EXT_REPORT ioctls (Linux
 * include/uapi/linux/sev-guest.h) through koffi, used when configfs-tsm is missing.
 */
import { closeSync, openSync } from 'node:fs';
import koffi from 'koffi';

export const SNP_REPORT_SIZE = 0x4a0;
export const SNP_REPORT_DATA_OFFSET = 0x50;

/** GHCB certificate table GUIDs, in RFC 4122 (text) byte order as hosts write them. */
export const SNP_CERT_GUIDS = {
  vcek: '63da758d-e664-4564-adc5-f4b93be8accd',
  vlek: 'a8074bc2-a25a-483e-aae6-39c045a0b8a1',
  ask: '4ab7b379-bbac-4fe4-a02f-05aef327c782',
  ark: 'c0b406a4-a803-4952-9743-3fb6014cd0ae',
} as const;
export type SnpCertKind = keyof typeof SNP_CERT_GUIDS | 'other';

export class SnpError extends Error {
  constructor(
    readonly code:
      | 'SNP_REPORT_MALFORMED'
      | 'CERT_TABLE_MALFORMED'
      | 'SEV_GUEST_IOCTL_FAILED'
      | 'SEV_GUEST_ABSENT',
    message: string,
  ) {
    super(message);
    this.name = 'SnpError';
  }
}

function guidText(b: Buffer): string {
  const h = b.toString('hex');
  return `${h.slice(0, 8)}-${h.slice(8, 12)}-${h.slice(12, 16)}-${h.slice(16, 20)}-${h.slice(20)}`;
}

export function guidBytes(text: string): Buffer {
  return Buffer.from(text.replace(/-/g, ''), 'hex');
}

export interface SnpCertEntry {
  guid: string;
  kind: SnpCertKind;
  data: Buffer;
}

/**
 * Parses a GHCB certificate table strictly: entries must be followed by the zero terminator,
 * point past the header and inside the blob, not overlap, and carry a known GUID at most once.
 * An empty blob is an empty table.
 * @throws SnpError CERT_TABLE_MALFORMED
 */
export function parseCertTable(blob: Buffer): SnpCertEntry[] {
  if (blob.length === 0) return [];
  const bad = (why: string) => new SnpError('CERT_TABLE_MALFORMED', `certificate table: ${why}`);
  const headers: { guid: Buffer; offset: number; length: number }[] = [];
  let pos = 0;
  for (;;) {
    if (pos + 24 > blob.length) throw bad('no zero terminator entry');
    const guid = blob.subarray(pos, pos + 16);
    const offset = blob.readUInt32LE(pos + 16);
    const length = blob.readUInt32LE(pos + 20);
    pos += 24;
    if (offset === 0 && length === 0 && guid.every((b) => b === 0)) break;
    headers.push({ guid, offset, length });
    if (headers.length > 64) throw bad('more than 64 entries');
  }
  const seen = new Set<string>();
  const ranges: [number, number][] = [];
  const out: SnpCertEntry[] = [];
  for (const [i, h] of headers.entries()) {
    if (h.length === 0) throw bad(`entry ${i} is empty`);
    if (h.offset < pos) throw bad(`entry ${i} points into the table header (offset ${h.offset} < ${pos})`);
    if (h.offset + h.length > blob.length) {
      throw bad(
        `entry ${i} (offset ${h.offset}, length ${h.length}) runs past the end (${blob.length} bytes)`,
      );
    }
    for (const [a, b] of ranges) {
      if (h.offset < b && a < h.offset + h.length) throw bad(`entry ${i} overlaps another entry`);
    }
    ranges.push([h.offset, h.offset + h.length]);
    const guid = guidText(h.guid);
    if (seen.has(guid)) throw bad(`GUID ${guid} appears twice`);
    seen.add(guid);
    const kind = (Object.entries(SNP_CERT_GUIDS).find(([, g]) => g === guid)?.[0] ?? 'other') as SnpCertKind;
    out.push({ guid, kind, data: Buffer.from(blob.subarray(h.offset, h.offset + h.length)) });
  }
  return out;
}

/** Builds a GHCB certificate table (the inverse of {@link parseCertTable}). */
export function buildCertTable(entries: { guid: string; data: Buffer }[]): Buffer {
  const header = (entries.length + 1) * 24;
  const parts: Buffer[] = [];
  const table = Buffer.alloc(header);
  let cursor = header;
  entries.forEach((e, i) => {
    guidBytes(e.guid).copy(table, i * 24);
    table.writeUInt32LE(cursor, i * 24 + 16);
    table.writeUInt32LE(e.data.length, i * 24 + 20);
    parts.push(e.data);
    cursor += e.data.length;
  });
  return Buffer.concat([table, ...parts]);
}

/**
 * Checks the shape of an ATTESTATION_REPORT and that it carries `reportData`. Returns the exact
 * report (a trailing area the kernel may leave is cut off).
 * @throws SnpError SNP_REPORT_MALFORMED; returns `mismatch` when REPORT_DATA differs.
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
  const version = report.readUInt32LE(0);
  if (version < 2 || version > 5)
    throw new SnpError('SNP_REPORT_MALFORMED', `report version ${version} is not 2..5`);
  const sigAlgo = report.readUInt32LE(0x34);
  if (sigAlgo !== 1)
    throw new SnpError('SNP_REPORT_MALFORMED', `signature algorithm ${sigAlgo} is not ECDSA P-384`);
  const exact = Buffer.from(report.subarray(0, SNP_REPORT_SIZE));
  const rd = exact.subarray(SNP_REPORT_DATA_OFFSET, SNP_REPORT_DATA_OFFSET + 64);
  return { report: exact, reportDataMatches: rd.equals(reportData) };
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

/** The report inside an snp_report_resp (MSG_REPORT_RSP, SNP ABI Table 25). */
export function snpReportFromResponse(resp: Buffer): Buffer {
  const status = resp.readUInt32LE(0);
  if (status !== 0)
    throw new SnpError('SEV_GUEST_IOCTL_FAILED', `MSG_REPORT_RSP status 0x${status.toString(16)}`);
  const size = resp.readUInt32LE(4);
  if (size < SNP_REPORT_SIZE || 0x20 + size > resp.length) {
    throw new SnpError('SNP_REPORT_MALFORMED', `MSG_REPORT_RSP report_size ${size}`);
  }
  return Buffer.from(resp.subarray(0x20, 0x20 + size));
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
