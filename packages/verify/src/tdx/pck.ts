/**
 * Intel SGX PCK certificates (Intel "SGX PCK Certificate and CRL Profile Specification"): the
 * SGX extension (OID 1.2.840.113741.1.13.1: FMSPC, PCEID, TCB component SVNs, PCESVN, CPUSVN)
 * and the PCK end-entity profile.
 */
import * as asn1js from 'asn1js';
import { type Cert, CertError, extensionValue } from '../x509.js';

/** Intel SGX PCK certificate extension (OID 1.2.840.113741.1.13.1). */
export interface PckExtension {
  fmspc: Buffer;
  pceId: Buffer;
  /** SGX TCB component SVNs 1..16. */
  tcbComponents: number[];
  pceSvn: number;
  cpuSvn: Buffer;
}

const SGX_EXT = '1.2.840.113741.1.13.1';

function asSeq(x: asn1js.AsnType | undefined, what: string): asn1js.AsnType[] {
  if (!(x instanceof asn1js.Sequence)) throw new CertError('CERT_MALFORMED', `${what} is not a SEQUENCE`);
  return x.valueBlock.value as asn1js.AsnType[];
}

/** Reads the SGX extension of a PCK certificate. @throws CertError CERT_MALFORMED */
export function pckExtension(pck: Cert): PckExtension {
  const v = extensionValue(pck, SGX_EXT);
  if (!v) throw new CertError('CERT_MALFORMED', 'the PCK certificate has no SGX extension');
  const parsed = asn1js.fromBER(new Uint8Array(v));
  if (parsed.offset !== v.length) throw new CertError('CERT_MALFORMED', 'SGX extension is not DER');
  const items = new Map<string, asn1js.AsnType>();
  for (const item of asSeq(parsed.result, 'SGX extension')) {
    const [oid, val] = asSeq(item, 'SGX extension item');
    if (!(oid instanceof asn1js.ObjectIdentifier) || !val)
      throw new CertError('CERT_MALFORMED', 'SGX extension item');
    items.set(oid.valueBlock.toString(), val);
  }
  const octets = (oid: string, n: number): Buffer => {
    const x = items.get(oid);
    if (!(x instanceof asn1js.OctetString))
      throw new CertError('CERT_MALFORMED', `SGX ${oid} is not an OCTET STRING`);
    const buf = Buffer.from(x.valueBlock.valueHexView);
    if (buf.length !== n) throw new CertError('CERT_MALFORMED', `SGX ${oid} is not ${n} bytes`);
    return buf;
  };
  const tcb = new Map<string, asn1js.AsnType>();
  for (const item of asSeq(items.get(`${SGX_EXT}.2`), 'SGX TCB')) {
    const [oid, val] = asSeq(item, 'SGX TCB item');
    if (!(oid instanceof asn1js.ObjectIdentifier) || !val)
      throw new CertError('CERT_MALFORMED', 'SGX TCB item');
    tcb.set(oid.valueBlock.toString(), val);
  }
  const int = (oid: string): number => {
    const x = tcb.get(oid);
    if (!(x instanceof asn1js.Integer)) throw new CertError('CERT_MALFORMED', `SGX ${oid} is not an INTEGER`);
    return x.valueBlock.valueDec;
  };
  const comps: number[] = [];
  for (let i = 1; i <= 16; i++) comps.push(int(`${SGX_EXT}.2.${i}`));
  const cpu = tcb.get(`${SGX_EXT}.2.18`);
  if (!(cpu instanceof asn1js.OctetString)) throw new CertError('CERT_MALFORMED', 'SGX CPUSVN');
  return {
    fmspc: octets(`${SGX_EXT}.4`, 6),
    pceId: octets(`${SGX_EXT}.3`, 2),
    tcbComponents: comps,
    pceSvn: int(`${SGX_EXT}.2.17`),
    cpuSvn: Buffer.from(cpu.valueBlock.valueHexView),
  };
}

/** PCK end-entity profile: CN "Intel SGX PCK Certificate" and an SGX extension. */
export function pckLeafProblem(leaf: Cert): string | null {
  if (!/CN=Intel SGX PCK Certificate(\n|,|$)/.test(leaf.node.subject))
    return 'the PCK leaf is not an Intel SGX PCK Certificate';
  if (!extensionValue(leaf, SGX_EXT)) return 'the PCK leaf has no SGX extension';
  return null;
}
