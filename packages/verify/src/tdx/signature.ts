/**
 * TDX signature and chain layer: the quote is parsed (abi/tdx), its ECDSA P-256 signature over
 * the header and body is verified under the attestation key, the QE report must be signed by
 * the PCK and bind the attestation key (REPORTDATA = SHA-256(key ‖ QE auth data) ‖ 0^32), and
 * the PCK chain must end at the pinned Intel SGX root. Sources: Intel TDX DCAP Quoting Library
 * API Appendix A; SGX DCAP ECDSA Quote Library API ("QE Report Data").
 */
import { AbiError } from '../abi/errors.js';
import { parseTdxQuote, type TdxQuote } from '../abi/tdx/quote.js';
import { digest } from '../crypto/hash.js';
import { ecPublicKey, type KeyObject } from '../crypto/keys.js';
import { verifyEcdsaP1363 } from '../crypto/signatures.js';
import {
  type AnchorUsed,
  type CheckResult,
  check,
  fail,
  HARDWARE_ANCHOR_CHECK,
  HARDWARE_SIGNATURE_CHECK,
  pass,
  type ReasonCode,
} from '../result.js';
import { rootsFor, type TrustStore } from '../trust.js';
import { type Cert, CertError, parseCert, pemBlocks, validateChain } from '../x509.js';
import { pckLeafProblem } from './pck.js';

/** Intel's QE vendor id. */
export const INTEL_QE_VENDOR_ID = '939a7233f79c4ca9940a0db3957f0607';

/** A quote whose signature verified under its attestation key. */
export interface VerifiedTdxQuote {
  quote: TdxQuote;
  attestationKey: KeyObject;
}

/** Output of {@link verifyTdxSignature}. */
export interface TdxSignatureResult {
  checks: CheckResult[];
  anchors: AnchorUsed[];
  quote?: TdxQuote;
  /** The validated PCK path, leaf first (when `evidence.anchor` anchored it). */
  pckPath?: Cert[];
  verified?: VerifiedTdxQuote;
}

/** An AbiError or CertError as a reason code and detail; anything else `fallback`. */
function errInfo(err: unknown, fallback: ReasonCode): { code: ReasonCode; detail: string } {
  if (err instanceof AbiError || err instanceof CertError) return { code: err.code, detail: err.message };
  return { code: fallback, detail: (err instanceof Error ? err.message : String(err)).slice(0, 120) };
}

function attestationKeyChecks(q: TdxQuote, checks: CheckResult[]): KeyObject | undefined {
  const k =
    q.attestationKey.length === 64
      ? ecPublicKey(q.attestationKey.subarray(0, 32), q.attestationKey.subarray(32, 64), 32)
      : null;
  if (!k?.ok) {
    checks.push(
      fail(
        'tdx.attestation_key',
        'TDX_ATTESTATION_KEY_INVALID',
        'the attestation key is not a point on P-256',
      ),
    );
    checks.push(fail(HARDWARE_SIGNATURE_CHECK, 'DEPENDENCY_FAILED', 'the attestation key is invalid'));
    return undefined;
  }
  checks.push(pass('tdx.attestation_key', 'the attestation key is a P-256 point'));
  const n = q.signedRegion.length;
  checks.push(
    verifyEcdsaP1363('sha256', q.signedRegion, k.key, q.signature)
      ? pass(
          HARDWARE_SIGNATURE_CHECK,
          `ECDSA P-256 quote signature over bytes [0, ${n}) verifies under the attestation key`,
        )
      : fail(
          HARDWARE_SIGNATURE_CHECK,
          'TDX_QUOTE_SIGNATURE_INVALID',
          `the quote signature over bytes [0, ${n}) does not verify`,
        ),
  );
  return k.key;
}

