/**
 * The HCL report's runtime data: a JSON document the paravisor hashes into REPORT_DATA. Its
 * `keys` member is a JWK set (RFC 7517 §5) holding the vTPM attestation key as the key with
 * `kid` "HCLAkPub" (and, on some images, the EK as "HCLEkPub"); `vm-configuration` and
 * `user-data` are informational. Only the shape is checked here; the key is built by the
 * verifier (azure/signature.ts). Source: azure-cvm-tooling `az-cvm-vtpm/src/hcl` (VarDataKeys).
 */
import { AbiError } from '../errors.js';

/** The `kid` of the vTPM attestation key in the runtime data. */
export const HCL_AKPUB_KID = 'HCLAkPub';

/** A JWK as found in the runtime data (public members only are read). */
export interface RuntimeJwk {
  kid: string;
  kty: 'RSA' | 'EC';
  n?: string;
  e?: string;
  crv?: string;
  x?: string;
  y?: string;
}

/** Parsed runtime data. */
export interface HclRuntimeData {
  /** The HCLAkPub JWK. */
  akPub: RuntimeJwk;
  /** `vm-configuration`, when an object. */
  vmConfiguration?: Record<string, unknown>;
  /** `user-data`, when a string. */
  userData?: string;
}

const B64U = /^[A-Za-z0-9_-]+$/;

function malformed(msg: string, field: string): AbiError {
  return new AbiError('HCL_RUNTIME_DATA_MALFORMED', `HCL runtime data: ${msg}`, 'HCL_RUNTIME_DATA', field);
}

function jwk(k: unknown, i: number): RuntimeJwk {
  if (typeof k !== 'object' || k === null || Array.isArray(k))
    throw malformed(`keys[${i}] is not an object`, 'keys');
  const o = k as Record<string, unknown>;
  const str = (m: string) => {
    const v = o[m];
    if (typeof v !== 'string' || !B64U.test(v))
      throw malformed(`keys[${i}].${m} is not base64url`, `keys.${m}`);
    return v;
  };
  if (o.kty === 'RSA') return { kid: HCL_AKPUB_KID, kty: 'RSA', n: str('n'), e: str('e') };
  if (o.kty === 'EC') {
    if (typeof o.crv !== 'string') throw malformed(`keys[${i}].crv is not a string`, 'keys.crv');
    return { kid: HCL_AKPUB_KID, kty: 'EC', crv: o.crv, x: str('x'), y: str('y') };
  }
  throw malformed(`keys[${i}].kty is not RSA or EC`, 'keys.kty');
}

/**
 * Parses the runtime data JSON and takes exactly one HCLAkPub key from `keys`.
 * @throws AbiError HCL_RUNTIME_DATA_MALFORMED (not UTF-8 JSON, no `keys` array, no or two
 *   HCLAkPub keys, a key without RSA n/e or EC crv/x/y).
 */
export function parseHclRuntimeData(bytes: Uint8Array): HclRuntimeData {
  let doc: unknown;
  try {
    doc = JSON.parse(new TextDecoder('utf-8', { fatal: true }).decode(bytes));
  } catch {
    throw malformed('not UTF-8 JSON', 'variable_data');
  }
  if (typeof doc !== 'object' || doc === null || Array.isArray(doc))
    throw malformed('not a JSON object', 'variable_data');
  const o = doc as Record<string, unknown>;
  if (!Array.isArray(o.keys)) throw malformed('no "keys" array', 'keys');
  const found = o.keys
    .map((k, i) => ({ k, i }))
    .filter(({ k }) => typeof k === 'object' && k !== null && (k as { kid?: unknown }).kid === HCL_AKPUB_KID);
  if (found.length !== 1)
    throw malformed(`${found.length} keys have kid "HCLAkPub" (need exactly one)`, 'keys.kid');
  const one = found[0] as { k: unknown; i: number };
  const out: HclRuntimeData = { akPub: jwk(one.k, one.i) };
  const vm = o['vm-configuration'];
  if (typeof vm === 'object' && vm !== null && !Array.isArray(vm))
    out.vmConfiguration = vm as Record<string, unknown>;
  if (typeof o['user-data'] === 'string') out.userData = o['user-data'];
  return out;
}
