/**
 * The self-signed certificate of a generated TLS key (@peculiar/x509): subjectAltName for the
 * names clients use, serverAuth, and — once the key is bound — the evidence as a CMW extension
 * under tcg-dice-conceptual-message-wrapper (docs/spec/attested-tls.md#the-certificate). A
 * certificate without that extension is what the listener serves between listening and the
 * first binding: an attested-TLS client refuses it.
 */
import 'reflect-metadata';
import { randomBytes, webcrypto } from 'node:crypto';
import { isIP } from 'node:net';
import { encodeTlsEvidenceExtension, OID_TCG_DICE_CMW, type TlsEvidence } from '@cmcp/verify/formats';
import * as x509 from '@peculiar/x509';
import type { TlsKey } from './key.js';

x509.cryptoProvider.set(webcrypto as unknown as Parameters<typeof x509.cryptoProvider.set>[0]);

/** What a generated certificate says. */
export interface CertificateFacts {
  /** DNS names and IP literals for subjectAltName (the first is the subject CN). */
  names: readonly string[];
  notBefore: Date;
  notAfter: Date;
  /** The bound evidence, or null for the certificate served before the first binding. */
  evidence: TlsEvidence | null;
}

/**
 * A self-signed X.509 v3 certificate for `key` (ECDSA with SHA-256).
 * @returns the certificate in PEM.
 * @throws Error when `key` is not a generated key (no WebCrypto pair).
 */
export async function selfSignedCertificate(key: TlsKey, facts: CertificateFacts): Promise<string> {
  if (!key.pair) throw new Error('only a generated key gets a self-signed certificate');
  const names = facts.names.length ? facts.names : ['localhost'];
  const extensions: x509.Extension[] = [
    new x509.BasicConstraintsExtension(false, undefined, true),
    new x509.KeyUsagesExtension(x509.KeyUsageFlags.digitalSignature, true),
    new x509.ExtendedKeyUsageExtension([x509.ExtendedKeyUsage.serverAuth], false),
    new x509.SubjectAlternativeNameExtension(
      names.map((n) => {
        const bare = n.replace(/^\[|\]$/g, '');
        return isIP(bare) ? { type: 'ip' as const, value: bare } : { type: 'dns' as const, value: n };
      }),
      false,
    ),
    await x509.SubjectKeyIdentifierExtension.create(key.pair.publicKey),
  ];
  if (facts.evidence)
    extensions.push(new x509.Extension(OID_TCG_DICE_CMW, false, encodeTlsEvidenceExtension(facts.evidence)));
  const serial = randomBytes(16);
  serial[0] = (serial[0] ?? 0) & 0x7f; // a positive INTEGER (RFC 5280 §4.1.2.2)
  const cert = await x509.X509CertificateGenerator.createSelfSigned({
    serialNumber: serial.toString('hex'),
    name: [{ CN: [names[0] ?? 'localhost'] }],
    notBefore: facts.notBefore,
    notAfter: facts.notAfter,
    signingAlgorithm: { name: 'ECDSA', hash: 'SHA-256' },
    keys: key.pair,
    extensions,
  });
  return cert.toString('pem');
}
