/**
 * Public keys from raw hardware key material: TPMT_PUBLIC unique fields (TPM 2.0 Part 2
 * §12.2.3.2; RSA modulus + exponent, ECC point), the SEV-SNP P-384 and TDX P-256 points.
 * Every constructor returns a result instead of throwing, so callers report a reason code.
 */
import { createPublicKey, type KeyObject } from 'node:crypto';
import { b64u } from '../format/canonical.js';

export type { KeyObject } from 'node:crypto';

/** A key, or why it could not be built. */
export type KeyResult = { ok: true; key: KeyObject } | { ok: false; detail: string };

/** JWK curve names per coordinate size. */
const CURVE_BY_SIZE: Readonly<Record<number, string>> = { 32: 'P-256', 48: 'P-384', 66: 'P-521' };

function leftPad(b: Uint8Array, size: number): Buffer {
  return b.length >= size ? Buffer.from(b) : Buffer.concat([Buffer.alloc(size - b.length), b]);
}

function errText(err: unknown): string {
  return (err instanceof Error ? err.message : String(err)).slice(0, 120);
}

/** An RSA public key from its big-endian modulus and exponent (0 ⇒ 65537, TPM 2.0 Part 2 §12.2.3.5). */
export function rsaPublicKey(modulus: Uint8Array, exponent: number): KeyResult {
  const e = Buffer.alloc(4);
  e.writeUInt32BE(exponent === 0 ? 65537 : exponent >>> 0);
  let i = 0;
  while (i < 3 && e[i] === 0) i++;
  try {
    return {
      ok: true,
      key: createPublicKey({ key: { kty: 'RSA', n: b64u(modulus), e: b64u(e.subarray(i)) }, format: 'jwk' }),
    };
  } catch (err) {
    return { ok: false, detail: errText(err) };
  }
}

/**
 * An EC public key from big-endian X and Y on the NIST curve whose coordinate size is `size`
 * (32 P-256, 48 P-384, 66 P-521); shorter coordinates are left-padded.
 */
export function ecPublicKey(x: Uint8Array, y: Uint8Array, size: 32 | 48 | 66): KeyResult {
  if (x.length > size || y.length > size)
    return { ok: false, detail: 'coordinate longer than the curve size' };
  try {
    const jwk = { kty: 'EC', crv: CURVE_BY_SIZE[size], x: b64u(leftPad(x, size)), y: b64u(leftPad(y, size)) };
    return { ok: true, key: createPublicKey({ key: jwk, format: 'jwk' }) };
  } catch (err) {
    return { ok: false, detail: errText(err) };
  }
}

/** A public key from a JWK (RFC 7517), e.g. a claim's Ed25519 `cnf.jwk`. @throws Error when not a key */
export function jwkPublicKey(jwk: Record<string, unknown>): KeyObject {
  return createPublicKey({ key: jwk, format: 'jwk' });
}

/** Builds an EC P-384 key from big-endian X and Y (for tests and tools). @throws Error */
export function p384Key(x: Uint8Array, y: Uint8Array): KeyObject {
  const k = ecPublicKey(x, y, 48);
  if (!k.ok) throw new Error(`not a P-384 point: ${k.detail}`);
  return k.key;
}

/** EC key type and coordinate size of a key, or null when it is not a NIST EC key. */
export function ecCurveSize(key: KeyObject): 32 | 48 | 66 | null {
  if (key.asymmetricKeyType !== 'ec') return null;
  const c = key.asymmetricKeyDetails?.namedCurve;
  return c === 'prime256v1' ? 32 : c === 'secp384r1' ? 48 : c === 'secp521r1' ? 66 : null;
}

/** RSA modulus size in bytes, or null when the key is not RSA. */
export function rsaModulusBytes(key: KeyObject): number | null {
  if (key.asymmetricKeyType !== 'rsa') return null;
  return Math.ceil((key.asymmetricKeyDetails?.modulusLength ?? 0) / 8);
}
