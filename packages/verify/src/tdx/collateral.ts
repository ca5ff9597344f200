/**
 * Intel PCS collateral for TDX: TCB info (v3, id TDX), QE identity (v2, id TD_QE), the PCK
 * and Root CA CRLs, and the TCB signing chain. Signatures are verified over the raw bytes as
 * received (the exact bytes of the signed JSON member), never over re-serialised JSON; every
 * validity window is checked at the injected verification time. JSON members:
 * ./collateral-json.ts; TCB matching: ./tcb.ts; CRLs: ./crl.ts.
 */
import type { TdxQuote } from '../abi/tdx/quote.js';
import { type AnchorUsed, type CheckResult, check, fail, pass } from '../result.js';
import { type ReferenceValues, rootsFor, type TrustStore } from '../trust.js';
import { type Cert, CertError, certsFromBytes, validateChain } from '../x509.js';
import {
  CollateralError,
  hexBytes,
  hexEq,
  masked,
  signedJson,
  verifyP256,
  window,
} from './collateral-json.js';
import { checkCrl, parseCrl, revoked } from './crl.js';
import { type PckExtension, pckExtension } from './pck.js';
import { noCollateralChecks } from './qe-pin.js';
import { evaluateTdxTcb, matchTdxModule } from './tcb.js';

export { topLevelMembers } from './collateral-json.js';
export {
  evaluateTdxTcb,
  matchTdxModule,
  type TdxModuleIdentityMatch,
  type TdxPlatformTcb,
  type TdxTcbEvaluation,
  type TdxTcbMismatch,
} from './tcb.js';

/** Collateral as received from Intel PCS (any part may be missing). */
export interface TdxCollateral {
  /** Body of the TCB info response: `{"tcbInfo":{…},"signature":"<hex>"}`. */
  tcbInfo?: Uint8Array;
  /** Body of the QE identity response: `{"enclaveIdentity":{…},"signature":"<hex>"}`. */
  qeIdentity?: Uint8Array;
  /** The TCB-Info-Issuer-Chain (PEM: TCB Signing ← Root). */
  tcbSigningChain?: Uint8Array;
  /** PCK CRL (DER or PEM), issued by the PCK's issuing CA. */
  pckCrl?: Uint8Array;
  /** Root CA CRL (DER or PEM). */
  rootCrl?: Uint8Array;
}

/** Input of {@link verifyTdxCollateral}. */
export interface TdxCollateralInput {
  quote: TdxQuote;
  /** The PCK leaf, its issuer and the root — only when the PCK chain validated. */
  pck: Cert | undefined;
  pckIssuer: Cert | undefined;
  pckRoot: Cert | undefined;
  collateral?: TdxCollateral;
  referenceValues?: ReferenceValues;
  trustStore: TrustStore;
  at: Date;
}

/** State shared by the collateral checks of one quote. */
interface Ctx {
  input: TdxCollateralInput;
  col: TdxCollateral;
  accepted: readonly string[];
  anchors: AnchorUsed[];
  signer?: Cert;
  ext?: PckExtension;
  extProblem: string | null;
  tcbInfoValue?: Record<string, unknown>;
  qeStatus?: string;
  tcbStatus?: string;
}

const absent = (id: string, what: string) =>
  check(id, 'absent', 'COLLATERAL_NOT_SUPPLIED', `${what} not supplied`);

/** Runs a check body; a CollateralError / CertError becomes a failure with its code. */
function run(id: string, fn: () => CheckResult): CheckResult {
  try {
    return fn();
  } catch (err) {
    if (err instanceof CollateralError || err instanceof CertError) return fail(id, err.code, err.message);
    return fail(id, 'COLLATERAL_MALFORMED', (err as Error).message?.slice(0, 120) ?? 'error');
  }
}

const needSigned = (ctx: Ctx, id: string): CheckResult | null =>
  ctx.signer ? null : fail(id, 'DEPENDENCY_FAILED', 'the TCB signing chain did not validate');

