/**
 * AMD SEV-SNP attestation report verification (SEV-SNP Firmware ABI specification,
 * "ATTESTATION_REPORT Structure" and "ECDSA Signature Format"; AMD VCEK/VLEK certificate
 * specification for the X.509 extensions).
 *
 * - Report versions are allow-listed (2, 3, 5); an unknown version is refused before any
 *   version-dependent field is read.
 * - The signature is ECDSA P-384 with SHA-384 over bytes 0x000–0x29F. R and S are stored
 *   little-endian in 72-byte slots (48 bytes used, the rest zero) at 0x2A0 and 0x2E8.
 * - The key is the VCEK (SIGNER_INFO.SIGNING_KEY = 0, chain VCEK ← ASK ← ARK) or the VLEK
 *   (= 1, chain VLEK ← ASVK ← ARK); the ARK must be pinned for the product.
 * - The product (Milan, Genoa, Turin) comes from configuration, the VCEK productName
 *   extension or (v3+) the report's CPUID — never by default; the TCB layout depends on it.
 */
import { createPublicKey, verify as cryptoVerify, type KeyObject } from 'node:crypto';
import * as asn1js from 'asn1js';
import {
  type AnchorUsed,
  type CheckResult,
  check,
  fail,
  HARDWARE_ANCHOR_CHECK,
  HARDWARE_BINDING_CHECK,
  HARDWARE_SIGNATURE_CHECK,
  pass,
  type ReasonCode,
} from './result.js';
import {
  type ReferenceValues,
  rootsFor,
  SNP_PRODUCTS,
  type SnpProduct,
  type SnpTcbMinimum,
  type TrustStore,
} from './trust.js';
import { type Cert, CertError, certsFromBytes, extensionValue, validateChain } from './x509.js';

/** Size of ATTESTATION_REPORT. */
export const SNP_REPORT_SIZE = 0x4a0;
/** End (exclusive) of the signed part of the report. */
export const SNP_SIGNED_END = 0x2a0;
/** Report versions this verifier understands. */
export const SNP_VERSIONS: readonly number[] = [2, 3, 5];

const P384_N = BigInt(
  '0xffffffffffffffffffffffffffffffffffffffffffffffffc7634d81f4372ddf581a0db248b0a77aecec196accc52973',
);

/** A report that cannot be used; `code` is a stable reason. */
export class SnpParseError extends Error {
  constructor(
    readonly code: ReasonCode,
    message: string,
  ) {
    super(message);
    this.name = 'SnpParseError';
  }
}

/** SIGNER_INFO.SIGNING_KEY values. */
export const SNP_SIGNING_KEY = { VCEK: 0, VLEK: 1, NONE: 7 } as const;

/** Parsed ATTESTATION_REPORT (all integers little-endian). */
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

/** POLICY bit 19: DEBUG allowed. */
export const SNP_POLICY_DEBUG = 1n << 19n;

/**
 * Parses an ATTESTATION_REPORT: exactly 1184 bytes; version in {2, 3, 5} (checked first);
 * the unused high 24 bytes of each signature slot and the reserved bytes after the signature
 * must be zero.
 * @throws SnpParseError SNP_REPORT_MALFORMED, SNP_VERSION_UNSUPPORTED, SNP_SIGNATURE_MALFORMED
 */
