/**
 * TPMT_PUBLIC (TPM 2.0 Part 2 §12.2.4) for the key types the layer uses: RSA and ECC
 * (NIST P-256/P-384), with or without a symmetric definition. Decoding is the verifier
 * package's (`@cmcp/verify/abi/tpm/public`); here the public area becomes a node:crypto
 * KeyObject so it can be compared with a certificate's key, and Names and Qualified Names are
 * computed (Part 1 §16).
 */
import { createHash, createPublicKey, type KeyObject } from 'node:crypto';
import { AbiError, parseTpmtPublic } from '@cmcp/verify/abi';
import { TpmError } from './errors.js';
import { WireWriter } from './wire.js';

export { akAttributeProblem } from '@cmcp/verify/abi';

export const TPM2_ALG_SHA384 = 0x000c;
export const TPM2_ALG_AES = 0x0006;
export const TPM2_ALG_CFB = 0x0043;
export const TPM2_ECC_NIST_P384 = 0x0004;

/** nameAlg → node hash name and digest size. */
export const NAME_HASHES: Record<number, { node: string; size: number }> = {
  11: { node: 'sha256', size: 32 },
  12: { node: 'sha384', size: 48 },
  13: { node: 'sha512', size: 64 },
};

const CURVES: Record<number, { jwk: string; node: string; size: number }> = {
  3: { jwk: 'P-256', node: 'prime256v1', size: 32 },
  4: { jwk: 'P-384', node: 'secp384r1', size: 48 },
};

/** The fields of a public area the layer compares and uses. */
export interface ParsedPublic {
  type: number;
  nameAlg: number;
  attributes: number;
  authPolicy: Buffer;
  /** Symmetric definition of a storage/decrypt key: AES bits, or null (TPM_ALG_NULL). */
  symmetric: { alg: number; keyBits: number; mode: number } | null;
  scheme: { alg: number; hash: number | null };
  rsa: { keyBits: number; exponent: number; n: Buffer } | null;
  ecc: { curve: number; kdf: number; x: Buffer; y: Buffer } | null;
}

function hashOf(nameAlg: number): { node: string; size: number } {
  const h = NAME_HASHES[nameAlg];
  if (!h) throw new TpmError('TPM_BAD_INPUT', `unsupported nameAlg 0x${nameAlg.toString(16)}`);
  return h;
}

/**
 * Parses TPMT_PUBLIC wire bytes (RSA or ECC only).
 * @throws TpmError TPM_BAD_INPUT (another key type) / TPM_BAD_RESPONSE (does not unmarshal)
 */
export function parsePublic(area: Buffer): ParsedPublic {
  let p: ReturnType<typeof parseTpmtPublic>;
  try {
    p = parseTpmtPublic(area);
  } catch (err) {
    if (!(err instanceof AbiError)) throw err;
    const code = err.code === 'AK_PUBLIC_UNSUPPORTED' ? 'TPM_BAD_INPUT' : 'TPM_BAD_RESPONSE';
    throw new TpmError(code, err.message, null, { cause: err });
  }
  return {
    type: p.type,
    nameAlg: p.nameAlg,
    attributes: p.objectAttributes,
    authPolicy: p.authPolicy,
    symmetric: p.symmetric
      ? { alg: p.symmetric.algorithm, keyBits: p.symmetric.keyBits, mode: p.symmetric.mode }
      : null,
    scheme: { alg: p.scheme.scheme, hash: p.scheme.hashAlg },
    rsa: p.rsa ? { keyBits: p.rsa.keyBits, exponent: p.rsa.exponent, n: p.rsa.modulus } : null,
    ecc: p.ecc ? { curve: p.ecc.curveId, kdf: p.ecc.kdf.scheme, x: p.ecc.x, y: p.ecc.y } : null,
  };
}

function leftPad(b: Buffer, size: number): Buffer {
  if (b.length > size) throw new TpmError('TPM_BAD_INPUT', 'coordinate longer than the curve size');
  return Buffer.concat([Buffer.alloc(size - b.length), b]);
}

/** The public key of a parsed public area as a KeyObject (RSA or EC). */
export function publicKeyOf(p: ParsedPublic): KeyObject {
  if (p.rsa) {
    if (p.rsa.n.length === 0) throw new TpmError('TPM_BAD_INPUT', 'RSA public area has no modulus');
    const e = Buffer.alloc(4);
    e.writeUInt32BE(p.rsa.exponent === 0 ? 65537 : p.rsa.exponent);
    const eTrim = e.subarray(e.findIndex((x) => x !== 0));
    return createPublicKey({
      key: { kty: 'RSA', n: p.rsa.n.toString('base64url'), e: eTrim.toString('base64url') },
      format: 'jwk',
    });
  }
  const c = p.ecc ? CURVES[p.ecc.curve] : undefined;
  if (!p.ecc || !c) throw new TpmError('TPM_BAD_INPUT', 'unsupported ECC curve');
  return createPublicKey({
    key: {
      kty: 'EC',
      crv: c.jwk,
      x: leftPad(p.ecc.x, c.size).toString('base64url'),
      y: leftPad(p.ecc.y, c.size).toString('base64url'),
    },
    format: 'jwk',
  });
}

/** Node curve name and coordinate size for a TPM_ECC_CURVE. */
export function curveInfo(curve: number): { node: string; size: number } | undefined {
  return CURVES[curve];
}

/** SubjectPublicKeyInfo DER of a key, for comparing keys across formats. */
export function spkiDer(key: KeyObject): Buffer {
  return key.export({ format: 'der', type: 'spki' });
}

/** Name (Part 1 §16): nameAlg ‖ H_nameAlg(TPMT_PUBLIC). */
export function nameOfPublic(area: Buffer): Buffer {
  const nameAlg = area.readUInt16BE(2);
  const h = hashOf(nameAlg);
  return Buffer.concat([new WireWriter().u16(nameAlg).done(), createHash(h.node).update(area).digest()]);
}

/** The Qualified Name of a hierarchy (its 4-byte handle, Part 1 §16). */
export function hierarchyQualifiedName(hierarchy: number): Buffer {
  return new WireWriter().u32(hierarchy).done();
}

/**
 * Qualified Name of an object (Part 1 §16.5): nameAlg ‖ H_nameAlg(QN(parent) ‖ Name), where
 * nameAlg is the object's own (the first two bytes of its Name).
 */
export function qualifiedNameOf(parentQn: Buffer, name: Buffer): Buffer {
  const nameAlg = name.readUInt16BE(0);
  const h = hashOf(nameAlg);
  return Buffer.concat([
    new WireWriter().u16(nameAlg).done(),
    createHash(h.node).update(parentQn).update(name).digest(),
  ]);
}
