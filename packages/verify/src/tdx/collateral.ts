/**
 * Intel PCS collateral for TDX: TCB info (v3, id TDX), QE identity (v2, id TD_QE), the PCK
 * and Root CA CRLs, and the TCB signing chain. Signatures are verified over the raw bytes as
 * received (the exact bytes of the signed JSON member), never over re-serialised JSON; every
 * validity window is checked at the injected verification time.
 */
import 'reflect-metadata';
import * as px from '@peculiar/x509';
import type { TdxQuote } from '../abi/tdx/quote.js';
import { verifyEcdsaP1363, verifyWithKey } from '../crypto/signatures.js';
import { CmcpError } from '../errors/index.js';
import { type AnchorUsed, type CheckResult, check, fail, pass, type ReasonCode } from '../result.js';
import { type ReferenceValues, rootsFor, type TrustStore } from '../trust.js';
import { type Cert, CertError, certsFromBytes, pemBlocks, sha256hex, validateChain } from '../x509.js';
import { type PckExtension, pckExtension } from './pck.js';

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

type CollateralErrorCode =
  | 'COLLATERAL_MALFORMED'
  | 'COLLATERAL_MISMATCH'
  | 'COLLATERAL_SIGNATURE_INVALID'
  | 'COLLATERAL_EXPIRED'
  | 'CERT_REVOKED'
  | 'TCB_LEVEL_NOT_FOUND'
  | 'TCB_STATUS_NOT_ACCEPTED'
  | 'DEPENDENCY_FAILED';

/** Collateral that cannot be used; `code` is registered and is the failed check's reason. */
class CollateralError extends CmcpError {
  declare readonly code: CollateralErrorCode;

  constructor(code: CollateralErrorCode, message: string) {
    super(code, message);
    this.name = 'CollateralError';
  }
}

// ---------- raw JSON members ----------

const WS = new Set([0x20, 0x09, 0x0a, 0x0d]);

/**
 * Byte spans of the top-level members of a JSON object, as they appear in `raw` (which must
 * be valid JSON — checked with JSON.parse first). Duplicate member names are refused.
 */
export function topLevelMembers(raw: Buffer): Map<string, Buffer> {
  try {
    const v = JSON.parse(raw.toString('utf8')) as unknown;
    if (typeof v !== 'object' || v === null || Array.isArray(v)) throw new Error('not an object');
  } catch (err) {
    throw new CollateralError(
      'COLLATERAL_MALFORMED',
      `not a JSON object (${(err as Error).message.slice(0, 60)})`,
    );
  }
  let i = 0;
  const ws = () => {
    while (i < raw.length && WS.has(raw[i] as number)) i++;
  };
  const str = (): [number, number] => {
    const start = i;
    i++; // opening quote
    while (raw[i] !== 0x22) i += raw[i] === 0x5c ? 2 : 1;
    i++;
    return [start, i];
  };
  const value = (): [number, number] => {
    const start = i;
    if (raw[i] === 0x22) return str();
    let depth = 0;
    while (i < raw.length) {
      const c = raw[i] as number;
      if (c === 0x22) {
        str();
        continue;
      }
      if (c === 0x7b || c === 0x5b) depth++;
      else if (c === 0x7d || c === 0x5d) {
        if (depth === 0) break;
        depth--;
        if (depth === 0) {
          i++;
          break;
        }
      } else if (c === 0x2c && depth === 0) break;
      i++;
    }
    let end = i;
    while (end > start && WS.has(raw[end - 1] as number)) end--;
    return [start, end];
  };
  const out = new Map<string, Buffer>();
  ws();
  i++; // {
  for (;;) {
    ws();
    if (raw[i] === 0x7d) break;
    const [ks, ke] = str();
    const key = JSON.parse(raw.subarray(ks, ke).toString('utf8')) as string;
    ws();
    i++; // :
    ws();
    const [vs, ve] = value();
    if (out.has(key))
      throw new CollateralError('COLLATERAL_MALFORMED', `member ${JSON.stringify(key)} appears twice`);
    out.set(key, Buffer.from(raw.subarray(vs, ve)));
    ws();
    if (raw[i] === 0x2c) i++;
  }
  return out;
}