export function parseSnpReport(bytes: Uint8Array): SnpReport {
  const b = Buffer.from(bytes);
  if (b.length !== SNP_REPORT_SIZE) {
    throw new SnpParseError(
      'SNP_REPORT_MALFORMED',
      `report is ${b.length} bytes, expected ${SNP_REPORT_SIZE}`,
    );
  }
  const version = b.readUInt32LE(0);
  if (!SNP_VERSIONS.includes(version)) {
    throw new SnpParseError('SNP_VERSION_UNSUPPORTED', `report version ${version} is not one of 2, 3, 5`);
  }
  const slice = (off: number, n: number) => Buffer.from(b.subarray(off, off + n));
  const le48 = (off: number) => {
    if (b.subarray(off + 48, off + 72).some((x) => x !== 0)) {
      throw new SnpParseError(
        'SNP_SIGNATURE_MALFORMED',
        `signature slot at 0x${off.toString(16)} has non-zero padding`,
      );
    }
    return slice(off, 48).reverse();
  };
  if (b.subarray(0x330, SNP_REPORT_SIZE).some((x) => x !== 0)) {
    throw new SnpParseError('SNP_REPORT_MALFORMED', 'reserved bytes after the signature are not zero');
  }
  const signerInfo = b.readUInt32LE(0x48);
  const report: SnpReport = {
    version,
    guestSvn: b.readUInt32LE(0x04),
    policy: b.readBigUInt64LE(0x08),
    familyId: slice(0x10, 16),
    imageId: slice(0x20, 16),
    vmpl: b.readUInt32LE(0x30),
    signatureAlgo: b.readUInt32LE(0x34),
    currentTcb: slice(0x38, 8),
    platformInfo: b.readBigUInt64LE(0x40),
    signerInfo: {
      authorKeyEn: (signerInfo & 1) !== 0,
      maskChipKey: (signerInfo & 2) !== 0,
      signingKey: (signerInfo >> 2) & 7,
    },
    reportData: slice(0x50, 64),
    measurement: slice(0x90, 48),
    hostData: slice(0xc0, 32),
    idKeyDigest: slice(0xe0, 48),
    authorKeyDigest: slice(0x110, 48),
    reportId: slice(0x140, 32),
    reportIdMa: slice(0x160, 32),
    reportedTcb: slice(0x180, 8),
    chipId: slice(0x1a0, 64),
    committedTcb: slice(0x1e0, 8),
    launchTcb: slice(0x1f0, 8),
    signature: { r: le48(0x2a0), s: le48(0x2e8) },
  };
  if (version >= 3) {
    report.cpuid = { family: b.readUInt8(0x188), model: b.readUInt8(0x189), stepping: b.readUInt8(0x18a) };
  }
  if (version >= 5) {
    report.launchMitVector = b.readBigUInt64LE(0x1f8);
    report.currentMitVector = b.readBigUInt64LE(0x200);
  }
  return report;
}

/** TCB components decoded with the product's layout. */
export interface SnpTcb {
  fmc?: number;
  bootloader: number;
  tee: number;
  snp: number;
  microcode: number;
}

/**
 * Decodes an 8-byte TCB_VERSION with the product's layout: Milan/Genoa [0] bootloader,
 * [1] TEE, [6] SNP, [7] microcode; Turin [0] FMC, [1] bootloader, [2] TEE, [3] SNP, [7] microcode.
 */
export function decodeSnpTcb(tcb: Uint8Array, product: SnpProduct): SnpTcb {
  const at = (i: number) => tcb[i] ?? 0;
  if (product === 'Turin') return { fmc: at(0), bootloader: at(1), tee: at(2), snp: at(3), microcode: at(7) };
  return { bootloader: at(0), tee: at(1), snp: at(6), microcode: at(7) };
}

/** Product from a v3+ report's CPUID (family 19h: Milan models 00–0Fh, Genoa 10–1Fh/A0–AFh; family 1Ah: Turin). */
export function productFromCpuid(cpuid: { family: number; model: number }): SnpProduct | null {
  if (cpuid.family === 0x19 && cpuid.model < 0x10) return 'Milan';
  if (cpuid.family === 0x19 && ((cpuid.model >= 0x10 && cpuid.model < 0x20) || cpuid.model >= 0xa0))
    return 'Genoa';
  if (cpuid.family === 0x1a) return 'Turin';
  return null;
}

/** AMD VCEK/VLEK extension OIDs (AMD "Versioned Chip Endorsement Key" specification). */
export const SNP_OID = {
  structVersion: '1.3.6.1.4.1.3704.1.1',
  productName: '1.3.6.1.4.1.3704.1.2',
  blSPL: '1.3.6.1.4.1.3704.1.3.1',
  teeSPL: '1.3.6.1.4.1.3704.1.3.2',
  snpSPL: '1.3.6.1.4.1.3704.1.3.3',
  ucodeSPL: '1.3.6.1.4.1.3704.1.3.8',
  fmcSPL: '1.3.6.1.4.1.3704.1.3.9',
  hwID: '1.3.6.1.4.1.3704.1.4',
  cspID: '1.3.6.1.4.1.3704.1.5',
} as const;

