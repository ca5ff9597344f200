/**
 * Certificate helpers for the gateway side of attestation: PEM/DER loading, a strict chain
 * walk to pinned roots (used by enrollment to check EK certificates against manufacturer
 * roots), and AK certificate issuance by the operator's AK CA (@peculiar/x509).
 */
import 'reflect-metadata';
import {
  createPrivateKey,
  type KeyObject,
  webcrypto as nodeWebcrypto,
  randomBytes,
  X509Certificate,
} from 'node:crypto';
import { readFileSync } from 'node:fs';
import * as x509 from '@peculiar/x509';

type WC = typeof nodeWebcrypto;
const webcrypto: WC = nodeWebcrypto;
x509.cryptoProvider.set(webcrypto as unknown as Parameters<typeof x509.cryptoProvider.set>[0]);

/** TCG EK certificate EKU (EK Credential Profile §3.2.16) and AK certificate EKU (tcg-kp-AIKCertificate). */
export const OID_TCG_KP_EK_CERTIFICATE = '2.23.133.8.1';
export const OID_TCG_KP_AIK_CERTIFICATE = '2.23.133.8.3';

/** Every certificate in a PEM text (or one DER certificate), as DER buffers. */
export function certsFromBytes(bytes: Buffer): Buffer[] {
  const text = bytes.toString('latin1');
  if (!text.includes('-----BEGIN CERTIFICATE-----')) return [Buffer.from(bytes)];
  const out: Buffer[] = [];
  const re = /-----BEGIN CERTIFICATE-----([\s\S]*?)-----END CERTIFICATE-----/g;
  for (let m = re.exec(text); m; m = re.exec(text))
    out.push(Buffer.from((m[1] ?? '').replace(/\s+/g, ''), 'base64'));
  return out;
}

/** NV indices are often padded: keep exactly the DER SEQUENCE. */
export function trimDer(b: Buffer): Buffer {
  if (b.length < 4 || b[0] !== 0x30) return b;
  const l1 = b[1] ?? 0;
  let len: number;
  let hdr: number;
  if (l1 < 0x80) {
    len = l1;
    hdr = 2;
  } else {
    const n = l1 & 0x7f;
    if (n < 1 || n > 3 || b.length < 2 + n) return b;
    len = 0;
    for (let i = 0; i < n; i++) len = len * 256 + (b[2 + i] ?? 0);
    hdr = 2 + n;
  }
  return hdr + len <= b.length ? b.subarray(0, hdr + len) : b;
}

/** Reads certificates from PEM or DER files. @throws Error naming the file. */
export function loadCertFiles(paths: readonly string[]): Buffer[] {
  const out: Buffer[] = [];
  for (const p of paths) {
    let bytes: Buffer;
    try {
      bytes = readFileSync(p);
    } catch (e) {
      throw new Error(`cannot read certificate file ${p}: ${(e as NodeJS.ErrnoException).code ?? 'error'}`);
    }
    const certs = certsFromBytes(bytes);
    for (const c of certs) {
      try {
        new X509Certificate(c);
      } catch {
        throw new Error(`${p} does not hold a parseable X.509 certificate`);
      }
    }
    out.push(...certs);
  }
  return out;
}

export type ChainResult = { ok: true; chain: X509Certificate[] } | { ok: false; reason: string };

/**
 * Walks from `leaf` through `intermediates` to one of `roots` (pinned by exact DER): each link
 * must be issued (name + signature) by the next, issuers must be CAs, and every certificate must
 * be valid at `at`. Returns the chain leaf first, root last.
 */
export function chainToRoots(
  leafDer: Buffer,
  intermediatesDer: readonly Buffer[],
  rootsDer: readonly Buffer[],
  at: Date = new Date(),
): ChainResult {
  let leaf: X509Certificate;
  try {
    leaf = new X509Certificate(leafDer);
  } catch {
    return { ok: false, reason: 'the certificate does not parse' };
  }
  const roots = rootsDer.map((d) => new X509Certificate(d));
  const inters = intermediatesDer.map((d) => new X509Certificate(d));
  if (roots.length === 0) return { ok: false, reason: 'no pinned roots configured' };
  const valid = (c: X509Certificate) => new Date(c.validFrom) <= at && at <= new Date(c.validTo);
  const chain: X509Certificate[] = [leaf];
  let cur = leaf;
  for (let depth = 0; depth < 8; depth++) {
    if (!valid(cur))
      return { ok: false, reason: `${cur.subject || '(empty subject)'} is not valid at ${at.toISOString()}` };
    const root = roots.find((r) => r.raw.equals(cur.raw));
    if (root && depth > 0) return { ok: true, chain };
    const issuedBy = (c: X509Certificate) => {
      try {
        return cur.checkIssued(c) && c.ca && cur.verify(c.publicKey);
      } catch {
        return false;
      }
    };
    const r = roots.find(issuedBy);
    if (r) {
      if (!valid(r)) return { ok: false, reason: `root ${r.subject} is not valid at ${at.toISOString()}` };
      chain.push(r);
      return { ok: true, chain };
    }
    const next = inters.find((c) => !chain.some((x) => x.raw.equals(c.raw)) && issuedBy(c));
    if (!next) {
      return {
        ok: false,
        reason: `no pinned root or intermediate issued ${cur.subject || '(empty subject)'} (issuer ${cur.issuer})`,
      };
    }
    chain.push(next);
    cur = next;
  }
  return { ok: false, reason: 'chain longer than 8 certificates' };
}

