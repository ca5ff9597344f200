/**
 * Signs an EAR claims-set (ear.ts) as a JWT with the verifier's key, through `jose`
 * (draft-ietf-rats-ear-03 §3: "EAR is an EAT token which can be serialized as JWT"; RFC 7519).
 * Header: `alg` from the key (ES256 for P-256, ES384 for P-384, EdDSA for Ed25519), `typ`
 * `eat+jwt` (the media type application/eat+jwt of RFC 9782 in the short form of RFC 7515
 * §4.1.9), `kid` the RFC 7638 thumbprint of the public key.
 */
import { createPrivateKey, createPublicKey, type JsonWebKey, type KeyObject } from 'node:crypto';
import { calculateJwkThumbprint, importPKCS8, type JWK, SignJWT } from 'jose';
import { CmcpError } from './errors/index.js';

/** JWS algorithms an EAR key may use. */
export type EarAlg = 'ES256' | 'ES384' | 'EdDSA';

/**
 * The key given is not a usable private key; `message` says why (never echoes key material).
 * Code `EAR_KEY_INVALID`.
 */
export class EarKeyError extends CmcpError {
  constructor(message: string) {
    super('EAR_KEY_INVALID', message);
    this.name = 'EarKeyError';
  }
}

/** A verifier signing key, parsed. */
export interface EarSigningKey {
  alg: EarAlg;
  key: KeyObject;
  /** The public half as a JWK (for relying parties and the `kid`). */
  publicJwk: JWK;
}

function algOf(key: KeyObject): EarAlg {
  if (key.asymmetricKeyType === 'ed25519') return 'EdDSA';
  if (key.asymmetricKeyType === 'ec') {
    const curve = key.asymmetricKeyDetails?.namedCurve;
    if (curve === 'prime256v1') return 'ES256';
    if (curve === 'secp384r1') return 'ES384';
  }
  throw new EarKeyError('the key is not a P-256, P-384 or Ed25519 key');
}

/**
 * Parses a private key file's text: PEM (PKCS #8 or SEC1, RFC 7468) or a JWK (RFC 7517) with `d`.
 * @throws EarKeyError when it is neither, is a public key, or is of another type or curve.
 */
export function parseEarKey(text: string): EarSigningKey {
  let key: KeyObject;
  try {
    const trimmed = text.trim();
    if (trimmed.startsWith('{')) {
      const jwk = JSON.parse(trimmed) as JWK;
      if (typeof jwk.d !== 'string') throw new EarKeyError('the JWK has no private part (d)');
      key = createPrivateKey({ key: jwk as JsonWebKey, format: 'jwk' });
    } else {
      key = createPrivateKey(trimmed);
    }
  } catch (err) {
    if (err instanceof EarKeyError) throw err;
    throw new EarKeyError('not a private key in PEM or JWK form');
  }
  const alg = algOf(key);
  const publicJwk = createPublicKey(key).export({ format: 'jwk' }) as JWK;
  return { alg, key, publicJwk };
}

/**
 * Signs `claims` as a compact JWS (an EAR in JWT form) with `key`.
 * @returns the JWT text.
 */
export async function signEar(claims: Record<string, unknown>, key: EarSigningKey): Promise<string> {
  const pkcs8 = key.key.export({ format: 'pem', type: 'pkcs8' }).toString();
  const signer = await importPKCS8(pkcs8, key.alg);
  return new SignJWT(claims)
    .setProtectedHeader({ alg: key.alg, typ: 'eat+jwt', kid: await calculateJwkThumbprint(key.publicJwk) })
    .sign(signer);
}
