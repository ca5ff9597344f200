/**
 * AMD SEV-SNP ATTESTATION_REPORT (SEV-SNP Firmware ABI specification 56860, Table 22
 * "ATTESTATION_REPORT Structure"; Table 23 TCB_VERSION; Table 24 "ECDSA Signature Format").
 * All integers are little-endian. The report is exactly 0x4A0 bytes; bytes 0x000–0x29F are
 * signed; R and S sit little-endian in 72-byte slots (48 bytes used) at 0x2A0 and 0x2E8.
 */
import { ByteReader } from '../reader.js';

/** Size of ATTESTATION_REPORT. */
export const SNP_REPORT_SIZE = 0x4a0;
/** End (exclusive) of the signed part of the report. */
export const SNP_SIGNED_END = 0x2a0;
/** Offset of REPORT_DATA (64 bytes). */
export const SNP_REPORT_DATA_OFFSET = 0x50;
/** Report versions this layout knows (v3 adds CPUID, v5 the mitigation vectors). */
export const SNP_VERSIONS: readonly number[] = [2, 3, 5];
/** SIGNER_INFO.SIGNING_KEY values. */
export const SNP_SIGNING_KEY = { VCEK: 0, VLEK: 1, NONE: 7 } as const;
/** POLICY bit 19: DEBUG allowed. */
export const SNP_POLICY_DEBUG = 1n << 19n;

/** Parsed ATTESTATION_REPORT. */
export interface SnpReport {
  version: number;
  guestSvn: number;
  policy: bigint;
  familyId: Buffer;
  imageId: Buffer;
  vmpl: number;
  signatureAlgo: number;
  currentTcb: Buffer;
  platformInfo: bigint;
  signerInfo: { authorKeyEn: boolean; maskChipKey: boolean; signingKey: number };
  reportData: Buffer;
  measurement: Buffer;
  hostData: Buffer;
  idKeyDigest: Buffer;
  authorKeyDigest: Buffer;
  reportId: Buffer;
  reportIdMa: Buffer;
  reportedTcb: Buffer;
  /** v3+: CPUID family, model, stepping (family/model combine base and extended fields). */
  cpuid?: { family: number; model: number; stepping: number };
  chipId: Buffer;
  committedTcb: Buffer;
  launchTcb: Buffer;
  /** v5: launch and current mitigation vectors. */
  launchMitVector?: bigint;
  currentMitVector?: bigint;
  /** R and S, big-endian, 48 bytes each. */
  signature: { r: Buffer; s: Buffer };
}

const CODES = {
  structure: 'ATTESTATION_REPORT',
  littleEndian: true,
  truncated: 'SNP_REPORT_MALFORMED',
  malformed: 'SNP_REPORT_MALFORMED',
  trailing: 'SNP_REPORT_MALFORMED',
} as const;

/** Reads `n` bytes at absolute offset `off` of the report. */
function at(b: Uint8Array, off: number, n: number): ByteReader {
  return new ByteReader(b.subarray(off, off + n), { ...CODES, base: off });
}

function signatureComponent(b: Uint8Array, off: number, name: string): Buffer {
  const slot = at(b, off, 72);
  const value = slot.bytes(48, name);
  if (slot.bytes(24, `${name} padding`).some((x) => x !== 0)) {
    throw slot.error(
      'SNP_SIGNATURE_MALFORMED',
      `signature slot at 0x${off.toString(16)} has non-zero padding`,
      name,
      off,
    );
  }
  return value.reverse();
}

/**
 * Parses an ATTESTATION_REPORT: exactly 1184 bytes; version in {2, 3, 5} (checked first, before
 * any version-dependent field); the unused high 24 bytes of each signature slot and the
 * reserved bytes after the signature (0x330–0x49F) must be zero.
 * @throws AbiError SNP_REPORT_MALFORMED, SNP_VERSION_UNSUPPORTED, SNP_SIGNATURE_MALFORMED
 */
