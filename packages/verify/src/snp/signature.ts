/**
 * SEV-SNP signature and chain layer: the report is parsed (abi/snp), its ECDSA P-384/SHA-384
 * signature over bytes 0x000–0x29F is verified under the VCEK/VLEK, the key's chain must end at
 * the ARK pinned for the product, and the VCEK's extensions must match the report (hwID =
 * CHIP_ID, SPLs = REPORTED_TCB). Sources: SEV-SNP Firmware ABI 56860 Table 22 and "ECDSA
 * Signature Format"; AMD VCEK specification 57230.
 *
 * The product (Milan, Genoa, Turin) comes from configuration, the VCEK productName extension or
 * (v3+) the report's CPUID — never by default; the TCB layout depends on it.
 */
import { AbiError } from '../abi/errors.js';
import {
  parseSnpReport,
  SNP_REPORT_SIZE,
  SNP_SIGNED_END,
  SNP_SIGNING_KEY,
  type SnpReport,
} from '../abi/snp/report.js';
import { decodeSnpTcb, productFromCpuid, type SnpProduct } from '../abi/snp/tcb.js';
import { ecCurveSize, type KeyObject } from '../crypto/keys.js';
import { verifyEcdsaP1363 } from '../crypto/signatures.js';
import {
  type AnchorUsed,
  type CheckResult,
  check,
  fail,
  HARDWARE_ANCHOR_CHECK,
  HARDWARE_SIGNATURE_CHECK,
  pass,
  quoteUntrusted,
  type ReasonCode,
} from '../result.js';
import { rootsFor, type TrustStore } from '../trust.js';
import { type Cert, CertError, certsFromBytes, extensionValue, validateChain } from '../x509.js';
import {
  cspIdExtension,
  productFromName,
  productNameExtension,
  SNP_OID,
  splExtension,
  vlekLeafProblem,
} from './vcek.js';

const P384_N = BigInt(
  '0xffffffffffffffffffffffffffffffffffffffffffffffffc7634d81f4372ddf581a0db248b0a77aecec196accc52973',
);

/** Input of {@link verifySnpSignature}. */
export interface SnpSignatureInput {
  report: Uint8Array;
  /** Certificate files' bytes (DER or PEM, any order): VCEK/VLEK, ASK/ASVK, ARK. */
  certs: readonly Uint8Array[];
  /** Product from configuration; otherwise from the VCEK / report CPUID. */
  product?: SnpProduct;
  trustStore: TrustStore;
  at: Date;
}

/** A report whose signature verified under a VCEK/VLEK. */
export interface VerifiedSnpReport {
  report: SnpReport;
  keyKind: 'VCEK' | 'VLEK';
  leaf: Cert;
}

/** Output of {@link verifySnpSignature}. */
export interface SnpSignatureResult {
  checks: CheckResult[];
  anchors: AnchorUsed[];
  report?: SnpReport;
  product?: SnpProduct;
  verified?: VerifiedSnpReport;
}

/** An AbiError or CertError as a reason code and detail; anything else `fallback`. */
export function errInfo(err: unknown, fallback: ReasonCode): { code: ReasonCode; detail: string } {
  if (err instanceof AbiError || err instanceof CertError) return { code: err.code, detail: err.message };
  return { code: fallback, detail: (err instanceof Error ? err.message : String(err)).slice(0, 120) };
}

const dep = (id: string, what = 'the report did not parse') => fail(id, 'DEPENDENCY_FAILED', what);