/** The signed member and its P-256 signature (hex r‖s) from a PCS JSON response. */
function signedJson(
  raw: Buffer,
  member: string,
): { signed: Buffer; signature: Buffer; value: Record<string, unknown> } {
  const m = topLevelMembers(raw);
  const signed = m.get(member);
  const sig = m.get('signature');
  if (!signed || !sig || m.size !== 2) {
    throw new CollateralError('COLLATERAL_MALFORMED', `expected exactly {"${member}", "signature"}`);
  }
  const hex = JSON.parse(sig.toString('utf8')) as unknown;
  if (typeof hex !== 'string' || !/^[0-9a-fA-F]{128}$/.test(hex)) {
    throw new CollateralError('COLLATERAL_MALFORMED', 'signature is not 64 bytes of hex');
  }
  const value = JSON.parse(signed.toString('utf8')) as unknown;
  if (typeof value !== 'object' || value === null || Array.isArray(value)) {
    throw new CollateralError('COLLATERAL_MALFORMED', `${member} is not an object`);
  }
  return { signed, signature: Buffer.from(hex, 'hex'), value: value as Record<string, unknown> };
}

function verifyP256(data: Buffer, sig: Buffer, cert: Cert): boolean {
  try {
    return verifyEcdsaP1363('sha256', data, cert.node.publicKey, sig);
  } catch {
    return false;
  }
}

function window(value: Record<string, unknown>, at: Date, what: string): void {
  const issue = new Date(String(value.issueDate));
  const next = new Date(String(value.nextUpdate));
  if (Number.isNaN(issue.getTime()) || Number.isNaN(next.getTime())) {
    throw new CollateralError('COLLATERAL_MALFORMED', `${what} issueDate/nextUpdate do not parse`);
  }
  if (at < issue || at > next) {
    throw new CollateralError(
      'COLLATERAL_EXPIRED',
      `${what} is valid ${issue.toISOString()} to ${next.toISOString()}, not at ${at.toISOString()}`,
    );
  }
}

const hexEq = (a: unknown, b: Buffer) => typeof a === 'string' && a.toLowerCase() === b.toString('hex');

function hexBytes(v: unknown, n: number, what: string): Buffer {
  if (typeof v !== 'string' || !new RegExp(`^[0-9a-fA-F]{${2 * n}}$`).test(v)) {
    throw new CollateralError('COLLATERAL_MALFORMED', `${what} is not ${n} bytes of hex`);
  }
  return Buffer.from(v, 'hex');
}

function masked(value: Buffer, mask: Buffer): Buffer {
  return Buffer.from(value.map((x, i) => x & (mask[i] ?? 0)));
}

function svnList(v: unknown, what: string): number[] {
  if (!Array.isArray(v) || v.length !== 16)
    throw new CollateralError('COLLATERAL_MALFORMED', `${what} is not 16 components`);
  return v.map((c) => {
    const svn = (c as { svn?: unknown }).svn;
    if (typeof svn !== 'number' || !Number.isInteger(svn))
      throw new CollateralError('COLLATERAL_MALFORMED', `${what} svn`);
    return svn;
  });
}

// ---------- TCB matching (pure, on parsed values) ----------

/** What TCB matching needs from the quote and the PCK certificate. */
export interface TdxPlatformTcb {
  /** TEE_TCB_SVN (16 bytes): [0] TDX module ISVSVN, [1] TDX module major version, then the rest. */
  teeTcbSvn: Uint8Array;
  /** MRSIGNERSEAM (48 bytes). */
  mrSignerSeam: Uint8Array;
  /** SEAMATTRIBUTES (8 bytes). */
  seamAttributes: Uint8Array;
  /** SGX TCB component SVNs 1..16 from the PCK certificate. */
  sgxTcbComponents: readonly number[];
  /** PCESVN from the PCK certificate. */
  pceSvn: number;
}

/** The TDX module identity a quote is matched against. */
export interface TdxModuleIdentityMatch {
  ok: true;
  /** `tdxModule` (module version 0) or the `tdxModuleIdentities` id, e.g. `TDX_01`. */
  id: string;
  /** TEE_TCB_SVN[1]. */
  version: number;
  /** TEE_TCB_SVN[0]. */
  isvSvn: number;
  /** The identity's TCB levels (version > 0 only). */
  tcbLevels?: unknown[];
}

/** A failed match: the reason code and a bounded detail. */
export interface TdxTcbMismatch {
  ok: false;
  code: ReasonCode;
  detail: string;
}

