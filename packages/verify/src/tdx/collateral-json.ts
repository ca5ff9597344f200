/**
 * Intel PCS collateral JSON as signed bytes: the raw top-level members of a response (the
 * signature covers the member exactly as received, never re-serialised JSON), validity windows,
 * hex fields, and the one error class of collateral checks.
 */
import { verifyEcdsaP1363 } from '../crypto/signatures.js';
import { CmcpError } from '../errors/index.js';
import type { Cert } from '../x509.js';

export type CollateralErrorCode =
  | 'COLLATERAL_MALFORMED'
  | 'COLLATERAL_MISMATCH'
  | 'COLLATERAL_SIGNATURE_INVALID'
  | 'COLLATERAL_EXPIRED'
  | 'CERT_REVOKED'
  | 'TCB_LEVEL_NOT_FOUND'
  | 'TCB_STATUS_NOT_ACCEPTED'
  | 'DEPENDENCY_FAILED';

/** Collateral that cannot be used; `code` is registered and is the failed check's reason. */
export class CollateralError extends CmcpError {
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
export function signedJson(
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

export function verifyP256(data: Buffer, sig: Buffer, cert: Cert): boolean {
  try {
    return verifyEcdsaP1363('sha256', data, cert.node.publicKey, sig);
  } catch {
    return false;
  }
}

export function window(value: Record<string, unknown>, at: Date, what: string): void {
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

export const hexEq = (a: unknown, b: Buffer) =>
  typeof a === 'string' && a.toLowerCase() === b.toString('hex');

export function hexBytes(v: unknown, n: number, what: string): Buffer {
  if (typeof v !== 'string' || !new RegExp(`^[0-9a-fA-F]{${2 * n}}$`).test(v)) {
    throw new CollateralError('COLLATERAL_MALFORMED', `${what} is not ${n} bytes of hex`);
  }
  return Buffer.from(v, 'hex');
}

export function masked(value: Buffer, mask: Buffer): Buffer {
  return Buffer.from(value.map((x, i) => x & (mask[i] ?? 0)));
}

export function svnList(v: unknown, what: string): number[] {
  if (!Array.isArray(v) || v.length !== 16)
    throw new CollateralError('COLLATERAL_MALFORMED', `${what} is not 16 components`);
  return v.map((c) => {
    const svn = (c as { svn?: unknown }).svn;
    if (typeof svn !== 'number' || !Number.isInteger(svn))
      throw new CollateralError('COLLATERAL_MALFORMED', `${what} svn`);
    return svn;
  });
}