/** The operator's AK CA: its private key and certificate (plus the certificates above it). */
export interface AkCa {
  key: KeyObject;
  certDer: Buffer;
  /** Certificates above the AK CA certificate, carried in claims after it. */
  chainDer: Buffer[];
}

type ImportParams = Parameters<WC['subtle']['importKey']>[2];
type SignParams = Parameters<typeof x509.X509CertificateGenerator.create>[0]['signingAlgorithm'];

function signingAlgorithm(key: KeyObject): { import: ImportParams; sign: SignParams } {
  if (key.asymmetricKeyType === 'ec') {
    const curve = key.asymmetricKeyDetails?.namedCurve;
    const namedCurve = curve === 'prime256v1' ? 'P-256' : curve === 'secp384r1' ? 'P-384' : null;
    if (!namedCurve) throw new Error(`AK CA key curve ${curve ?? '?'} is not P-256 or P-384`);
    const hash = namedCurve === 'P-256' ? 'SHA-256' : 'SHA-384';
    return { import: { name: 'ECDSA', namedCurve }, sign: { name: 'ECDSA', hash } as SignParams };
  }
  if (key.asymmetricKeyType === 'rsa') {
    return {
      import: { name: 'RSASSA-PKCS1-v1_5', hash: 'SHA-256' },
      sign: { name: 'RSASSA-PKCS1-v1_5' } as SignParams,
    };
  }
  throw new Error(`AK CA key type ${key.asymmetricKeyType ?? '?'} is not EC or RSA`);
}

/**
 * Issues an AK certificate (DER) for `akKey` from the AK CA: CA:FALSE, keyUsage digitalSignature
 * (critical), EKU tcg-kp-AIKCertificate, SKI/AKI, and the AK's TPM Name in the subject.
 */
export async function issueAkCertificate(opts: {
  ca: AkCa;
  akKey: KeyObject;
  akName: Buffer;
  days: number;
  now?: Date;
}): Promise<Buffer> {
  const now = opts.now ?? new Date();
  const algs = signingAlgorithm(opts.ca.key);
  const pkcs8 = opts.ca.key.export({ format: 'der', type: 'pkcs8' });
  const signingKey = await webcrypto.subtle.importKey('pkcs8', pkcs8, algs.import, false, ['sign']);
  const caCert = new x509.X509Certificate(opts.ca.certDer);
  const publicKey = new x509.PublicKey(opts.akKey.export({ format: 'der', type: 'spki' }));
  const notBefore = new Date(now.getTime() - 60_000);
  const notAfter = new Date(now.getTime() + opts.days * 86_400_000);
  const serial = randomBytes(16);
  serial[0] = (serial[0] ?? 0) & 0x7f;
  const cert = await x509.X509CertificateGenerator.create({
    serialNumber: serial.toString('hex'),
    subject: `CN=cmcp TPM AK ${opts.akName.toString('hex').slice(4, 36)}, O=cmcp`,
    issuer: caCert.subject,
    notBefore,
    notAfter,
    signingAlgorithm: algs.sign,
    publicKey,
    signingKey: signingKey as unknown as x509.X509CertificateCreateWithKeyParams['signingKey'],
    extensions: [
      new x509.BasicConstraintsExtension(false, undefined, true),
      new x509.KeyUsagesExtension(x509.KeyUsageFlags.digitalSignature, true),
      new x509.ExtendedKeyUsageExtension([OID_TCG_KP_AIK_CERTIFICATE], false),
      await x509.SubjectKeyIdentifierExtension.create(publicKey),
      await x509.AuthorityKeyIdentifierExtension.create(caCert),
    ],
  });
  return Buffer.from(cert.rawData);
}

/** Loads the AK CA from PEM files. @throws Error naming the file. */
export function loadAkCa(keyPath: string, certPath: string, chainPaths: readonly string[]): AkCa {
  let key: KeyObject;
  try {
    key = createPrivateKey(readFileSync(keyPath));
  } catch (e) {
    throw new Error(`cannot load the AK CA key ${keyPath}: ${(e as Error).message.slice(0, 100)}`);
  }
  const [certDer] = loadCertFiles([certPath]);
  if (!certDer) throw new Error(`${certPath} holds no certificate`);
  const cert = new X509Certificate(certDer);
  if (!cert.checkPrivateKey(key)) throw new Error(`the AK CA key ${keyPath} does not match ${certPath}`);
  return { key, certDer, chainDer: loadCertFiles(chainPaths) };
}