export function parseSnpReport(bytes: Uint8Array): SnpReport {
  const b = bytes;
  if (b.length !== SNP_REPORT_SIZE) {
    throw new ByteReader(b, CODES).error(
      'SNP_REPORT_MALFORMED',
      `report is ${b.length} bytes, expected ${SNP_REPORT_SIZE}`,
      null,
      0,
    );
  }
  const r = new ByteReader(b, CODES);
  const version = r.u32('VERSION');
  if (!SNP_VERSIONS.includes(version)) {
    throw r.error('SNP_VERSION_UNSUPPORTED', `report version ${version} is not one of 2, 3, 5`, 'VERSION', 0);
  }
  if (b.subarray(0x330, SNP_REPORT_SIZE).some((x) => x !== 0)) {
    throw r.error(
      'SNP_REPORT_MALFORMED',
      'reserved bytes after the signature are not zero',
      'reserved',
      0x330,
    );
  }
  const signature = {
    r: signatureComponent(b, 0x2a0, 'SIGNATURE.R'),
    s: signatureComponent(b, 0x2e8, 'SIGNATURE.S'),
  };
  const guestSvn = r.u32('GUEST_SVN');
  const policy = r.u64('POLICY');
  const familyId = r.bytes(16, 'FAMILY_ID');
  const imageId = r.bytes(16, 'IMAGE_ID');
  const vmpl = r.u32('VMPL');
  const signatureAlgo = r.u32('SIGNATURE_ALGO');
  const currentTcb = r.bytes(8, 'CURRENT_TCB');
  const platformInfo = r.u64('PLATFORM_INFO');
  const signer = r.u32('SIGNER_INFO');
  r.skip(4, 'reserved');
  const report: SnpReport = {
    version,
    guestSvn,
    policy,
    familyId,
    imageId,
    vmpl,
    signatureAlgo,
    currentTcb,
    platformInfo,
    signerInfo: {
      authorKeyEn: (signer & 1) !== 0,
      maskChipKey: (signer & 2) !== 0,
      signingKey: (signer >> 2) & 7,
    },
    reportData: r.bytes(64, 'REPORT_DATA'),
    measurement: r.bytes(48, 'MEASUREMENT'),
    hostData: r.bytes(32, 'HOST_DATA'),
    idKeyDigest: r.bytes(48, 'ID_KEY_DIGEST'),
    authorKeyDigest: r.bytes(48, 'AUTHOR_KEY_DIGEST'),
    reportId: r.bytes(32, 'REPORT_ID'),
    reportIdMa: r.bytes(32, 'REPORT_ID_MA'),
    reportedTcb: r.bytes(8, 'REPORTED_TCB'),
    chipId: at(b, 0x1a0, 64).bytes(64, 'CHIP_ID'),
    committedTcb: at(b, 0x1e0, 8).bytes(8, 'COMMITTED_TCB'),
    launchTcb: at(b, 0x1f0, 8).bytes(8, 'LAUNCH_TCB'),
    signature,
  };
  if (version >= 3) {
    const c = at(b, 0x188, 3);
    report.cpuid = {
      family: c.u8('CPUID_FAM_ID'),
      model: c.u8('CPUID_MOD_ID'),
      stepping: c.u8('CPUID_STEP'),
    };
  }
  if (version >= 5) {
    const m = at(b, 0x1f8, 16);
    report.launchMitVector = m.u64('LAUNCH_MIT_VECTOR');
    report.currentMitVector = m.u64('CURRENT_MIT_VECTOR');
  }
  return report;
}

/** MSG_REPORT_RSP (SEV-SNP ABI 56860 Table 25): status u32, REPORT_SIZE u32, reserved[24], report. */
export interface MsgReportRsp {
  status: number;
  /** The REPORT_SIZE bytes of the report (an ATTESTATION_REPORT, possibly with a trailing area). */
  report: Buffer;
}

/**
 * Parses a MSG_REPORT_RSP as the sev-guest driver returns it (the response buffer may be larger
 * than the message). A non-zero status is returned, not thrown; REPORT_SIZE must be at least
 * the report size and fit the buffer.
 * @throws AbiError SNP_REPORT_MALFORMED
 */
export function parseMsgReportRsp(bytes: Uint8Array): MsgReportRsp {
  const r = new ByteReader(bytes, { ...CODES, structure: 'MSG_REPORT_RSP' });
  const status = r.u32('STATUS');
  if (status !== 0) return { status, report: Buffer.alloc(0) };
  const size = r.u32('REPORT_SIZE');
  r.skip(24, 'reserved');
  if (size < SNP_REPORT_SIZE || size > r.remaining) {
    throw r.error('SNP_REPORT_MALFORMED', `MSG_REPORT_RSP report_size ${size}`, 'REPORT_SIZE', 4);
  }
  return { status, report: r.bytes(size, 'REPORT') };
}