/** `tdx.collateral_signer`: the TCB signing chain to the pinned Intel SGX Root CA. */
function signerCheck(ctx: Ctx): CheckResult {
  const { col, input } = ctx;
  const chain = col.tcbSigningChain;
  if (!chain) {
    return col.tcbInfo !== undefined || col.qeIdentity !== undefined
      ? fail(
          'tdx.collateral_signer',
          'CHAIN_NOT_SUPPLIED',
          'TCB info / QE identity supplied without the TCB signing chain',
        )
      : absent('tdx.collateral_signer', 'TCB signing chain');
  }
  return run('tdx.collateral_signer', () => {
    const r = validateChain({
      certs: certsFromBytes(chain),
      roots: rootsFor(input.trustStore, ['intel-sgx-root']),
      at: input.at,
      leafProfile: (c) =>
        /CN=Intel SGX TCB Signing(\n|,|$)/.test(c.node.subject)
          ? null
          : 'the signer is not Intel SGX TCB Signing',
      what: 'TCB signing',
      usedFor: 'tdx-collateral',
    });
    if (r.status !== 'anchored')
      return fail('tdx.collateral_signer', r.code, `TCB signing chain: ${r.detail}`);
    ctx.signer = r.path[0];
    ctx.anchors.push(r.anchor);
    return pass('tdx.collateral_signer', `TCB signing chain ${r.detail}`);
  });
}

/** A signed PCS collateral member: its check, JSON member name, label, and the id/version it must carry. */
interface SignedMember {
  check: string;
  member: string;
  what: string;
  id: string;
  version: number;
}

const TCB_INFO: SignedMember = {
  check: 'tdx.tcb_info',
  member: 'tcbInfo',
  what: 'TCB info',
  id: 'TDX',
  version: 3,
};
const QE_IDENTITY: SignedMember = {
  check: 'tdx.qe_identity',
  member: 'enclaveIdentity',
  what: 'QE identity',
  id: 'TD_QE',
  version: 2,
};

/**
 * Runs the check of a signed collateral member: DEPENDENCY_FAILED without a validated TCB signing
 * chain; else `body` gets the member's value once its signature over the raw bytes (by the TCB
 * signing key), its id/version and its validity window at the verification time are checked
 * (COLLATERAL_SIGNATURE_INVALID, COLLATERAL_MISMATCH, or what signedJson / window throw).
 */
function signedMemberCheck(
  ctx: Ctx,
  m: SignedMember,
  raw: Uint8Array,
  body: (value: Record<string, unknown>) => CheckResult,
): CheckResult {
  return (
    needSigned(ctx, m.check) ??
    run(m.check, () => {
      const { signed, signature, value } = signedJson(Buffer.from(raw), m.member);
      if (!ctx.signer || !verifyP256(signed, signature, ctx.signer)) {
        throw new CollateralError(
          'COLLATERAL_SIGNATURE_INVALID',
          `${m.what} signature does not verify over the ${signed.length} raw bytes of "${m.member}"`,
        );
      }
      if (value.id !== m.id || value.version !== m.version) {
        throw new CollateralError('COLLATERAL_MISMATCH', `${m.what} is not id ${m.id} version ${m.version}`);
      }
      window(value, ctx.input.at, m.what);
      return body(value);
    })
  );
}

/** `tdx.tcb_info`: signature over the raw member, id/version, window, FMSPC/PCEID, TDX module. */
function tcbInfoCheck(ctx: Ctx, tcbRaw: Uint8Array): CheckResult {
  const { input } = ctx;
  return signedMemberCheck(ctx, TCB_INFO, tcbRaw, (value) => {
    const ext = ctx.ext;
    if (!ext) throw new CollateralError('DEPENDENCY_FAILED', `PCK extension unavailable: ${ctx.extProblem}`);
    if (!hexEq(value.fmspc, ext.fmspc) || !hexEq(value.pceId, ext.pceId)) {
      throw new CollateralError(
        'COLLATERAL_MISMATCH',
        `TCB info is for FMSPC ${String(value.fmspc).slice(0, 12)} / PCEID ${String(value.pceId).slice(0, 4)}, the PCK for ${ext.fmspc.toString('hex')} / ${ext.pceId.toString('hex')}`,
      );
    }
    const mod = matchTdxModule(value, input.quote.body);
    if (!mod.ok) return fail('tdx.tcb_info', mod.code, mod.detail);
    if (!Array.isArray(value.tcbLevels)) throw new CollateralError('COLLATERAL_MALFORMED', 'tcbLevels');
    ctx.tcbInfoValue = value;
    return pass(
      'tdx.tcb_info',
      `TCB info (FMSPC ${ext.fmspc.toString('hex')}, ${value.tcbLevels.length} levels) signature valid over the raw bytes; valid at ${input.at.toISOString()}; TDX module matches ${mod.id === 'tdxModule' ? 'tdxModule (module version 0)' : `tdxModuleIdentities ${mod.id}`}`,
    );
  });
}