/**
 * Matches the TDX module of a quote against TCB info v3 (Intel DCAP QVL TdxModuleCheck): with
 * TEE_TCB_SVN[1] = 0 against `tdxModule`; otherwise against the `tdxModuleIdentities` entry whose
 * id is `TDX_` + TEE_TCB_SVN[1] as two hex digits (none: TDX_MODULE_IDENTITY_NOT_FOUND). The
 * identity's MRSIGNER must equal MRSIGNERSEAM and SEAMATTRIBUTES must equal its attributes under
 * its mask (else COLLATERAL_MISMATCH). Never throws.
 */
export function matchTdxModule(
  tcbInfo: Record<string, unknown>,
  p: Pick<TdxPlatformTcb, 'teeTcbSvn' | 'mrSignerSeam' | 'seamAttributes'>,
): TdxModuleIdentityMatch | TdxTcbMismatch {
  try {
    const isvSvn = p.teeTcbSvn[0] ?? 0;
    const version = p.teeTcbSvn[1] ?? 0;
    let id = 'tdxModule';
    let identity: Record<string, unknown> | undefined;
    if (version === 0) {
      identity = tcbInfo.tdxModule as Record<string, unknown> | undefined;
      if (typeof identity !== 'object' || identity === null)
        throw new CollateralError('COLLATERAL_MALFORMED', 'TCB info has no tdxModule');
    } else {
      id = `TDX_${version.toString(16).toUpperCase().padStart(2, '0')}`;
      const list = tcbInfo.tdxModuleIdentities;
      if (list !== undefined && !Array.isArray(list))
        throw new CollateralError('COLLATERAL_MALFORMED', 'tdxModuleIdentities is not an array');
      identity = (list ?? []).find(
        (x): x is Record<string, unknown> =>
          typeof x === 'object' &&
          x !== null &&
          typeof (x as { id?: unknown }).id === 'string' &&
          ((x as { id: string }).id as string).toUpperCase() === id,
      );
      if (!identity) {
        return {
          ok: false,
          code: 'TDX_MODULE_IDENTITY_NOT_FOUND',
          detail: `TEE_TCB_SVN[1] = ${version}: the TCB info has no tdxModuleIdentities entry ${id} (TDX module mismatch)`,
        };
      }
      if (!Array.isArray(identity.tcbLevels))
        throw new CollateralError('COLLATERAL_MALFORMED', `${id} has no tcbLevels`);
    }
    const attrs = hexBytes(identity.attributes, 8, `${id}.attributes`);
    const mask = hexBytes(identity.attributesMask, 8, `${id}.attributesMask`);
    hexBytes(identity.mrsigner, 48, `${id}.mrsigner`);
    if (
      !hexEq(identity.mrsigner, Buffer.from(p.mrSignerSeam)) ||
      !masked(Buffer.from(p.seamAttributes), mask).equals(masked(attrs, mask))
    ) {
      return {
        ok: false,
        code: 'COLLATERAL_MISMATCH',
        detail: `MRSIGNERSEAM / SEAMATTRIBUTES do not match ${id === 'tdxModule' ? 'tdxModule' : `tdxModuleIdentities ${id}`}`,
      };
    }
    return {
      ok: true,
      id,
      version,
      isvSvn,
      ...(version === 0 ? {} : { tcbLevels: identity.tcbLevels as unknown[] }),
    };
  } catch (err) {
    return mismatchOf(err);
  }
}

function mismatchOf(err: unknown): TdxTcbMismatch {
  if (err instanceof CollateralError) return { ok: false, code: err.code, detail: err.message };
  return {
    ok: false,
    code: 'COLLATERAL_MALFORMED',
    detail: (err as Error).message?.slice(0, 120) ?? 'error',
  };
}

/** The outcome of {@link evaluateTdxTcb}. */
export interface TdxTcbEvaluation {
  ok: true;
  /** The converged status (what the relying party's accepted statuses are applied to). */
  status: string;
  /** Status of the first matching TCB level of the platform. */
  platformStatus: string;
  module: {
    id: string;
    version: number;
    isvSvn: number;
    /** Status of the TDX module identity's level (version > 0 only). */
    status: string | null;
  };
}

