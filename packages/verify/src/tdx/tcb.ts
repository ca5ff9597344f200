/**
 * TDX TCB matching on parsed collateral (Intel "TDX DCAP Quote Verification", TCB info v3): the
 * TDX module identity for TEE_TCB_SVN and the TCB level for the platform's SGX and TDX
 * components and PCESVN. Pure functions of parsed values.
 */
import type { ReasonCode } from '../result.js';
import { CollateralError, hexBytes, hexEq, masked, svnList } from './collateral-json.js';

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