function derValue(v: Buffer): asn1js.AsnType {
  const r = asn1js.fromBER(new Uint8Array(v));
  if (r.offset !== v.length || r.result.error)
    throw new CertError('CERT_MALFORMED', 'extension value is not DER');
  return r.result;
}

/** A DER INTEGER extension value (0–255), or null when absent. @throws CertError */
export function splExtension(c: Cert, oid: string): number | null {
  const v = extensionValue(c, oid);
  if (!v) return null;
  const d = derValue(v);
  if (!(d instanceof asn1js.Integer)) throw new CertError('CERT_MALFORMED', `${oid} is not an INTEGER`);
  const n = d.valueBlock.valueDec;
  if (!Number.isInteger(n) || n < 0 || n > 255) throw new CertError('CERT_MALFORMED', `${oid} out of range`);
  return n;
}

/** The VCEK/VLEK productName (IA5String, e.g. "Milan-B0"), or null. @throws CertError */
export function productNameExtension(c: Cert): string | null {
  const v = extensionValue(c, SNP_OID.productName);
  if (!v) return null;
  const d = derValue(v);
  if (!(d instanceof asn1js.IA5String))
    throw new CertError('CERT_MALFORMED', 'productName is not an IA5String');
  return d.valueBlock.value;
}

/** Product family of a productName ("Milan-B0" → Milan). */
export function productFromName(name: string): SnpProduct | null {
  const head = name.split('-')[0] ?? '';
  return (SNP_PRODUCTS as readonly string[]).includes(head) ? (head as SnpProduct) : null;
}

/** Input of {@link verifySnpReport}. */
export interface SnpInput {
  report: Uint8Array;
  /** Certificate files' bytes (DER or PEM, any order): VCEK/VLEK, ASK/ASVK, ARK. */
  certs: readonly Uint8Array[];
  /** Product from configuration; otherwise from the VCEK / report CPUID. */
  product?: SnpProduct;
  /** Expected REPORT_DATA (64 bytes), compared exactly; null/undefined ⇒ not-applicable. */
  expectedReportData?: Uint8Array | null;
  referenceValues?: ReferenceValues;
  trustStore: TrustStore;
  at: Date;
}

/** Result of {@link verifySnpReport}. */
export interface SnpResult {
  checks: CheckResult[];
  anchors: AnchorUsed[];
  report?: SnpReport;
  product?: SnpProduct;
}

function errInfo(err: unknown, fallback: ReasonCode): { code: ReasonCode; detail: string } {
  if (err instanceof SnpParseError || err instanceof CertError)
    return { code: err.code, detail: err.message };
  return { code: fallback, detail: (err instanceof Error ? err.message : String(err)).slice(0, 120) };
}

function isCa(c: Cert): boolean {
  return c.node.ca;
}

/**
 * Verifies a SEV-SNP report and returns one check per property, in this order (ids stable):
 * `snp.report_parse`, `snp.signature_algo`, `snp.signing_key`, `snp.certs_parse`, `snp.product`,
 * `evidence.signature`, `evidence.anchor`, `snp.signer`, `snp.hwid`, `snp.tcb`,
 * `evidence.binding`, `snp.debug`, `snp.vmpl`, `snp.minimum_tcb`, `snp.measurement`,
 * `snp.host_data`. A check whose input did not parse fails; it is never skipped.
 */