/**
 * TCB status of a TDX platform from TCB info v3 (Intel DCAP QVL TcbLevelCheck + TdxModuleCheck):
 *  1. the TDX module must match ({@link matchTdxModule});
 *  2. the first TCB level whose SGX components and PCESVN are ≤ the PCK's and whose TDX components
 *     are ≤ TEE_TCB_SVN gives the platform status — when TEE_TCB_SVN[1] > 0 the TDX components 0
 *     and 1 (module ISVSVN and version) are not compared here; no level: TCB_LEVEL_NOT_FOUND;
 *  3. when TEE_TCB_SVN[1] > 0, the first level of the module identity with isvsvn ≤
 *     TEE_TCB_SVN[0] gives the module status (none: TDX_MODULE_TCB_LEVEL_NOT_FOUND), and
 *     the two converge: module OutOfDate turns UpToDate/SWHardeningNeeded into OutOfDate and
 *     ConfigurationNeeded/ConfigurationAndSWHardeningNeeded into OutOfDateConfigurationNeeded;
 *     module Revoked gives Revoked.
 * Never throws; never falls back to a status when no level matches.
 */
export function evaluateTdxTcb(
  tcbInfo: Record<string, unknown>,
  p: TdxPlatformTcb,
): TdxTcbEvaluation | TdxTcbMismatch {
  const mod = matchTdxModule(tcbInfo, p);
  if (!mod.ok) return mod;
  try {
    if (!Array.isArray(tcbInfo.tcbLevels)) throw new CollateralError('COLLATERAL_MALFORMED', 'tcbLevels');
    const tee = p.teeTcbSvn;
    const skipModule = mod.version > 0;
    let platformStatus: string | undefined;
    for (const l of tcbInfo.tcbLevels) {
      const lv = l as { tcb?: Record<string, unknown>; tcbStatus?: unknown };
      const sgx = svnList(lv.tcb?.sgxtcbcomponents, 'sgxtcbcomponents');
      const tdx = svnList(lv.tcb?.tdxtcbcomponents, 'tdxtcbcomponents');
      const pcesvn = lv.tcb?.pcesvn;
      if (typeof pcesvn !== 'number') throw new CollateralError('COLLATERAL_MALFORMED', 'pcesvn');
      if (typeof lv.tcbStatus !== 'string') throw new CollateralError('COLLATERAL_MALFORMED', 'tcbStatus');
      const sgxOk = sgx.every((s, i) => (p.sgxTcbComponents[i] ?? 0) >= s) && p.pceSvn >= pcesvn;
      const tdxOk = tdx.every((s, i) => (skipModule && i < 2) || (tee[i] ?? 0) >= s);
      if (sgxOk && tdxOk) {
        platformStatus = lv.tcbStatus;
        break;
      }
    }
    const teeHex = Buffer.from(tee).toString('hex');
    if (platformStatus === undefined) {
      return {
        ok: false,
        code: 'TCB_LEVEL_NOT_FOUND',
        detail: `no TCB level matches (PCK SGX components ${p.sgxTcbComponents.slice(0, 8).join(',')}…, PCESVN ${p.pceSvn}, TEE_TCB_SVN ${teeHex}${skipModule ? ', components 0-1 matched by the module identity' : ''}): TCB level not supported`,
      };
    }
    let moduleStatus: string | null = null;
    let status = platformStatus;
    if (mod.tcbLevels) {
      for (const l of mod.tcbLevels) {
        const lv = l as { tcb?: { isvsvn?: unknown }; tcbStatus?: unknown };
        const svn = lv.tcb?.isvsvn;
        if (typeof svn !== 'number' || typeof lv.tcbStatus !== 'string')
          throw new CollateralError('COLLATERAL_MALFORMED', `${mod.id} tcbLevels`);
        if (mod.isvSvn >= svn) {
          moduleStatus = lv.tcbStatus;
          break;
        }
      }
      if (moduleStatus === null) {
        return {
          ok: false,
          code: 'TDX_MODULE_TCB_LEVEL_NOT_FOUND',
          detail: `no ${mod.id} TCB level covers the TDX module ISVSVN ${mod.isvSvn}: TCB level not supported`,
        };
      }
      if (moduleStatus === 'Revoked') status = 'Revoked';
      else if (moduleStatus === 'OutOfDate') {
        if (platformStatus === 'UpToDate' || platformStatus === 'SWHardeningNeeded') status = 'OutOfDate';
        else if (
          platformStatus === 'ConfigurationNeeded' ||
          platformStatus === 'ConfigurationAndSWHardeningNeeded'
        )
          status = 'OutOfDateConfigurationNeeded';
      }
    }
    return {
      ok: true,
      status,
      platformStatus,
      module: { id: mod.id, version: mod.version, isvSvn: mod.isvSvn, status: moduleStatus },
    };
  } catch (err) {
    return mismatchOf(err);
  }
}