/** The QE report fields the QE identity constrains that differ, by name. */
function qeMismatches(value: Record<string, unknown>, qe: TdxQuote['qeReport']): string[] {
  const misc = Buffer.alloc(4);
  misc.writeUInt32BE(qe.miscSelect);
  const miscMask = hexBytes(value.miscselectMask, 4, 'miscselectMask');
  const miscWant = hexBytes(value.miscselect, 4, 'miscselect');
  const attrMask = hexBytes(value.attributesMask, 16, 'attributesMask');
  const attrWant = hexBytes(value.attributes, 16, 'attributes');
  const problems: string[] = [];
  if (!hexEq(value.mrsigner, qe.mrSigner)) problems.push('MRSIGNER');
  if (value.isvprodid !== qe.isvProdId) problems.push('ISVPRODID');
  // MISCSELECT is a little-endian u32 in the report; the identity writes it big-endian hex.
  if (!masked(misc, miscMask).equals(masked(miscWant, miscMask))) problems.push('MISCSELECT');
  if (!masked(qe.attributes, attrMask).equals(masked(attrWant, attrMask))) problems.push('ATTRIBUTES');
  return problems;
}

/** `tdx.qe_identity`: signature, id/version, window, QE report match, QE TCB level status. */
function qeIdentityCheck(ctx: Ctx, qeRaw: Uint8Array): CheckResult {
  const { input } = ctx;
  return signedMemberCheck(ctx, QE_IDENTITY, qeRaw, (value) => {
    const qe = input.quote.qeReport;
    const problems = qeMismatches(value, qe);
    if (problems.length) {
      throw new CollateralError(
        'COLLATERAL_MISMATCH',
        `QE report does not match the QE identity: ${problems.join(', ')}`,
      );
    }
    const levels = Array.isArray(value.tcbLevels) ? (value.tcbLevels as Record<string, unknown>[]) : [];
    const level = levels.find((l) => {
      const svn = (l.tcb as { isvsvn?: unknown } | undefined)?.isvsvn;
      return typeof svn === 'number' && qe.isvSvn >= svn;
    });
    if (!level)
      throw new CollateralError('TCB_LEVEL_NOT_FOUND', `no QE identity level for ISVSVN ${qe.isvSvn}`);
    const status = String(level.tcbStatus);
    ctx.qeStatus = status;
    if (!ctx.accepted.includes(status)) {
      throw new CollateralError(
        'TCB_STATUS_NOT_ACCEPTED',
        `QE identity status ${status.slice(0, 40)} is not accepted`,
      );
    }
    return pass(
      'tdx.qe_identity',
      `QE identity signature valid; QE matches; ISVSVN ${qe.isvSvn} → ${status}`,
    );
  });
}

/** `tdx.crl`: the PCK CRL (PCK not revoked) and the Root CA CRL (PCK CA not revoked). */
function crlCheck(ctx: Ctx): CheckResult {
  const { col, input } = ctx;
  if (!col.pckCrl && !col.rootCrl) return absent('tdx.crl', 'CRLs');
  return run('tdx.crl', () => {
    if (!input.pck || !input.pckIssuer || !input.pckRoot) {
      throw new CollateralError('DEPENDENCY_FAILED', 'the PCK chain did not validate');
    }
    const parts: string[] = [];
    if (col.pckCrl) {
      const crl = parseCrl(col.pckCrl);
      checkCrl(crl, input.pckIssuer, input.at, 'PCK CRL');
      if (revoked(crl, input.pck))
        throw new CollateralError('CERT_REVOKED', 'the PCK certificate is revoked');
      parts.push(`PCK CRL valid (${crl.entries.length} entries); PCK not revoked`);
    } else parts.push('no PCK CRL');
    if (col.rootCrl) {
      const crl = parseCrl(col.rootCrl);
      checkCrl(crl, input.pckRoot, input.at, 'Root CA CRL');
      if (revoked(crl, input.pckIssuer))
        throw new CollateralError('CERT_REVOKED', 'the PCK issuing CA is revoked');
      parts.push(`Root CA CRL valid (${crl.entries.length} entries); PCK CA not revoked`);
    } else parts.push('no Root CA CRL');
    return pass('tdx.crl', parts.join('; '));
  });
}

