/**
 * Detached Ed25519 signatures over a policy bundle hash (docs/spec/policy.md#operator-controls).
 *
 * Signed message: the UTF-8 bytes of
 * JCS({"domain":"cmcp.policy-bundle","version":1,"bundle_hash":"sha256:<hex>"}) — the bundle
 * hash with a domain tag, so a policy key's signature can never be replayed as anything
 * else. Signature: 64 bytes, base64url without padding (RFC 8032 Ed25519, RFC 4648 §5).
 *
 * The pinned policy public key is configured as either an SPKI PEM block or the 32-byte raw
 * key in base64url (the `x` of an RFC 8037 OKP JWK).
 */
import {
  createPrivateKey,
  createPublicKey,
  sign as cryptoSign,
  verify as cryptoVerify,
  generateKeyPairSync,
  type KeyObject,
} from 'node:crypto';
import { canonicalJson, fromB64u } from '@cmcp/verify/formats';
import { CmcpError } from '../errors/index.js';

/** Thrown for an unusable key. */
export class PolicyKeyError extends CmcpError {
  declare readonly code: 'POLICY_KEY_INVALID';
  constructor(message: string) {
    super('POLICY_KEY_INVALID', message);
    this.name = 'PolicyKeyError';
  }
}

/** The exact bytes a policy key signs for a bundle hash. */
export function bundleSignaturePayload(bundleHash: string): Buffer {
  return Buffer.from(
    canonicalJson({ domain: 'cmcp.policy-bundle', version: 1, bundle_hash: bundleHash }),
    'utf8',
  );
}

/**
 * Parses a configured policy public key (SPKI PEM or base64url raw 32 bytes).
 * @throws PolicyKeyError when it is neither, or not Ed25519.
 */
export function parsePolicyPublicKey(text: string): KeyObject {
  let key: KeyObject;
  try {
    if (text.trim().startsWith('-----BEGIN')) {
      key = createPublicKey(text);
    } else {
      const raw = fromB64u(text.trim());
      if (raw.length !== 32) throw new Error('not 32 bytes');
      key = createPublicKey({ key: { kty: 'OKP', crv: 'Ed25519', x: text.trim() }, format: 'jwk' });
    }
  } catch (e) {
    throw new PolicyKeyError(`policy signing key is not an Ed25519 public key (${(e as Error).message})`);
  }
  if (key.asymmetricKeyType !== 'ed25519') throw new PolicyKeyError('policy signing key is not Ed25519');
  return key;
}

/**
 * Checks a detached signature (base64url) over a bundle hash.
 * @returns false for a malformed or non-verifying signature; never throws.
 */
export function verifyBundleSignature(bundleHash: string, signature: string, key: KeyObject): boolean {
  try {
    const sig = fromB64u(signature);
    if (sig.length !== 64) return false;
    return cryptoVerify(null, bundleSignaturePayload(bundleHash), key, sig);
  } catch {
    return false;
  }
}

/**
 * Signs a bundle hash with an Ed25519 private key (PKCS#8 PEM text or KeyObject).
 * @returns base64url signature.
 * @throws PolicyKeyError when the key is not an Ed25519 private key.
 */
export function signBundleHash(bundleHash: string, privateKey: string | KeyObject): string {
  let key: KeyObject;
  try {
    key = typeof privateKey === 'string' ? createPrivateKey(privateKey) : privateKey;
  } catch (e) {
    throw new PolicyKeyError(`not a private key (${(e as Error).message})`);
  }
  if (key.asymmetricKeyType !== 'ed25519') throw new PolicyKeyError('the signing key is not Ed25519');
  return cryptoSign(null, bundleSignaturePayload(bundleHash), key).toString('base64url');
}

/** A new policy key pair: PKCS#8 PEM private key, SPKI PEM public key, raw public key (b64url). */
export function generatePolicyKey(): { privatePem: string; publicPem: string; publicRaw: string } {
  const { privateKey, publicKey } = generateKeyPairSync('ed25519');
  const jwk = publicKey.export({ format: 'jwk' }) as { x: string };
  return {
    privatePem: privateKey.export({ format: 'pem', type: 'pkcs8' }) as string,
    publicPem: publicKey.export({ format: 'pem', type: 'spki' }) as string,
    publicRaw: jwk.x,
  };
}