// ---------- CRLs ----------

class RawCrl extends px.X509Crl {
  get tbsRaw(): Buffer {
    const raw = this.asn.tbsCertListRaw;
    if (!raw) throw new CollateralError('COLLATERAL_MALFORMED', 'CRL has no raw tbsCertList');
    return Buffer.from(raw);
  }
}

const crlCache = new Map<string, RawCrl>();

/** Parses a CRL (DER or PEM); cached by the SHA-256 of the bytes (parsing is pure). */
function parseCrl(bytes: Uint8Array): RawCrl {
  const buf = Buffer.from(bytes);
  const key = sha256hex(buf);
  const hit = crlCache.get(key);
  if (hit) return hit;
  const crl = parseCrlUncached(buf);
  if (crlCache.size >= 64) crlCache.clear();
  crlCache.set(key, crl);
  return crl;
}

function parseCrlUncached(buf: Buffer): RawCrl {
  try {
    const der = buf[0] === 0x30 ? buf : pemBlocks(buf.toString('latin1'), 'X509 CRL')[0];
    if (!der) throw new Error('empty');
    const crl = new RawCrl(der);
    if (!Buffer.from(crl.rawData).equals(der)) throw new Error('trailing or re-encoded bytes');
    return crl;
  } catch (err) {
    if (err instanceof CollateralError) throw err;
    throw new CollateralError(
      'COLLATERAL_MALFORMED',
      `CRL does not parse (${(err as Error).message?.slice(0, 60)})`,
    );
  }
}

function checkCrl(crl: RawCrl, issuer: Cert, at: Date, what: string): void {
  const alg = crl.signatureAlgorithm as { name?: string; hash?: { name?: string } };
  if (alg.name !== 'ECDSA' || alg.hash?.name !== 'SHA-256') {
    throw new CollateralError('COLLATERAL_MALFORMED', `${what} is not ECDSA with SHA-256`);
  }
  let ok = false;
  try {
    ok = verifyWithKey('sha256', crl.tbsRaw, issuer.node.publicKey, Buffer.from(crl.signature));
  } catch {
    ok = false;
  }
  if (!ok)
    throw new CollateralError(
      'COLLATERAL_SIGNATURE_INVALID',
      `${what} signature does not verify under its issuer`,
    );
  const next = crl.nextUpdate;
  if (at < crl.thisUpdate || !next || at > next) {
    throw new CollateralError(
      'COLLATERAL_EXPIRED',
      `${what} is valid ${crl.thisUpdate.toISOString()} to ${next?.toISOString() ?? '?'}, not at ${at.toISOString()}`,
    );
  }
}

const serialKey = (s: string) => s.toLowerCase().replace(/^0+/, '');

function revoked(crl: RawCrl, cert: Cert): boolean {
  const want = serialKey(cert.node.serialNumber);
  return crl.entries.some((e) => serialKey(e.serialNumber) === want);
}

// ---------- verification ----------

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

/**
 * Collateral checks (ids stable): `tdx.collateral_signer` (TCB signing chain to the pinned
 * Intel SGX Root CA), `tdx.tcb_info`, `tdx.qe_identity`, `tdx.crl`, `tdx.tcb_status`. Without
 * collateral every one is `absent` (COLLATERAL_NOT_SUPPLIED) and a note says the TCB status
 * is unknown.
 */