/** `tdx.tcb_status`: the TCB level (and TDX module level) status must be accepted. */
function tcbStatusCheck(ctx: Ctx): CheckResult {
  if (!ctx.col.tcbInfo) return absent('tdx.tcb_status', 'TCB info');
  const info = ctx.tcbInfoValue;
  const ext = ctx.ext;
  if (!info || !ext) return fail('tdx.tcb_status', 'DEPENDENCY_FAILED', 'the TCB info did not verify');
  return run('tdx.tcb_status', () => {
    const q = ctx.input.quote.body;
    const e = evaluateTdxTcb(info, {
      teeTcbSvn: q.teeTcbSvn,
      mrSignerSeam: q.mrSignerSeam,
      seamAttributes: q.seamAttributes,
      sgxTcbComponents: ext.tcbComponents,
      pceSvn: ext.pceSvn,
    });
    if (!e.ok) return fail('tdx.tcb_status', e.code, e.detail);
    ctx.tcbStatus = e.status;
    const how =
      e.module.status === null
        ? `TCB level ${e.platformStatus}`
        : `TCB level ${e.platformStatus}; TDX module ${e.module.id} ISVSVN ${e.module.isvSvn} → ${e.module.status}`;
    if (!ctx.accepted.includes(e.status)) {
      throw new CollateralError(
        'TCB_STATUS_NOT_ACCEPTED',
        `TCB status ${e.status.slice(0, 40)} (${how.slice(0, 120)}) is not accepted (${ctx.accepted.join(', ')})`,
      );
    }
    return pass(
      'tdx.tcb_status',
      `TCB status ${e.status} (${how})${ctx.qeStatus ? `; QE identity ${ctx.qeStatus}` : ''}`,
    );
  });
}

/**
 * Collateral checks (ids stable): `tdx.collateral_signer` (TCB signing chain to the pinned
 * Intel SGX Root CA), `tdx.tcb_info`, `tdx.qe_identity`, `tdx.crl`, `tdx.tcb_status`. Without
 * collateral they are `absent` (COLLATERAL_NOT_SUPPLIED) except `tdx.qe_identity`, checked
 * against the trust store's Intel QE identity (./qe-pin.ts), and a note says the TCB status was
 * not appraised.
 */
export function verifyTdxCollateral(input: TdxCollateralInput): {
  checks: CheckResult[];
  anchors: AnchorUsed[];
  notes: string[];
  tcbStatus?: string;
} {
  const col = input.collateral;
  if (!col) return { ...noCollateralChecks(input.quote, input.trustStore), anchors: [] };
  const ctx: Ctx = {
    input,
    col,
    accepted: input.referenceValues?.tdx?.accepted_tcb_status ?? ['UpToDate'],
    anchors: [],
    extProblem: null,
  };
  const checks = [signerCheck(ctx)];
  // the PCK SGX extension (needed by TCB info)
  if (!input.pck) ctx.extProblem = 'the PCK chain did not validate';
  else {
    try {
      ctx.ext = pckExtension(input.pck);
    } catch (err) {
      ctx.extProblem = (err as Error).message;
    }
  }
  checks.push(col.tcbInfo ? tcbInfoCheck(ctx, col.tcbInfo) : absent('tdx.tcb_info', 'TCB info'));
  checks.push(
    col.qeIdentity ? qeIdentityCheck(ctx, col.qeIdentity) : absent('tdx.qe_identity', 'QE identity'),
  );
  checks.push(crlCheck(ctx), tcbStatusCheck(ctx));
  return { checks, anchors: ctx.anchors, notes: [], ...(ctx.tcbStatus ? { tcbStatus: ctx.tcbStatus } : {}) };
}