/** `snp.report_parse`, `snp.signature_algo`, `snp.signing_key`. */
function reportChecks(bytes: Uint8Array, out: SnpSignatureResult): 'VCEK' | 'VLEK' | null {
  try {
    out.report = parseSnpReport(bytes);
    out.checks.push(
      pass('snp.report_parse', `ATTESTATION_REPORT version ${out.report.version}, ${SNP_REPORT_SIZE} bytes`),
    );
  } catch (err) {
    const e = errInfo(err, 'SNP_REPORT_MALFORMED');
    out.checks.push(fail('snp.report_parse', e.code, e.detail));
  }
  const report = out.report;
  out.checks.push(
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
  out.checks.push(
    !report
      ? dep('snp.signing_key')
      : keyKind
        ? pass('snp.signing_key', `SIGNER_INFO.SIGNING_KEY ${signingKey}: ${keyKind}`)
        : fail('snp.signing_key', 'SNP_SIGNING_KEY_UNSUPPORTED', `SIGNER_INFO.SIGNING_KEY is ${signingKey}`),
  );
  return keyKind;
}

/** `snp.certs_parse`. */
function certChecks(files: readonly Uint8Array[], checks: CheckResult[]): Cert[] | undefined {
  try {
    const certs = files.flatMap((c) => certsFromBytes(c));
    if (certs.length === 0) throw new CertError('CHAIN_NOT_SUPPLIED', 'no certificates supplied');
    checks.push(pass('snp.certs_parse', `${certs.length} certificate(s) parse`));
    return certs;
  } catch (err) {
    const e = errInfo(err, 'CERT_MALFORMED');
    checks.push(fail('snp.certs_parse', e.code, e.detail));
    return undefined;
  }
}

/** `snp.product`: configuration, VCEK productName and report CPUID must agree on one product. */
function productCheck(
  configured: SnpProduct | undefined,
  leaf: Cert | undefined,
  report: SnpReport | undefined,
): CheckResult & { product?: SnpProduct } {
  const sources: string[] = [];
  const seen = new Set<SnpProduct>();
  let problem: { code: ReasonCode; detail: string } | null = null;
  if (configured) {
    seen.add(configured);
    sources.push(`configuration ${configured}`);
  }
  if (leaf) {
    try {
      const name = productNameExtension(leaf);
      if (name !== null) {
        const p = productFromName(name);
        const label = `VCEK productName ${JSON.stringify(name.slice(0, 24))}`;
        if (!p) problem = { code: 'SNP_PRODUCT_UNKNOWN', detail: label };
        else {
          seen.add(p);
          sources.push(label);
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
  if (problem) return fail('snp.product', problem.code, problem.detail);
  if (seen.size > 1) return fail('snp.product', 'SNP_PRODUCT_MISMATCH', sources.join(' vs '));
  if (seen.size === 0) {
    return fail(
      'snp.product',
      'SNP_PRODUCT_UNKNOWN',
      'no product from configuration, VCEK productName or report CPUID (a v2 report does not carry CPUID)',
    );
  }
  const product = [...seen][0] as SnpProduct;
  return { ...pass('snp.product', `${product} (from ${sources.join(', ')})`), product };
}

/** `evidence.signature`: ECDSA P-384/SHA-384 over bytes 0x000–0x29F under the leaf key. */
function signatureCheck(
  bytes: Uint8Array,
  report: SnpReport | undefined,
  certs: Cert[] | undefined,
  leaf: Cert | undefined,
): CheckResult {
  if (!report) return dep(HARDWARE_SIGNATURE_CHECK);
  if (report.signatureAlgo !== 1) {
    return fail(
      HARDWARE_SIGNATURE_CHECK,
      'SNP_SIGNATURE_ALGO_UNSUPPORTED',
      'not verified under an unknown algorithm',
    );
  }
  if (!certs || !leaf) {
    return fail(
      HARDWARE_SIGNATURE_CHECK,
      'DEPENDENCY_FAILED',
      certs ? 'no end-entity (VCEK/VLEK) certificate' : 'certificates did not parse',
    );
  }
  let key: KeyObject;
  try {
    key = leaf.node.publicKey;
  } catch {
    return fail(HARDWARE_SIGNATURE_CHECK, 'SNP_CERT_KEY_INVALID', 'the VCEK/VLEK key does not decode');
  }
  if (ecCurveSize(key) !== 48)
    return fail(HARDWARE_SIGNATURE_CHECK, 'SNP_CERT_KEY_INVALID', 'the VCEK/VLEK key is not EC P-384');
  const r = BigInt(`0x${report.signature.r.toString('hex')}`);
  const s = BigInt(`0x${report.signature.s.toString('hex')}`);
  if (r === 0n || s === 0n || r >= P384_N || s >= P384_N) {
    return fail(HARDWARE_SIGNATURE_CHECK, 'SNP_SIGNATURE_MALFORMED', 'r or s is not in [1, n-1]');
  }
  const signed = Buffer.from(bytes).subarray(0, SNP_SIGNED_END);
  return verifyEcdsaP1363('sha384', signed, key, Buffer.concat([report.signature.r, report.signature.s]))
    ? pass(
        HARDWARE_SIGNATURE_CHECK,
        'ECDSA P-384/SHA-384 over bytes 0x000-0x29F verifies under the VCEK/VLEK key',
      )
    : fail(
        HARDWARE_SIGNATURE_CHECK,
        'SNP_SIGNATURE_INVALID',
        'ECDSA P-384/SHA-384 over bytes 0x000-0x29F does not verify',
      );
}

/** `evidence.anchor` (chain to the product's pinned ARK) and `snp.signer`. */
function chainChecks(
  ordered: Cert[] | undefined,
  certsParsed: boolean,
  product: SnpProduct | undefined,
  keyKind: 'VCEK' | 'VLEK' | null,
  input: SnpSignatureInput,
  out: SnpSignatureResult,
): void {
  const checks = out.checks;
  if (!ordered) {
    checks.push(
      fail(
        HARDWARE_ANCHOR_CHECK,
        certsParsed ? 'CHAIN_INCOMPLETE' : 'DEPENDENCY_FAILED',
        certsParsed ? 'no VCEK/VLEK' : 'certificates did not parse',
      ),
    );
    checks.push(dep('snp.signer', 'certificates or product unavailable'));
    return;
  }
  if (!product) {
    checks.push(
      fail(HARDWARE_ANCHOR_CHECK, 'DEPENDENCY_FAILED', 'the product is unknown, so no ARK can be chosen'),
    );
    checks.push(dep('snp.signer', 'certificates or product unavailable'));
    return;
  }
  const roots = rootsFor(input.trustStore, ['amd-ark'], product);
  const r = validateChain({
    certs: ordered,
    roots,
    otherRoots: input.trustStore.roots.filter((x) => !roots.includes(x)),
    at: input.at,
    what: keyKind ?? 'VCEK',
    usedFor: `sev-snp-${(keyKind ?? 'vcek').toLowerCase()}`,
    ...(keyKind === 'VLEK' ? { leafProfile: vlekLeafProblem } : {}),
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
  if (!keyKind) {
    checks.push(dep('snp.signer', 'SIGNER_INFO names no usable key'));
    return;
  }
  const cn = (c: Cert | undefined) => (c ? (/CN=([^\n,]+)/.exec(c.node.subject)?.[1] ?? '') : '');
  const leafCn = cn(r.path[0]);
  const issuerCn = cn(r.path[1]);
  const wantLeaf = `SEV-${keyKind}`;
  const wantIssuer = keyKind === 'VLEK' ? `SEV-VLEK-${product}` : `SEV-${product}`;
  checks.push(
    leafCn === wantLeaf && (r.path.length < 2 || issuerCn === wantIssuer)
      ? pass(
          'snp.signer',
          `${wantLeaf} issued by ${wantIssuer}, as SIGNER_INFO names${cspIdText(r.path[0], keyKind)}`,
        )
      : fail(
          'snp.signer',
          'SNP_SIGNER_MISMATCH',
          `report names ${keyKind}; certificates are ${JSON.stringify(leafCn.slice(0, 30))} ← ${JSON.stringify(issuerCn.slice(0, 30))}`,
        ),
  );
}

/** `; CSP-ID "…"` for a VLEK leaf that carries one. */
function cspIdText(leaf: Cert | undefined, keyKind: 'VCEK' | 'VLEK'): string {
  if (keyKind !== 'VLEK' || !leaf) return '';
  try {
    const id = cspIdExtension(leaf);
    return id ? `; CSP-ID ${quoteUntrusted(id, 60)}` : '';
  } catch {
    return '';
  }
}

/** `snp.hwid`: the VCEK hwID extension equals CHIP_ID (not for a VLEK or MASK_CHIP_KEY). */
function hwidCheck(
  report: SnpReport,
  leaf: Cert,
  keyKind: 'VCEK' | 'VLEK' | null,
  product: SnpProduct | undefined,
): CheckResult {
  if (keyKind === 'VLEK')
    return check('snp.hwid', 'not-applicable', 'NO_POLICY', 'a VLEK is not bound to a chip ID');
  if (report.signerInfo.maskChipKey) {
    return check(
      'snp.hwid',
      'not-applicable',
      'NO_POLICY',
      'MASK_CHIP_KEY is set: CHIP_ID is zero by design',
    );
  }
  const v = extensionValue(leaf, SNP_OID.hwID);
  if (!v) return fail('snp.hwid', 'SNP_HWID_MISMATCH', 'the VCEK has no hwID extension');
  const want = product === 'Turin' && v.length === 8 ? report.chipId.subarray(0, 8) : report.chipId;
  return v.equals(want)
    ? pass('snp.hwid', `VCEK hwID equals CHIP_ID (${v.length} bytes)`)
    : fail(
        'snp.hwid',
        'SNP_HWID_MISMATCH',
        `VCEK hwID ${v.toString('hex').slice(0, 16)}… ≠ CHIP_ID ${report.chipId.toString('hex').slice(0, 16)}…`,
      );
}

/** `snp.tcb`: the VCEK SPL extensions equal REPORTED_TCB decoded with the product's layout. */
function tcbCheck(report: SnpReport, leaf: Cert, product: SnpProduct | undefined): CheckResult {
  if (!product) return dep('snp.tcb', 'the product is unknown, so the TCB layout is unknown');
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
    return bad.length
      ? fail(
          'snp.tcb',
          'SNP_TCB_MISMATCH',
          `VCEK SPLs vs REPORTED_TCB (${product} layout): ${bad.join(', ')}`,
        )
      : pass('snp.tcb', `VCEK SPLs equal REPORTED_TCB (${product} layout: ${JSON.stringify(t)})`);
  } catch (err) {
    const e = errInfo(err, 'CERT_MALFORMED');
    return fail('snp.tcb', e.code, e.detail);
  }
}

/**
 * Checks, in order (ids stable): `snp.report_parse`, `snp.signature_algo`, `snp.signing_key`,
 * `snp.certs_parse`, `snp.product`, `evidence.signature`, `evidence.anchor`, `snp.signer`,
 * `snp.hwid`, `snp.tcb`. A check whose input did not parse fails; it is never skipped.
 */
export function verifySnpSignature(input: SnpSignatureInput): SnpSignatureResult {
  const out: SnpSignatureResult = { checks: [], anchors: [] };
  const keyKind = reportChecks(input.report, out);
  const report = out.report;
  const certs = certChecks(input.certs, out.checks);
  // the leaf: the first certificate that is not a CA; then the others
  const leaf = certs?.find((c) => !c.node.ca);
  const ordered = leaf && certs ? [leaf, ...certs.filter((c) => c !== leaf)] : undefined;
  const p = productCheck(input.product, leaf, report);
  const { product, ...productResult } = p;
  out.checks.push(productResult);
  if (product) out.product = product;
  const sig = signatureCheck(input.report, report, certs, leaf);
  out.checks.push(sig);
  chainChecks(ordered, certs !== undefined, product, keyKind, input, out);
  if (!report || !leaf) {
    const why = !report ? 'the report did not parse' : 'no VCEK/VLEK certificate';
    out.checks.push(dep('snp.hwid', why), dep('snp.tcb', why));
  } else {
    out.checks.push(hwidCheck(report, leaf, keyKind, product), tcbCheck(report, leaf, product));
  }
  if (sig.status === 'pass' && report && leaf && keyKind) out.verified = { report, keyKind, leaf };
  return out;
}
