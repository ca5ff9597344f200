/**
 * The TLS key of the gateway's listeners (docs/spec/attested-tls.md#the-tls-key): generated in
 * the process (ECDSA P-256 through WebCrypto) and never written anywhere, or read from the
 * operator's files. Either way its SubjectPublicKeyInfo hash is what the binding names.
 */
import { createPrivateKey, createPublicKey, webcrypto, X509Certificate } from 'node:crypto';
import { readFileSync } from 'node:fs';
import { spkiSha256 } from '@cmcp/verify/formats';
import { CmcpError } from '../errors/index.js';

/** A TLS key the listeners serve with. `privatePem` lives in this process's memory only. */
export interface TlsKey {
  /** PKCS#8 PEM for node:tls (OpenSSL needs the key in bytes; it is never written or logged). */
  privatePem: string;
  /** The WebCrypto pair a generated certificate is signed with; null for a key from files. */
  pair: webcrypto.CryptoKeyPair | null;
  /** DER SubjectPublicKeyInfo (RFC 5280 §4.1.2.7). */
  spkiDer: Buffer;
  /** base64url SHA-256 of {@link spkiDer}. */
  spkiSha256: string;
  origin: 'generated' | 'file';
}

/** A fresh ECDSA P-256 key (FIPS 186-5), generated in this process. */
export async function generateTlsKey(): Promise<TlsKey> {
  const pair = (await webcrypto.subtle.generateKey({ name: 'ECDSA', namedCurve: 'P-256' }, true, [
    'sign',
    'verify',
  ])) as webcrypto.CryptoKeyPair;
  const pkcs8 = Buffer.from(await webcrypto.subtle.exportKey('pkcs8', pair.privateKey));
  const spkiDer = Buffer.from(await webcrypto.subtle.exportKey('spki', pair.publicKey));
  const privatePem = createPrivateKey({ key: pkcs8, format: 'der', type: 'pkcs8' })
    .export({ format: 'pem', type: 'pkcs8' })
    .toString();
  return { privatePem, pair, spkiDer, spkiSha256: spkiSha256(spkiDer), origin: 'generated' };
}

/** Why TLS files cannot be used (code TLS_FILES_INVALID). */
export class TlsFilesError extends CmcpError {
  declare readonly code: 'TLS_FILES_INVALID';
  constructor(message: string) {
    super('TLS_FILES_INVALID', message);
    this.name = 'TlsFilesError';
  }
}

/**
 * Reads the operator's certificate chain and key (PEM).
 * @returns the key (origin `file`) and the chain's PEM text.
 * @throws TlsFilesError when a file is unreadable, the key is not a private key, or the leaf
 *   certificate is not for that key (the message names the file, never its content).
 */
export function readTlsFiles(certFile: string, keyFile: string): { key: TlsKey; certPem: string } {
  const read = (f: string) => {
    try {
      return readFileSync(f, 'utf8');
    } catch (e) {
      throw new TlsFilesError(`cannot read ${f}: ${(e as NodeJS.ErrnoException).code ?? 'error'}`);
    }
  };
  const certPem = read(certFile);
  const keyPem = read(keyFile);
  let spkiDer: Buffer;
  try {
    spkiDer = createPublicKey(createPrivateKey(keyPem)).export({ format: 'der', type: 'spki' });
  } catch {
    throw new TlsFilesError(`${keyFile} is not a PEM private key`);
  }
  let leafSpki: Buffer;
  try {
    leafSpki = new X509Certificate(certPem).publicKey.export({ format: 'der', type: 'spki' });
  } catch {
    throw new TlsFilesError(`${certFile} does not start with a PEM certificate`);
  }
  if (!leafSpki.equals(spkiDer))
    throw new TlsFilesError(`${certFile}: the leaf certificate is not for ${keyFile}`);
  return {
    key: { privatePem: keyPem, pair: null, spkiDer, spkiSha256: spkiSha256(spkiDer), origin: 'file' },
    certPem,
  };
}
