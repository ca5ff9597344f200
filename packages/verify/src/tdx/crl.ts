/**
 * PCK and Root CA CRLs (RFC 5280 §5) for TDX collateral: parsed with @peculiar/x509, signature
 * verified over the raw tbsCertList, validity at the verification time, revoked serials.
 */
import 'reflect-metadata';
import * as px from '@peculiar/x509';
import * as asn1js from 'asn1js';
import { verifyWithKey } from '../crypto/signatures.js';
import { type Cert, pemBlocks, sha256hex } from '../x509.js';
import { CollateralError } from './collateral-json.js';

// ---------- CRLs ----------

export class RawCrl extends px.X509Crl {
  get tbsRaw(): Buffer {
    const raw = this.asn.tbsCertListRaw;
    if (!raw) throw new CollateralError('COLLATERAL_MALFORMED', 'CRL has no raw tbsCertList');
    return Buffer.from(raw);
  }
}

const crlCache = new Map<string, RawCrl>();

/** Parses a CRL (DER or PEM); cached by the SHA-256 of the bytes (parsing is pure). */
export function parseCrl(bytes: Uint8Array): RawCrl {
  const buf = Buffer.from(bytes);
  const key = sha256hex(buf);
  const hit = crlCache.get(key);
  if (hit) return hit;
  const crl = parseCrlUncached(buf);
  if (crlCache.size >= 64) crlCache.clear();
  crlCache.set(key, crl);
  return crl;
}

/**
 * The CRL is DER exactly (RFC 5280 §5.1, X.690 §10): one CertificateList SEQUENCE that
 * re-encodes to the same bytes, whose signatureAlgorithm equals tbsCertList.signature
 * (§5.1.1.2). The outer algorithm is not signed: without this, bytes outside tbsCertList could
 * change and the CRL still verify.
 */
function strictCrlDer(der: Buffer): void {
  const parsed = asn1js.fromBER(new Uint8Array(der));
  const list = parsed.result;
  if (parsed.offset !== der.length || !(list instanceof asn1js.Sequence)) throw new Error('not one SEQUENCE');
  if (!Buffer.from(list.toBER()).equals(der)) throw new Error('not DER');
  const [tbs, outerAlg] = list.valueBlock.value;
  if (!(tbs instanceof asn1js.Sequence) || !(outerAlg instanceof asn1js.Sequence))
    throw new Error('not a CertificateList');
  const fields = tbs.valueBlock.value;
  const innerAlg = fields[0] instanceof asn1js.Integer ? fields[1] : fields[0];
  if (!innerAlg || !Buffer.from(innerAlg.toBER()).equals(Buffer.from(outerAlg.toBER())))
    throw new Error('signatureAlgorithm differs from tbsCertList.signature');
}

export function parseCrlUncached(buf: Buffer): RawCrl {
  try {
    const der = buf[0] === 0x30 ? buf : pemBlocks(buf.toString('latin1'), 'X509 CRL')[0];
    if (!der) throw new Error('empty');
    strictCrlDer(der);
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

export function checkCrl(crl: RawCrl, issuer: Cert, at: Date, what: string): void {
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

export function revoked(crl: RawCrl, cert: Cert): boolean {
  const want = serialKey(cert.node.serialNumber);
  return crl.entries.some((e) => serialKey(e.serialNumber) === want);
}