export function verifySnpReport(input: SnpInput): SnpResult {
  const checks: CheckResult[] = [];
  const out: SnpResult = { checks, anchors: [] };
  const rv = input.referenceValues?.sev_snp;

  // report
  let report: SnpReport | undefined;
  try {
    report = parseSnpReport(input.report);
    out.report = report;
    checks.push(
      pass('snp.report_parse', `ATTESTATION_REPORT version ${report.version}, ${SNP_REPORT_SIZE} bytes`),
    );
  } catch (err) {
    const e = errInfo(err, 'SNP_REPORT_MALFORMED');
    checks.push(fail('snp.report_parse', e.code, e.detail));
  }
  const dep = (id: string, what = 'the report did not parse') => fail(id, 'DEPENDENCY_FAILED', what);
  checks.push(
    !report
      ? dep('snp.signature_algo')
      : report.signatureAlgo === 1
        ? pass('snp.signature_algo', 'SIGNATURE_ALGO 1: ECDSA P-384 with SHA-384')
        : fail(
            'snp.signature_algo',
            'SNP_SIGNATURE_ALGO_UNSUPPORTED',
            `SIGNATURE_ALGO is ${report.signatureAlgo}`,
          ),
  );
  const signingKey = report?.signerInfo.signingKey;
  const keyKind =
    signingKey === SNP_SIGNING_KEY.VCEK ? 'VCEK' : signingKey === SNP_SIGNING_KEY.VLEK ? 'VLEK' : null;
  checks.push(
    !report
      ? dep('snp.signing_key')
      : keyKind
        ? pass('snp.signing_key', `SIGNER_INFO.SIGNING_KEY ${signingKey}: ${keyKind}`)
        : fail('snp.signing_key', 'SNP_SIGNING_KEY_UNSUPPORTED', `SIGNER_INFO.SIGNING_KEY is ${signingKey}`),
  );

  // certificates
  let certs: Cert[] | undefined;
  try {
    certs = input.certs.flatMap((c) => certsFromBytes(c));
    if (certs.length === 0) throw new CertError('CHAIN_NOT_SUPPLIED', 'no certificates supplied');
    checks.push(pass('snp.certs_parse', `${certs.length} certificate(s) parse`));
  } catch (err) {
    const e = errInfo(err, 'CERT_MALFORMED');
    checks.push(fail('snp.certs_parse', e.code, e.detail));
  }
  // the leaf: the first certificate that is not a CA; then the others
  const leaf = certs?.find((c) => !isCa(c));
  const ordered = leaf && certs ? [leaf, ...certs.filter((c) => c !== leaf)] : undefined;

  // product
  let product: SnpProduct | undefined;
  {
    const sources: string[] = [];
    const seen = new Set<SnpProduct>();
    let problem: { code: ReasonCode; detail: string } | null = null;
    if (input.product) {
      seen.add(input.product);
      sources.push(`configuration ${input.product}`);
    }
    if (leaf) {
      try {
        const name = productNameExtension(leaf);
        if (name !== null) {
          const p = productFromName(name);
          if (!p)
            problem = {
              code: 'SNP_PRODUCT_UNKNOWN',
              detail: `VCEK productName ${JSON.stringify(name.slice(0, 24))}`,
            };
          else {
            seen.add(p);
            sources.push(`VCEK productName ${JSON.stringify(name.slice(0, 24))}`);
          }
        }
      } catch (err) {
        problem = errInfo(err, 'CERT_MALFORMED');
      }
    }
    if (report?.cpuid && (report.cpuid.family !== 0 || report.cpuid.model !== 0)) {
      const p = productFromCpuid(report.cpuid);
      if (p) {
        seen.add(p);
        sources.push(`report CPUID ${report.cpuid.family.toString(16)}h/${report.cpuid.model.toString(16)}h`);
      }
    }
    if (problem) checks.push(fail('snp.product', problem.code, problem.detail));
    else if (seen.size > 1) checks.push(fail('snp.product', 'SNP_PRODUCT_MISMATCH', sources.join(' vs ')));
    else if (seen.size === 0) {
      checks.push(
        fail(
          'snp.product',
          'SNP_PRODUCT_UNKNOWN',
          'no product from configuration, VCEK productName or report CPUID (a v2 report does not carry CPUID)',
        ),
      );
    } else {
      product = [...seen][0] as SnpProduct;
      out.product = product;
      checks.push(pass('snp.product', `${product} (from ${sources.join(', ')})`));
    }
  }

  // signature
  let leafKey: KeyObject | undefined;
  if (leaf) {
    const k = leaf.node.publicKey;
    if (k.asymmetricKeyType === 'ec' && k.asymmetricKeyDetails?.namedCurve === 'secp384r1') leafKey = k;
  }
  if (!report) checks.push(dep(HARDWARE_SIGNATURE_CHECK));
  else if (report.signatureAlgo !== 1) {
    checks.push(
      fail(
        HARDWARE_SIGNATURE_CHECK,
        'SNP_SIGNATURE_ALGO_UNSUPPORTED',
        'not verified under an unknown algorithm',
      ),
    );
  } else if (!certs || !leaf) {
    checks.push(
      fail(
        HARDWARE_SIGNATURE_CHECK,
        'DEPENDENCY_FAILED',
        certs ? 'no end-entity (VCEK/VLEK) certificate' : 'certificates did not parse',
      ),
    );
  } else if (!leafKey) {
    checks.push(fail(HARDWARE_SIGNATURE_CHECK, 'SNP_CERT_KEY_INVALID', 'the VCEK/VLEK key is not EC P-384'));
  } else {
    const r = BigInt(`0x${report.signature.r.toString('hex')}`);
    const s = BigInt(`0x${report.signature.s.toString('hex')}`);
    if (r === 0n || s === 0n || r >= P384_N || s >= P384_N) {
      checks.push(fail(HARDWARE_SIGNATURE_CHECK, 'SNP_SIGNATURE_MALFORMED', 'r or s is not in [1, n-1]'));
    } else {
      const ok = cryptoVerify(
        'sha384',
        Buffer.from(input.report).subarray(0, SNP_SIGNED_END),
        { key: leafKey, dsaEncoding: 'ieee-p1363' },
        Buffer.concat([report.signature.r, report.signature.s]),
      );
      checks.push(
        ok
          ? pass(
              HARDWARE_SIGNATURE_CHECK,
              'ECDSA P-384/SHA-384 over bytes 0x000-0x29F verifies under the VCEK/VLEK key',
            )
          : fail(
              HARDWARE_SIGNATURE_CHECK,
              'SNP_SIGNATURE_INVALID',
              'ECDSA P-384/SHA-384 over bytes 0x000-0x29F does not verify',
            ),
      );
    }
  }

  // chain to the product's pinned ARK
  if (!ordered) {
    checks.push(
      fail(
        HARDWARE_ANCHOR_CHECK,
        certs ? 'CHAIN_INCOMPLETE' : 'DEPENDENCY_FAILED',
        certs ? 'no VCEK/VLEK' : 'certificates did not parse',
      ),
    );
  } else if (!product) {
    checks.push(
      fail(HARDWARE_ANCHOR_CHECK, 'DEPENDENCY_FAILED', 'the product is unknown, so no ARK can be chosen'),
    );
  } else {
    const roots = rootsFor(input.trustStore, ['amd-ark'], product);
    const r = validateChain({
      certs: ordered,
      roots,
      otherRoots: input.trustStore.roots.filter((x) => !roots.includes(x)),
      at: input.at,
      what: keyKind ?? 'VCEK',
      usedFor: `sev-snp-${(keyKind ?? 'vcek').toLowerCase()}`,
    });
    if (r.status === 'anchored') {
      out.anchors.push(r.anchor);
      checks.push(pass(HARDWARE_ANCHOR_CHECK, `${r.detail} (ARK for ${product})`));
    } else if (r.status === 'unpinned') {
      checks.push(
        r.code === 'ANCHOR_PURPOSE_MISMATCH'
          ? fail(HARDWARE_ANCHOR_CHECK, r.code, r.detail)
          : check(HARDWARE_ANCHOR_CHECK, 'absent', r.code, r.detail),
      );
    } else checks.push(fail(HARDWARE_ANCHOR_CHECK, r.code, r.detail));

    // signer kind: the leaf and its issuer must be the kind SIGNER_INFO names
    if (!keyKind) checks.push(dep('snp.signer', 'SIGNER_INFO names no usable key'));
    else {
      const cn = (c: Cert | undefined) => (c ? (/CN=([^\n,]+)/.exec(c.node.subject)?.[1] ?? '') : '');
      const leafCn = cn(r.path[0]);
      const issuerCn = cn(r.path[1]);
      const wantLeaf = `SEV-${keyKind}`;
      const wantIssuer = keyKind === 'VLEK' ? `SEV-VLEK-${product}` : `SEV-${product}`;
      checks.push(
        leafCn === wantLeaf && (r.path.length < 2 || issuerCn === wantIssuer)
          ? pass('snp.signer', `${wantLeaf} issued by ${wantIssuer}, as SIGNER_INFO names`)
          : fail(
              'snp.signer',
              'SNP_SIGNER_MISMATCH',
              `report names ${keyKind}; certificates are ${JSON.stringify(leafCn.slice(0, 30))} ← ${JSON.stringify(issuerCn.slice(0, 30))}`,
            ),
      );
    }
  }
  if (!ordered || !product) {
    if (!checks.some((c) => c.id === 'snp.signer'))
      checks.push(dep('snp.signer', 'certificates or product unavailable'));
  }

  // VCEK extensions against the report
  const extProblem = (): { hw: CheckResult; tcb: CheckResult } => {
    if (!report || !leaf) {
      const why = !report ? 'the report did not parse' : 'no VCEK/VLEK certificate';
      return { hw: dep('snp.hwid', why), tcb: dep('snp.tcb', why) };
    }
    let hw: CheckResult;
    if (keyKind === 'VLEK') {
      hw = check('snp.hwid', 'not-applicable', 'NO_POLICY', 'a VLEK is not bound to a chip ID');
    } else if (report.signerInfo.maskChipKey) {
      hw = check(
        'snp.hwid',
        'not-applicable',
        'NO_POLICY',
        'MASK_CHIP_KEY is set: CHIP_ID is zero by design',
      );
    } else {
      const v = extensionValue(leaf, SNP_OID.hwID);
      if (!v) hw = fail('snp.hwid', 'SNP_HWID_MISMATCH', 'the VCEK has no hwID extension');
      else {
        const want = product === 'Turin' && v.length === 8 ? report.chipId.subarray(0, 8) : report.chipId;
        hw = v.equals(want)
          ? pass('snp.hwid', `VCEK hwID equals CHIP_ID (${v.length} bytes)`)
          : fail(
              'snp.hwid',
              'SNP_HWID_MISMATCH',
              `VCEK hwID ${v.toString('hex').slice(0, 16)}… ≠ CHIP_ID ${report.chipId.toString('hex').slice(0, 16)}…`,
            );
      }
    }
    let tcb: CheckResult;
    if (!product) tcb = dep('snp.tcb', 'the product is unknown, so the TCB layout is unknown');
    else {
      try {
        const t = decodeSnpTcb(report.reportedTcb, product);
        const pairs: [string, string, number | undefined][] = [
          ['bootloader', SNP_OID.blSPL, t.bootloader],
          ['tee', SNP_OID.teeSPL, t.tee],
          ['snp', SNP_OID.snpSPL, t.snp],
          ['microcode', SNP_OID.ucodeSPL, t.microcode],
        ];
        if (product === 'Turin') pairs.push(['fmc', SNP_OID.fmcSPL, t.fmc]);
        const bad: string[] = [];
        for (const [name, oid, want] of pairs) {
          const got = splExtension(leaf, oid);
          if (got === null) bad.push(`${name} missing`);
          else if (got !== want) bad.push(`${name} ${got}≠${want}`);
        }
        tcb = bad.length
          ? fail(
              'snp.tcb',
              'SNP_TCB_MISMATCH',
              `VCEK SPLs vs REPORTED_TCB (${product} layout): ${bad.join(', ')}`,
            )
          : pass('snp.tcb', `VCEK SPLs equal REPORTED_TCB (${product} layout: ${JSON.stringify(t)})`);
      } catch (err) {
        const e = errInfo(err, 'CERT_MALFORMED');
        tcb = fail('snp.tcb', e.code, e.detail);
      }
    }
    return { hw, tcb };
  };
  const ext = extProblem();
  checks.push(ext.hw, ext.tcb);

  // binding
  if (input.expectedReportData == null) {
    checks.push(
      check(HARDWARE_BINDING_CHECK, 'not-applicable', 'NOT_SUPPLIED', 'no expected REPORT_DATA supplied'),
    );
  } else if (!report) checks.push(dep(HARDWARE_BINDING_CHECK));
  else {
    const want = Buffer.from(input.expectedReportData);
    checks.push(
      want.length === 64 && report.reportData.equals(want)
        ? pass(HARDWARE_BINDING_CHECK, 'REPORT_DATA equals the expected 64 bytes')
        : fail(
            HARDWARE_BINDING_CHECK,
            'EVIDENCE_BINDING_MISMATCH',
            `REPORT_DATA ${report.reportData.toString('hex').slice(0, 16)}… is not the expected ${want.length}-byte value`,
          ),
    );
  }

  // platform policy
  if (!report) {
    for (const id of ['snp.debug', 'snp.vmpl', 'snp.minimum_tcb', 'snp.measurement', 'snp.host_data'])
      checks.push(dep(id));
    return out;
  }
  const debug = (report.policy & SNP_POLICY_DEBUG) !== 0n;
  checks.push(
    !debug
      ? pass('snp.debug', 'POLICY.DEBUG is clear')
      : rv?.allow_debug
        ? pass('snp.debug', 'POLICY.DEBUG is set; the reference values allow debug')
        : fail(
            'snp.debug',
            'SNP_DEBUG_ENABLED',
            `POLICY 0x${report.policy.toString(16)} has DEBUG (bit 19) set`,
          ),
  );
  checks.push(
    !rv?.vmpl
      ? check('snp.vmpl', 'not-applicable', 'NO_POLICY', `VMPL ${report.vmpl}; no VMPL requirement`)
      : rv.vmpl.includes(report.vmpl)
        ? pass('snp.vmpl', `VMPL ${report.vmpl} is allowed`)
        : fail('snp.vmpl', 'SNP_VMPL_NOT_ALLOWED', `VMPL ${report.vmpl} is not one of ${rv.vmpl.join(', ')}`),
  );
  const min: SnpTcbMinimum | undefined = product ? rv?.minimum_tcb?.[product] : undefined;
  if (!product) checks.push(dep('snp.minimum_tcb', 'the product is unknown, so the TCB layout is unknown'));
  else if (!min)
    checks.push(check('snp.minimum_tcb', 'not-applicable', 'NO_POLICY', `no minimum TCB for ${product}`));
  else {
    const t = decodeSnpTcb(report.reportedTcb, product);
    const low = (Object.keys(min) as (keyof SnpTcbMinimum)[]).filter((k) => {
      const want = min[k];
      const got = t[k];
      return want !== undefined && (got === undefined || got < want);
    });
    checks.push(
      low.length
        ? fail(
            'snp.minimum_tcb',
            'SNP_TCB_TOO_LOW',
            `REPORTED_TCB ${JSON.stringify(t)} below minimum ${JSON.stringify(min)} (${product}): ${low.join(', ')}`,
          )
        : pass('snp.minimum_tcb', `REPORTED_TCB ${JSON.stringify(t)} ≥ minimum for ${product}`),
    );
  }
  const mhex = report.measurement.toString('hex');
  checks.push(
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
  );
  const hhex = report.hostData.toString('hex');
  checks.push(
    !rv?.host_data
      ? check('snp.host_data', 'not-applicable', 'NO_POLICY', 'no expected HOST_DATA')
      : rv.host_data.includes(hhex)
        ? pass('snp.host_data', 'HOST_DATA is expected')
        : fail('snp.host_data', 'MEASUREMENT_NOT_ALLOWED', `HOST_DATA ${hhex} is not an expected value`),
  );
  return out;
}

/** Builds an EC P-384 key from big-endian X and Y (for tests and tools). */
export function p384Key(x: Uint8Array, y: Uint8Array): KeyObject {
  return createPublicKey({
    key: {
      kty: 'EC',
      crv: 'P-384',
      x: Buffer.from(x).toString('base64url'),
      y: Buffer.from(y).toString('base64url'),
    },
    format: 'jwk',
  });
}
