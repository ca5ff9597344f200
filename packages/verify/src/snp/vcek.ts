/**
 * AMD VCEK/VLEK certificate extensions (AMD "Versioned Chip Endorsement Key (VCEK) Certificate
 * and KDS Interface Specification" 57230, Table 8): product name, TCB SPLs, hwID.
 */
import * as asn1js from 'asn1js';
import { SNP_PRODUCTS, type SnpProduct } from '../abi/snp/tcb.js';
import { type Cert, CertError, extensionValue } from '../x509.js';

/** AMD VCEK/VLEK extension OIDs. */
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

/** The VLEK CSP-ID (IA5String naming the cloud provider the VLEK was issued to), or null. @throws CertError */
export function cspIdExtension(c: Cert): string | null {
  const v = extensionValue(c, SNP_OID.cspID);
  if (!v) return null;
  const d = derValue(v);
  if (!(d instanceof asn1js.IA5String)) throw new CertError('CERT_MALFORMED', 'csp_id is not an IA5String');
  return d.valueBlock.value;
}

/**
 * End-entity rule of a VLEK (AMD "VLEK certificate" extensions, OID 1.3.6.1.4.1.3704.1.5): it must
 * carry a non-empty CSP-ID naming the cloud service provider it was issued to; a VLEK without one
 * is refused. @returns the problem, or null.
 */
export function vlekLeafProblem(leaf: Cert): string | null {
  let id: string | null;
  try {
    id = cspIdExtension(leaf);
  } catch (err) {
    return `the VLEK CSP-ID extension does not parse (${(err as Error).message.slice(0, 60)})`;
  }
  return id ? null : `the VLEK certificate has no CSP-ID extension (${SNP_OID.cspID})`;
}

/** Product family of a productName ("Milan-B0" → Milan). */
export function productFromName(name: string): SnpProduct | null {
  const head = name.split('-')[0] ?? '';
  return (SNP_PRODUCTS as readonly string[]).includes(head) ? (head as SnpProduct) : null;
}
