/**
 * A throwaway TLS PKI for tests on 127.0.0.1 (made with @peculiar/x509): a CA, a server
 * certificate for IP 127.0.0.1, and a client certificate, all P-256, as PEM strings and files.
 * Used by the OAuth JWKS server test and the upstream credential (mTLS, pinned CA) tests.
 */
import 'reflect-metadata';
import { webcrypto } from 'node:crypto';
import { writeFileSync } from 'node:fs';
import { join } from 'node:path';
import * as x509 from '@peculiar/x509';

x509.cryptoProvider.set(webcrypto as unknown as Parameters<typeof x509.cryptoProvider.set>[0]);

const ALG = { name: 'ECDSA', namedCurve: 'P-256', hash: 'SHA-256' };

/** A certificate with its key, PEM, and where they were written. */
export interface TlsPair {
  cert: string;
  key: string;
  certPath: string;
  keyPath: string;
}

export interface TlsPki {
  ca: TlsPair;
  server: TlsPair;
  client: TlsPair;
}

async function pkcs8Pem(key: webcrypto.CryptoKey): Promise<string> {
  const der = Buffer.from(await webcrypto.subtle.exportKey('pkcs8', key));
  return `-----BEGIN PRIVATE KEY-----\n${der.toString('base64').replace(/.{64}/g, '$&\n')}\n-----END PRIVATE KEY-----\n`;
}

async function write(dir: string, name: string, cert: x509.X509Certificate, key: webcrypto.CryptoKey) {
  const pair: TlsPair = {
    cert: cert.toString('pem'),
    key: await pkcs8Pem(key),
    certPath: join(dir, `${name}.pem`),
    keyPath: join(dir, `${name}.key`),
  };
  writeFileSync(pair.certPath, pair.cert);
  writeFileSync(pair.keyPath, pair.key, { mode: 0o600 });
  return pair;
}

async function leaf(
  ca: { cert: x509.X509Certificate; key: webcrypto.CryptoKey },
  cn: string,
  serial: string,
  usage: 'server' | 'client',
) {
  const keys = (await webcrypto.subtle.generateKey(ALG, true, ['sign', 'verify'])) as webcrypto.CryptoKeyPair;
  const cert = await x509.X509CertificateGenerator.create({
    serialNumber: serial,
    subject: `CN=${cn}`,
    issuer: ca.cert.subject,
    notBefore: new Date(Date.now() - 86_400_000),
    notAfter: new Date(Date.now() + 30 * 86_400_000),
    signingAlgorithm: ALG,
    publicKey: keys.publicKey as unknown as x509.PublicKeyType,
    signingKey: ca.key as unknown as x509.X509CertificateCreateWithKeyParams['signingKey'],
    extensions: [
      new x509.BasicConstraintsExtension(false, undefined, true),
      new x509.KeyUsagesExtension(x509.KeyUsageFlags.digitalSignature, true),
      new x509.ExtendedKeyUsageExtension([
        usage === 'server' ? x509.ExtendedKeyUsage.serverAuth : x509.ExtendedKeyUsage.clientAuth,
      ]),
      ...(usage === 'server'
        ? [new x509.SubjectAlternativeNameExtension([{ type: 'ip', value: '127.0.0.1' }])]
        : []),
    ],
  });
  return { cert, key: keys.privateKey };
}

/** Makes a CA, a server certificate for 127.0.0.1 and a client certificate into `dir`. */
export async function makeTlsPki(dir: string, name = 'cmcp test TLS CA'): Promise<TlsPki> {
  const keys = (await webcrypto.subtle.generateKey(ALG, true, ['sign', 'verify'])) as webcrypto.CryptoKeyPair;
  const caCert = await x509.X509CertificateGenerator.createSelfSigned({
    serialNumber: '01',
    name: `CN=${name}`,
    notBefore: new Date(Date.now() - 86_400_000),
    notAfter: new Date(Date.now() + 365 * 86_400_000),
    signingAlgorithm: ALG,
    keys: keys as unknown as x509.X509CertificateCreateSelfSignedParams['keys'],
    extensions: [
      new x509.BasicConstraintsExtension(true, 0, true),
      new x509.KeyUsagesExtension(x509.KeyUsageFlags.keyCertSign | x509.KeyUsageFlags.cRLSign, true),
    ],
  });
  const ca = { cert: caCert, key: keys.privateKey };
  const server = await leaf(ca, '127.0.0.1', '02', 'server');
  const client = await leaf(ca, 'cmcp-gateway', '03', 'client');
  return {
    ca: await write(dir, 'ca', caCert, keys.privateKey),
    server: await write(dir, 'server', server.cert, server.key),
    client: await write(dir, 'client', client.cert, client.key),
  };
}