export function verifyTdxCollateral(input: TdxCollateralInput): {
  checks: CheckResult[];
  anchors: AnchorUsed[];
  notes: string[];
  tcbStatus?: string;
} {
  const checks: CheckResult[] = [];
  const anchors: AnchorUsed[] = [];
  const notes: string[] = [];
  const col = input.collateral;
  const absent = (id: string, what: string) =>
    check(id, 'absent', 'COLLATERAL_NOT_SUPPLIED', `${what} not supplied`);
  if (!col) {
    for (const id of [
      'tdx.collateral_signer',
      'tdx.tcb_info',
      'tdx.qe_identity',
      'tdx.crl',
      'tdx.tcb_status',
    ]) {
      checks.push(absent(id, 'collateral'));
    }
    notes.push(
      'No Intel PCS collateral (TCB info, QE identity, CRLs) was supplied: the TCB status and revocation of the platform are unknown.',
    );
    return { checks, anchors, notes };
  }
  const accepted: readonly string[] = input.referenceValues?.tdx?.accepted_tcb_status ?? ['UpToDate'];
  const run = (id: string, fn: () => CheckResult): CheckResult => {
    try {
      return fn();
    } catch (err) {
      if (err instanceof CollateralError || err instanceof CertError) return fail(id, err.code, err.message);
      return fail(id, 'COLLATERAL_MALFORMED', (err as Error).message?.slice(0, 120) ?? 'error');
    }
  };

  // TCB signing chain
  let signer: Cert | undefined;
  const needSigner = col.tcbInfo !== undefined || col.qeIdentity !== undefined;
  if (!col.tcbSigningChain) {
    checks.push(
      needSigner
        ? fail(
            'tdx.collateral_signer',
            'CHAIN_NOT_SUPPLIED',
            'TCB info / QE identity supplied without the TCB signing chain',
          )
        : absent('tdx.collateral_signer', 'TCB signing chain'),
    );
  } else {
    const chain = col.tcbSigningChain;
    checks.push(
      run('tdx.collateral_signer', () => {
        const certs = certsFromBytes(chain);
        const roots = rootsFor(input.trustStore, ['intel-sgx-root']);
        const r = validateChain({
          certs,
          roots,
          at: input.at,
          leafProfile: (c) =>
            /CN=Intel SGX TCB Signing(\n|,|$)/.test(c.node.subject)
              ? null
              : 'the signer is not Intel SGX TCB Signing',
          what: 'TCB signing',
          usedFor: 'tdx-collateral',
        });
        if (r.status === 'anchored') {
          signer = r.path[0];
          anchors.push(r.anchor);
          return pass('tdx.collateral_signer', `TCB signing chain ${r.detail}`);
        }
        return fail('tdx.collateral_signer', r.code, `TCB signing chain: ${r.detail}`);
      }),
    );
  }
  const needSigned = (id: string): CheckResult | null =>
    signer ? null : fail(id, 'DEPENDENCY_FAILED', 'the TCB signing chain did not validate');

  // PCK SGX extension (needed by TCB info)
  let ext: PckExtension | undefined;
  let extProblem: string | null = null;
  if (input.pck) {
    try {
      ext = pckExtension(input.pck);
    } catch (err) {
      extProblem = (err as Error).message;
    }
  } else extProblem = 'the PCK chain did not validate';

  // TCB info
  let tcbInfoValue: Record<string, unknown> | undefined;
  const tcbRaw = col.tcbInfo;
  if (!tcbRaw) checks.push(absent('tdx.tcb_info', 'TCB info'));
  else {
    checks.push(
      needSigned('tdx.tcb_info') ??
        run('tdx.tcb_info', () => {
          const { signed, signature, value } = signedJson(Buffer.from(tcbRaw), 'tcbInfo');
          if (!signer || !verifyP256(signed, signature, signer)) {
            throw new CollateralError(
              'COLLATERAL_SIGNATURE_INVALID',
              `TCB info signature does not verify over the ${signed.length} raw bytes of "tcbInfo"`,
            );
          }
          if (value.id !== 'TDX' || value.version !== 3) {
            throw new CollateralError('COLLATERAL_MISMATCH', 'TCB info is not id TDX version 3');
          }
          window(value, input.at, 'TCB info');
          if (!ext)
            throw new CollateralError('DEPENDENCY_FAILED', `PCK extension unavailable: ${extProblem}`);
          if (!hexEq(value.fmspc, ext.fmspc) || !hexEq(value.pceId, ext.pceId)) {
            throw new CollateralError(
              'COLLATERAL_MISMATCH',
              `TCB info is for FMSPC ${String(value.fmspc).slice(0, 12)} / PCEID ${String(value.pceId).slice(0, 4)}, the PCK for ${ext.fmspc.toString('hex')} / ${ext.pceId.toString('hex')}`,
            );
          }
          const q = input.quote.body;
          const mod = matchTdxModule(value, q);
          if (!mod.ok) return fail('tdx.tcb_info', mod.code, mod.detail);
          if (!Array.isArray(value.tcbLevels)) throw new CollateralError('COLLATERAL_MALFORMED', 'tcbLevels');
          tcbInfoValue = value;
          return pass(
            'tdx.tcb_info',
            `TCB info (FMSPC ${ext.fmspc.toString('hex')}, ${value.tcbLevels.length} levels) signature valid over the raw bytes; valid at ${input.at.toISOString()}; TDX module matches ${mod.id === 'tdxModule' ? 'tdxModule (module version 0)' : `tdxModuleIdentities ${mod.id}`}`,
          );
        }),
    );
  }

  // QE identity
  const qeRaw = col.qeIdentity;
  let qeStatus: string | undefined;
  if (!qeRaw) checks.push(absent('tdx.qe_identity', 'QE identity'));
  else {
    checks.push(
      needSigned('tdx.qe_identity') ??
        run('tdx.qe_identity', () => {
          const { signed, signature, value } = signedJson(Buffer.from(qeRaw), 'enclaveIdentity');
          if (!signer || !verifyP256(signed, signature, signer)) {
            throw new CollateralError(
              'COLLATERAL_SIGNATURE_INVALID',
              `QE identity signature does not verify over the ${signed.length} raw bytes of "enclaveIdentity"`,
            );
          }
          if (value.id !== 'TD_QE' || value.version !== 2) {
            throw new CollateralError('COLLATERAL_MISMATCH', 'QE identity is not id TD_QE version 2');
          }
          window(value, input.at, 'QE identity');
          const qe = input.quote.qeReport;
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
          if (!masked(qe.attributes, attrMask).equals(masked(attrWant, attrMask)))
            problems.push('ATTRIBUTES');
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
          qeStatus = String(level.tcbStatus);
          if (!accepted.includes(qeStatus)) {
            throw new CollateralError(
              'TCB_STATUS_NOT_ACCEPTED',
              `QE identity status ${qeStatus.slice(0, 40)} is not accepted`,
            );
          }
          return pass(
            'tdx.qe_identity',
            `QE identity signature valid; QE matches; ISVSVN ${qe.isvSvn} → ${qeStatus}`,
          );
        }),
    );
  }

  // CRLs
  if (!col.pckCrl && !col.rootCrl) checks.push(absent('tdx.crl', 'CRLs'));
  else {
    checks.push(
      run('tdx.crl', () => {
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
      }),
    );
  }

  // TCB status from the TCB levels
  let tcbStatus: string | undefined;
  if (!tcbRaw) checks.push(absent('tdx.tcb_status', 'TCB info'));
  else if (!tcbInfoValue || !ext)
    checks.push(fail('tdx.tcb_status', 'DEPENDENCY_FAILED', 'the TCB info did not verify'));
  else {
    const info = tcbInfoValue;
    const pckExt = ext;
    checks.push(
      run('tdx.tcb_status', () => {
        const q = input.quote.body;
        const e = evaluateTdxTcb(info, {
          teeTcbSvn: q.teeTcbSvn,
          mrSignerSeam: q.mrSignerSeam,
          seamAttributes: q.seamAttributes,
          sgxTcbComponents: pckExt.tcbComponents,
          pceSvn: pckExt.pceSvn,
        });
        if (!e.ok) return fail('tdx.tcb_status', e.code, e.detail);
        tcbStatus = e.status;
        const how =
          e.module.status === null
            ? `TCB level ${e.platformStatus}`
            : `TCB level ${e.platformStatus}; TDX module ${e.module.id} ISVSVN ${e.module.isvSvn} → ${e.module.status}`;
        if (!accepted.includes(e.status)) {
          throw new CollateralError(
            'TCB_STATUS_NOT_ACCEPTED',
            `TCB status ${e.status.slice(0, 40)} (${how.slice(0, 120)}) is not accepted (${accepted.join(', ')})`,
          );
        }
        return pass(
          'tdx.tcb_status',
          `TCB status ${e.status} (${how})${qeStatus ? `; QE identity ${qeStatus}` : ''}`,
        );
      }),
    );
  }
  return { checks, anchors, notes, ...(tcbStatus ? { tcbStatus } : {}) };
}
