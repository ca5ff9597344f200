/**
 * Node's `X509Certificate` surface the verifier reads (subject, validity, publicKey, ca,
 * serialNumber, checkIssued, verify), for the browser stand-in of node:crypto. Parsing is
 * @peculiar/x509; signatures go through ./node-crypto.ts. Follows OpenSSL where Node's answer
 * comes from it: `subject` is X509_NAME_print_ex multiline (RFC 2253 escaping, one RDN a line),
 * `checkIssued` is X509_check_issued (issuer name = subject name after case and space folding,
 * authorityKeyIdentifier keyIdentifier = subjectKeyIdentifier when both are present, the
 * issuer's keyUsage allows keyCertSign, the issuer's key type fits the signature algorithm),
 * `verify` is X509_verify (inner and outer signature algorithms equal, then the signature).
 */
import 'reflect-metadata';
import { AsnConvert } from '@peculiar/asn1-schema';
import { Certificate } from '@peculiar/asn1-x509';
import * as px from '@peculiar/x509';
import { Buffer } from 'buffer';
import { createPublicKey, type KeyObject, constants as nodeConstants, verify } from './node-crypto.js';

/** px short names that OpenSSL spells differently. */
const OPENSSL_NAMES: Readonly<Record<string, string>> = {
  E: 'emailAddress',
  G: 'GN',
  I: 'initials',
  T: 'title',
};

function esc2253(v: string): string {
  let s = '';
  for (const c of v) {
    const code = c.charCodeAt(0);
    if (',+"\\<>;'.includes(c)) s += `\\${c}`;
    else if (code < 0x20 || code === 0x7f) s += `\\${code.toString(16).toUpperCase().padStart(2, '0')}`;
    else s += c;
  }
  if (/^[# ]/.test(s)) s = `\\${s}`;
  if (s.endsWith(' ') && s.length > 1) s = `${s.slice(0, -1)}\\ `;
  return s;
}

function nameText(n: px.Name): string {
  return n
    .toJSON()
    .map((rdn) =>
      Object.entries(rdn)
        .flatMap(([t, vs]) => vs.map((v) => `${OPENSSL_NAMES[t] ?? t}=${esc2253(v)}`))
        .join(' + '),
    )
    .join('\n');
}

/** OpenSSL's canonical name form for comparison: ASCII case and runs of spaces folded. */
function canonicalName(n: px.Name): string {
  return JSON.stringify(
    n
      .toJSON()
      .map((rdn) =>
        Object.entries(rdn).map(([t, vs]) => [t, vs.map((v) => v.trim().replace(/\s+/g, ' ').toLowerCase())]),
      ),
  );
}

const KEY_TYPES: Readonly<Record<string, readonly string[]>> = {
  ECDSA: ['ec'],
  'RSASSA-PKCS1-v1_5': ['rsa'],
  'RSA-PSS': ['rsa', 'rsa-pss'],
  Ed25519: ['ed25519'],
};

type WebAlg = { name: string; hash?: { name: string } | string; saltLength?: number };

export class X509Certificate {
  private readonly c: px.X509Certificate;
  private readonly asn: Certificate;

  constructor(der: Uint8Array) {
    this.c = new px.X509Certificate(der);
    this.asn = AsnConvert.parse(der, Certificate);
  }

  get subject(): string {
    return nameText(this.c.subjectName);
  }

  get issuer(): string {
    return nameText(this.c.issuerName);
  }

  get validFrom(): string {
    return this.c.notBefore.toISOString();
  }

  get validTo(): string {
    return this.c.notAfter.toISOString();
  }

  get ca(): boolean {
    return this.c.getExtension(px.BasicConstraintsExtension)?.ca === true;
  }

  /** Uppercase hex, leading zero bytes dropped, zero as "0" (OpenSSL BN_bn2hex). */
  get serialNumber(): string {
    const hex = this.c.serialNumber.toUpperCase().replace(/^(00)+/, '');
    return hex === '' ? '0' : hex;
  }

  get publicKey(): KeyObject {
    return createPublicKey({ key: new Uint8Array(this.c.publicKey.rawData), format: 'der', type: 'spki' });
  }

  private sigAlg(): WebAlg {
    return this.c.signatureAlgorithm as WebAlg;
  }

  /** X509_check_issued: could `issuer` have issued this certificate (no signature check). */
  checkIssued(issuer: X509Certificate): boolean {
    if (canonicalName(this.c.issuerName) !== canonicalName(issuer.c.subjectName)) return false;
    const akid = this.c.getExtension(px.AuthorityKeyIdentifierExtension)?.keyId;
    const skid = issuer.c.getExtension(px.SubjectKeyIdentifierExtension)?.keyId;
    if (akid && skid && akid.toLowerCase() !== skid.toLowerCase()) return false;
    const ku = issuer.c.getExtension(px.KeyUsagesExtension);
    if (ku && (ku.usages & px.KeyUsageFlags.keyCertSign) === 0) return false;
    let alg: WebAlg;
    try {
      alg = this.sigAlg();
    } catch {
      return false;
    }
    return (KEY_TYPES[alg.name] ?? []).includes(issuer.publicKey.asymmetricKeyType);
  }

  /** X509_verify: the signature over tbsCertificate under `key`. */
  verify(key: KeyObject): boolean {
    const inner = Buffer.from(AsnConvert.serialize(this.asn.tbsCertificate.signature));
    const outer = Buffer.from(AsnConvert.serialize(this.asn.signatureAlgorithm));
    if (!inner.equals(outer)) return false;
    const alg = this.sigAlg();
    const hashName = typeof alg.hash === 'string' ? alg.hash : alg.hash?.name;
    const hash = hashName ? hashName.toLowerCase().replace('-', '') : null;
    const raw = this.asn.tbsCertificateRaw;
    if (!raw) return false;
    const tbs = new Uint8Array(raw);
    const sig = new Uint8Array(this.c.signature);
    if (alg.name === 'RSA-PSS') {
      if (typeof alg.saltLength !== 'number') return false;
      return verify(
        hash,
        tbs,
        { key, padding: nodeConstants.RSA_PKCS1_PSS_PADDING, saltLength: alg.saltLength },
        sig,
      );
    }
    if (!(alg.name in KEY_TYPES)) return false;
    return verify(alg.name === 'Ed25519' ? null : hash, tbs, key, sig);
  }
}