/** `tdx.pck_certs_parse`, `tdx.qe_report_signature`, `tdx.qe_report_data`. */
function qeChecks(q: TdxQuote, checks: CheckResult[]): Cert[] | undefined {
  let pckCerts: Cert[] | undefined;
  try {
    pckCerts = pemBlocks(q.pckChainPem, 'CERTIFICATE', true).map(parseCert);
    const nul = q.pckChainNulTerminated ? ' (NUL-terminated, as Intel DCAP writes it)' : '';
    checks.push(pass('tdx.pck_certs_parse', `PCK chain: ${pckCerts.length} certificate(s)${nul}`));
  } catch (err) {
    const e = errInfo(err, 'CERT_MALFORMED');
    checks.push(fail('tdx.pck_certs_parse', e.code, e.detail));
  }
  const pck = pckCerts?.[0];
  if (!pck) checks.push(fail('tdx.qe_report_signature', 'DEPENDENCY_FAILED', 'the PCK chain did not parse'));
  else {
    let ok = false;
    try {
      ok = verifyEcdsaP1363('sha256', q.qeReport.raw, pck.node.publicKey, q.qeReportSignature);
    } catch {
      ok = false; // the PCK certificate's key does not decode
    }
    checks.push(
      ok
        ? pass('tdx.qe_report_signature', 'the QE report signature verifies under the PCK certificate key')
        : fail(
            'tdx.qe_report_signature',
            'TDX_QE_REPORT_SIGNATURE_INVALID',
            'the QE report signature does not verify under the PCK key',
          ),
    );
  }
  const want = Buffer.concat([digest('sha256', q.attestationKey, q.qeAuthData), Buffer.alloc(32)]);
  checks.push(
    q.qeReport.reportData.equals(want)
      ? pass('tdx.qe_report_data', 'QE REPORTDATA = SHA-256(attestation key ‖ QE auth data) ‖ 32 zero bytes')
      : fail(
          'tdx.qe_report_data',
          'TDX_QE_REPORT_DATA_MISMATCH',
          'QE REPORTDATA does not bind this attestation key',
        ),
  );
  return pckCerts;
}

/** `evidence.anchor`: the PCK chain to the pinned Intel SGX root. */
function anchorCheck(
  pckCerts: Cert[] | undefined,
  trustStore: TrustStore,
  at: Date,
  out: TdxSignatureResult,
): void {
  if (!pckCerts) {
    out.checks.push(fail(HARDWARE_ANCHOR_CHECK, 'DEPENDENCY_FAILED', 'the PCK chain did not parse'));
    return;
  }
  const roots = rootsFor(trustStore, ['intel-sgx-root']);
  const r = validateChain({
    certs: pckCerts,
    roots,
    otherRoots: trustStore.roots.filter((x) => !roots.includes(x)),
    at,
    leafProfile: pckLeafProblem,
    what: 'PCK',
    usedFor: 'tdx-pck',
  });
  if (r.status === 'anchored') {
    out.anchors.push(r.anchor);
    out.pckPath = r.path;
    out.checks.push(pass(HARDWARE_ANCHOR_CHECK, `PCK chain ${r.detail}`));
  } else if (r.status === 'unpinned') {
    out.checks.push(
      r.code === 'ANCHOR_PURPOSE_MISMATCH'
        ? fail(HARDWARE_ANCHOR_CHECK, r.code, `PCK chain ${r.detail}`)
        : check(HARDWARE_ANCHOR_CHECK, 'absent', r.code, `PCK chain ${r.detail}`),
    );
  } else out.checks.push(fail(HARDWARE_ANCHOR_CHECK, r.code, `PCK chain: ${r.detail}`));
}

/**
 * Checks, in order (ids stable): `tdx.quote_parse`, `tdx.header`, `tdx.attestation_key`,
 * `evidence.signature`, `tdx.pck_certs_parse`, `tdx.qe_report_signature`, `tdx.qe_report_data`,
 * `evidence.anchor`. When the quote does not parse only `tdx.quote_parse` is returned (the
 * caller fails the rest as dependent).
 */
export function verifyTdxSignature(bytes: Uint8Array, trustStore: TrustStore, at: Date): TdxSignatureResult {
  const out: TdxSignatureResult = { checks: [], anchors: [] };
  let q: TdxQuote;
  try {
    q = parseTdxQuote(bytes);
  } catch (err) {
    const e = errInfo(err, 'TDX_QUOTE_MALFORMED');
    out.checks.push(fail('tdx.quote_parse', e.code, e.detail));
    return out;
  }
  out.quote = q;
  out.checks.push(
    pass(
      'tdx.quote_parse',
      `quote v${q.version}, TD report ${q.bodyType === 2 ? '1.0' : '1.5'}, signature data ${q.end - q.signedRegion.length - 4} bytes`,
    ),
  );
  const vendor = q.qeVendorId.toString('hex');
  out.checks.push(
    vendor === INTEL_QE_VENDOR_ID
      ? pass(
          'tdx.header',
          `TDX (0x81), ECDSA P-256 attestation key, Intel QE, QE SVN ${q.qeSvn}, PCE SVN ${q.pceSvn}`,
        )
      : fail('tdx.header', 'TDX_QUOTE_MALFORMED', `QE vendor id ${vendor} is not Intel's`),
  );
  const key = attestationKeyChecks(q, out.checks);
  const pckCerts = qeChecks(q, out.checks);
  anchorCheck(pckCerts, trustStore, at, out);
  const sig = out.checks.find((c) => c.id === HARDWARE_SIGNATURE_CHECK);
  if (key && sig?.status === 'pass') out.verified = { quote: q, attestationKey: key };
  return out;
}
