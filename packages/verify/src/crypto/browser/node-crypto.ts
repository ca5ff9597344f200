/**
 * The part of `node:crypto` the verifier uses, for the browser bundle only: esbuild aliases
 * `node:crypto` to this module (scripts/build-browser.mjs), so the verifier stays one
 * synchronous code base and Node keeps node:crypto itself. Hashes are @noble/hashes; ECDSA
 * (P-256/P-384/P-521; DER or IEEE P1363 r‖s, high S accepted as OpenSSL does) and Ed25519
 * (RFC 8032 strict, not ZIP-215) are @noble/curves; RSA PKCS#1 v1.5 and PSS (RFC 8017 §8.2,
 * §8.1) are node-forge. Public keys come from JWKs (RFC 7517/7518/8037) and SubjectPublicKeyInfo
 * DER (RFC 5280 §4.1.2.7, @peculiar/asn1-*). Signing and private keys are gateway-side and not
 * here: they throw.
 */
import { ed25519 } from '@noble/curves/ed25519.js';
import { p256, p384, p521 } from '@noble/curves/nist.js';
import { sha1 } from '@noble/hashes/legacy.js';
import { sha256, sha384, sha512 } from '@noble/hashes/sha2.js';
import { Buffer } from 'buffer';
import forge from 'node-forge';
import { fromB64u, b64u as toB64u } from '../../format/canonical.js';
import { exportSpki, parseSpki } from './spki.js';

export { X509Certificate } from './x509-cert.js';

const HASHES = { sha1, sha256, sha384, sha512 } as const;
type Hash = keyof typeof HASHES;

function hashFn(name: string): (typeof HASHES)[Hash] {
  const h = HASHES[name.toLowerCase().replace('-', '') as Hash];
  if (!h) throw new Error(`Digest method not supported: ${name}`);
  return h;
}

/** `createHash(alg)`: update(...) then digest() / digest('hex'). */
export function createHash(alg: string) {
  const h = hashFn(alg).create();
  const api = {
    update(data: Uint8Array | string) {
      h.update(typeof data === 'string' ? Buffer.from(data, 'utf8') : data);
      return api;
    },
    digest(enc?: 'hex' | 'base64'): Buffer & string {
      const out = Buffer.from(h.digest());
      return (enc ? out.toString(enc) : out) as Buffer & string;
    },
  };
  return api;
}

/**
 * `hash(alg, data, outputEncoding)`, node's one-shot digest: a string is hashed as its UTF-8
 * bytes; the output is hex unless `'buffer'` or `'base64'` is asked for.
 */
export function hash(alg: string, data: Uint8Array | string, enc: 'hex' | 'base64' | 'buffer' = 'hex') {
  const out = createHash(alg).update(data).digest();
  return (enc === 'buffer' ? out : out.toString(enc)) as Buffer & string;
}

/** Curves by JWK name: noble curve, coordinate size, OpenSSL name (Node's namedCurve). */
export const CURVES = {
  'P-256': { curve: p256, size: 32, openssl: 'prime256v1' },
  'P-384': { curve: p384, size: 48, openssl: 'secp384r1' },
  'P-521': { curve: p521, size: 66, openssl: 'secp521r1' },
} as const;
export type CurveName = keyof typeof CURVES;

/** Public key material (big-endian, no sign bytes). */
export type KeyData =
  | { kty: 'rsa' | 'rsa-pss'; n: Uint8Array; e: Uint8Array }
  | { kty: 'ec'; crv: CurveName; point: Uint8Array }
  | { kty: 'ed25519'; x: Uint8Array };

function stripZeros(b: Uint8Array): Uint8Array {
  let i = 0;
  while (i < b.length - 1 && b[i] === 0) i++;
  return b.subarray(i);
}

/** A public key (Node's KeyObject surface the verifier reads). */
export class KeyObject {
  readonly type = 'public';
  constructor(
    readonly data: KeyData,
    private readonly spki?: Uint8Array,
  ) {}

