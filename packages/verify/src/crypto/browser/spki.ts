/**
 * SubjectPublicKeyInfo (RFC 5280 §4.1.2.7) ↔ key material, for the browser stand-in of
 * node:crypto: RSA (RFC 8017 A.1.1; rsaEncryption and RSASSA-PSS key OIDs), EC named curves
 * P-256/P-384/P-521 (RFC 5480, uncompressed point) and Ed25519 (RFC 8410). Encoding and decoding
 * are @peculiar/asn1-*; this module only picks the fields.
 */
import { ECParameters, id_ecPublicKey, id_secp256r1, id_secp384r1, id_secp521r1 } from '@peculiar/asn1-ecc';
import { id_RSASSA_PSS, id_rsaEncryption, RSAPublicKey } from '@peculiar/asn1-rsa';
import { AsnConvert } from '@peculiar/asn1-schema';
import { AlgorithmIdentifier, SubjectPublicKeyInfo } from '@peculiar/asn1-x509';
import type { CurveName, KeyData } from './node-crypto.js';

const ID_ED25519 = '1.3.101.112';
const CURVE_OIDS: Readonly<Record<string, CurveName>> = {
  [id_secp256r1]: 'P-256',
  [id_secp384r1]: 'P-384',
  [id_secp521r1]: 'P-521',
};
const OID_BY_CURVE: Readonly<Record<CurveName, string>> = {
  'P-256': id_secp256r1,
  'P-384': id_secp384r1,
  'P-521': id_secp521r1,
};

const u8 = (b: ArrayBuffer | Uint8Array) => new Uint8Array(b instanceof Uint8Array ? b : new Uint8Array(b));
/** A copy in its own ArrayBuffer (a Buffer's slice() is a view into a shared pool). */
const ab = (b: Uint8Array): ArrayBuffer => new Uint8Array(b).buffer as ArrayBuffer;

/** Unsigned big-endian integer bytes without leading zeros. */
function unsigned(b: Uint8Array): Uint8Array {
  let i = 0;
  while (i < b.length - 1 && b[i] === 0) i++;
  return b.subarray(i);
}

/** The key material of an SPKI. @throws Error on an unsupported or malformed key */
export function parseSpki(der: Uint8Array): KeyData {
  const spki = AsnConvert.parse(der, SubjectPublicKeyInfo);
  const oid = spki.algorithm.algorithm;
  const bits = u8(spki.subjectPublicKey);
  if (oid === id_rsaEncryption || oid === id_RSASSA_PSS) {
    const rsa = AsnConvert.parse(bits, RSAPublicKey);
    return {
      kty: oid === id_rsaEncryption ? 'rsa' : 'rsa-pss',
      n: unsigned(u8(rsa.modulus)),
      e: unsigned(u8(rsa.publicExponent)),
    };
  }
  if (oid === id_ecPublicKey) {
    const params = spki.algorithm.parameters;
    const named = params ? AsnConvert.parse(params, ECParameters).namedCurve : undefined;
    const crv = named ? CURVE_OIDS[named] : undefined;
    if (!crv) throw new Error('unsupported EC curve');
    return { kty: 'ec', crv, point: bits };
  }
  if (oid === ID_ED25519 && bits.length === 32) return { kty: 'ed25519', x: bits };
  throw new Error(`unsupported public key algorithm ${oid}`);
}

/** ASN.1 INTEGER content of an unsigned value (a 0x00 in front when the top bit is set). */
function asnInteger(b: Uint8Array): ArrayBuffer {
  const v = unsigned(b);
  return ab((v[0] ?? 0) & 0x80 ? Uint8Array.from([0, ...v]) : v);
}

/** The SPKI DER of key material, as OpenSSL exports it (RSA with NULL parameters). */
export function exportSpki(d: KeyData): Uint8Array {
  let algorithm: AlgorithmIdentifier;
  let key: ArrayBuffer;
  if (d.kty === 'rsa' || d.kty === 'rsa-pss') {
    if (d.kty === 'rsa-pss') throw new Error('RSA-PSS keys are exported from their certificate only');
    algorithm = new AlgorithmIdentifier({ algorithm: id_rsaEncryption, parameters: ab(Uint8Array.of(5, 0)) });
    key = AsnConvert.serialize(
      new RSAPublicKey({ modulus: asnInteger(d.n), publicExponent: asnInteger(d.e) }),
    );
  } else if (d.kty === 'ec') {
    const params = AsnConvert.serialize(new ECParameters({ namedCurve: OID_BY_CURVE[d.crv] }));
    algorithm = new AlgorithmIdentifier({ algorithm: id_ecPublicKey, parameters: params });
    key = ab(d.point);
  } else if (d.kty === 'ed25519') {
    algorithm = new AlgorithmIdentifier({ algorithm: ID_ED25519 });
    key = ab(d.x);
  } else {
    throw new Error('unsupported key type');
  }
  return u8(AsnConvert.serialize(new SubjectPublicKeyInfo({ algorithm, subjectPublicKey: key })));
}
