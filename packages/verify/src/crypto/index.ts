/**
 * The verifier's one crypto module: hashing, public keys from raw hardware key material and
 * signature verification. Every verifier module hashes, builds keys and checks signatures through
 * here. Outside it: X.509 (../x509.ts: node:crypto's X509Certificate and @peculiar/x509) and the
 * gateway-side signing and key export in ../format/ (claims are signed by the gateway, not here).
 * ./browser/ is not part of this module: it stands in for node:crypto in the browser bundle only.
 */
export * from './hash.js';
export * from './keys.js';
export * from './signatures.js';
