/**
 * The verifier's one crypto module: hashing, public keys from raw hardware key material and
 * signature verification (X.509 lives in ../x509.ts and uses node:crypto's X509Certificate).
 */
export * from './hash.js';
export * from './keys.js';
export * from './signatures.js';