  get asymmetricKeyType(): KeyData['kty'] {
    return this.data.kty;
  }

  get asymmetricKeyDetails(): { modulusLength?: number; namedCurve?: string } {
    const d = this.data;
    if (d.kty === 'ec') return { namedCurve: CURVES[d.crv].openssl };
    if (d.kty === 'ed25519') return {};
    const n = stripZeros(d.n);
    return { modulusLength: (n.length - 1) * 8 + ((n[0] ?? 0).toString(2).length || 0) };
  }

  export(opts: { format: 'der'; type: 'spki' } | { format: 'jwk' }): Buffer | Record<string, string> {
    const d = this.data;
    if (opts.format === 'der') return Buffer.from(this.spki ?? exportSpki(d));
    if (d.kty === 'ed25519') return { kty: 'OKP', crv: 'Ed25519', x: toB64u(d.x) };
    if (d.kty === 'ec') {
      const s = CURVES[d.crv].size;
      return {
        kty: 'EC',
        crv: d.crv,
        x: toB64u(d.point.subarray(1, 1 + s)),
        y: toB64u(d.point.subarray(1 + s)),
      };
    }
    return { kty: 'RSA', n: toB64u(stripZeros(d.n)), e: toB64u(stripZeros(d.e)) };
  }
}

function jwkKey(jwk: Record<string, unknown>): KeyData {
  const b = (k: string) => {
    const v = jwk[k];
    if (typeof v !== 'string') throw new TypeError(`Invalid JWK: ${k} missing`);
    return fromB64u(v);
  };
  if (jwk.kty === 'RSA') return { kty: 'rsa', n: stripZeros(b('n')), e: stripZeros(b('e')) };
  if (jwk.kty === 'OKP' && jwk.crv === 'Ed25519') {
    const x = b('x');
    if (x.length !== 32) throw new TypeError('Invalid JWK Ed25519 key');
    return { kty: 'ed25519', x };
  }
  if (jwk.kty === 'EC' && typeof jwk.crv === 'string' && jwk.crv in CURVES) {
    const crv = jwk.crv as CurveName;
    const { curve, size } = CURVES[crv];
    const x = b('x');
    const y = b('y');
    if (x.length !== size || y.length !== size) throw new TypeError('Invalid JWK EC key');
    const point = Uint8Array.from([4, ...x, ...y]);
    curve.Point.fromBytes(point).assertValidity(); // throws off the curve, as OpenSSL does
    return { kty: 'ec', crv, point };
  }
  throw new TypeError('Invalid JWK: unsupported key type');
}

type KeyInput =
  | KeyObject
  | { key: Record<string, unknown>; format: 'jwk' }
  | { key: Uint8Array; format: 'der'; type: 'spki' };

/** `createPublicKey` from a JWK, SPKI DER or a public KeyObject. @throws on anything else */
export function createPublicKey(input: KeyInput): KeyObject {
  if (input instanceof KeyObject) return input;
  if (input.format === 'jwk') return new KeyObject(jwkKey(input.key));
  if (input.format === 'der' && input.type === 'spki') return new KeyObject(parseSpki(input.key), input.key);
  throw new TypeError('unsupported public key input in the browser');
}

/** Node's padding constants (values as in node:crypto). */
export const constants = { RSA_PKCS1_PADDING: 1, RSA_PKCS1_PSS_PADDING: 6 } as const;

type VerifyKey =
  | KeyObject
  | { key: KeyObject; dsaEncoding?: 'der' | 'ieee-p1363'; padding?: number; saltLength?: number };

/** DigestInfo prefixes of EMSA-PKCS1-v1_5 (RFC 8017 §9.2 note 1). */
const DIGEST_INFO: Readonly<Record<Hash, string>> = {
  sha1: '3021300906052b0e03021a05000414',
  sha256: '3031300d060960864801650304020105000420',
  sha384: '3041300d060960864801650304020205000430',
  sha512: '3051300d060960864801650304020305000440',
};

const raw = (b: Uint8Array) => forge.util.binary.raw.encode(b);
const hexOf = (b: Uint8Array) => Buffer.from(b).toString('hex') || '00';

function rsaVerify(
  alg: Hash,
  data: Uint8Array,
  d: { n: Uint8Array; e: Uint8Array },
  sig: Uint8Array,
  pss: { saltLength: number } | null,
): boolean {
  const BigInteger = forge.jsbn.BigInteger;
  const key = forge.pki.setRsaPublicKey(new BigInteger(hexOf(d.n), 16), new BigInteger(hexOf(d.e), 16));
  const digest = hashFn(alg)(data);
  // RFC 8017 §5.2.2 step 1: s must be below n, as OpenSSL requires (not left to node-forge).
  if (sig.length === d.n.length && Buffer.compare(Buffer.from(sig), Buffer.from(d.n)) >= 0) return false;
  try {
    if (pss) {
      const md = () => forge.md[alg].create();
      const scheme = forge.pss.create({
        md: md(),
        mgf: forge.mgf.mgf1.create(md()),
        saltLength: pss.saltLength,
      });
      return key.verify(raw(digest), raw(sig), scheme);
    }
    // Strict EMSA-PKCS1-v1_5: the whole DigestInfo must equal the expected encoding.
    const expected = Buffer.concat([Buffer.from(DIGEST_INFO[alg], 'hex'), digest]);
    return key.verify(raw(expected), raw(sig), 'NONE');
  } catch {
    return false; // wrong signature length, bad padding
  }
}

/**
 * `verify(alg, data, key, signature)`: ECDSA (DER by default, `dsaEncoding: 'ieee-p1363'`),
 * RSA (PKCS#1 v1.5 by default, PSS with `padding` and `saltLength`), Ed25519 (`alg` null).
 * @returns false when the signature does not verify or is malformed. @throws on a key/alg mismatch
 */
export function verify(alg: string | null, data: Uint8Array, keyIn: VerifyKey, sig: Uint8Array): boolean {
  const opts = keyIn instanceof KeyObject ? { key: keyIn } : keyIn;
  const d = opts.key.data;
  if (d.kty === 'ed25519') {
    if (alg !== null && alg !== undefined) throw new Error('Ed25519 takes no digest');
    try {
      return ed25519.verify(sig, data, d.x, { zip215: false });
    } catch {
      return false;
    }
  }
  if (alg === null) throw new Error('a digest is required for this key type');
  const hash = alg.toLowerCase().replace('-', '') as Hash;
  hashFn(hash);
  if (d.kty === 'ec') {
    const format = 'dsaEncoding' in opts && opts.dsaEncoding === 'ieee-p1363' ? 'compact' : 'der';
    try {
      return CURVES[d.crv].curve.verify(sig, hashFn(hash)(data), d.point, {
        prehash: false,
        lowS: false,
        format,
      });
    } catch {
      return false;
    }
  }
  const padding = 'padding' in opts ? opts.padding : undefined;
  const isPss = padding === constants.RSA_PKCS1_PSS_PADDING;
  if (isPss && !('saltLength' in opts && typeof opts.saltLength === 'number' && opts.saltLength >= 0))
    throw new Error('RSA-PSS needs an explicit saltLength here');
  const saltLength = 'saltLength' in opts ? (opts.saltLength ?? 0) : 0;
  // node-forge 1.4 takes the salt of an sLen 0 signature as the whole DB (substr(-0)), so it
  // would refuse every such signature: say so instead. The verifier's PSS salts are the hash
  // size (TPM 2.0 Part 1 B.7) or a certificate's explicit non-zero saltLength.
  if (isPss && saltLength === 0) throw new Error('RSA-PSS with saltLength 0 is not supported in the browser');
  return rsaVerify(hash, data, d, sig, isPss ? { saltLength } : null);
}

/** Signing is the gateway's (Node only). @throws always */
export function sign(): never {
  throw new Error('signing is not available in the browser build of @cmcp/verify');
}
