/**
 * SEV-SNP evidence signed by a VLEK under a throwaway AMD-shaped hierarchy (ARK ← ASVK "SEV-VLEK-
 * <product>" ← VLEK "SEV-VLEK", ECDSA P-384, made with @peculiar/x509), for the VLEK rules of
 * the verifier: a real report's SIGNER_INFO is set to VLEK (SEV-SNP ABI Table 22, bits 4:2 = 1)
 * and it is re-signed over bytes 0x000–0x29F, R and S little-endian in their 72-byte slots
 * (Table 24). The VLEK carries the report's REPORTED_TCB as SPL extensions and, unless told not
 * to, a CSP-ID (OID 1.3.6.1.4.1.3704.1.5, IA5String).
 */
import 'reflect-metadata';
import { createPrivateKey, sign, webcrypto } from 'node:crypto';
import * as x509 from '@peculiar/x509';
import * as asn1js from 'asn1js';

x509.cryptoProvider.set(webcrypto as unknown as Parameters<typeof x509.cryptoProvider.set>[0]);

const P384 = { name: 'ECDSA', namedCurve: 'P-384', hash: 'SHA-384' } as const;
const OID = {
  bl: '1.3.6.1.4.1.3704.1.3.1',
  tee: '1.3.6.1.4.1.3704.1.3.2',
  snp: '1.3.6.1.4.1.3704.1.3.3',
  ucode: '1.3.6.1.4.1.3704.1.3.8',
  cspId: '1.3.6.1.4.1.3704.1.5',
};

/** A VLEK-signed report and its certificates (DER). */
export interface VlekEvidence {
  report: Buffer;
  vlek: Buffer;
  asvk: Buffer;
  ark: Buffer;
}

const ext = (oid: string, der: ArrayBuffer) => new x509.Extension(oid, false, der);
const int = (n: number) => new asn1js.Integer({ value: n }).toBER();

/**
 * Re-signs `milanReport` (a Milan ATTESTATION_REPORT) as a VLEK report.
 * @param o.cspId the VLEK's CSP-ID, or null for a VLEK without the extension
 */
export async function vlekEvidence(milanReport: Buffer, o: { cspId: string | null }): Promise<VlekEvidence> {
  const gen = () =>
    webcrypto.subtle.generateKey(P384, true, ['sign', 'verify']) as Promise<webcrypto.CryptoKeyPair>;
  const [arkKeys, asvkKeys, vlekKeys] = await Promise.all([gen(), gen(), gen()]);
  const nb = new Date('2020-01-01T00:00:00Z');
  const na = new Date('2045-01-01T00:00:00Z');
  const ca = async (k: webcrypto.CryptoKeyPair) => [
    new x509.BasicConstraintsExtension(true, undefined, true),
    new x509.KeyUsagesExtension(x509.KeyUsageFlags.keyCertSign | x509.KeyUsageFlags.cRLSign, true),
    await x509.SubjectKeyIdentifierExtension.create(k.publicKey),
  ];
  const ark = await x509.X509CertificateGenerator.createSelfSigned({
    serialNumber: '01',
    name: 'CN=ARK-Milan',
    notBefore: nb,
    notAfter: na,
    keys: arkKeys,
    signingAlgorithm: P384,
    extensions: await ca(arkKeys),
  });
  const asvk = await x509.X509CertificateGenerator.create({
    serialNumber: '02',
    subject: 'CN=SEV-VLEK-Milan',
    issuer: ark.subject,
    notBefore: nb,
    notAfter: na,
    publicKey: asvkKeys.publicKey,
    signingKey: arkKeys.privateKey,
    signingAlgorithm: P384,
    extensions: await ca(asvkKeys),
  });
  const tcb = milanReport.subarray(0x180, 0x188); // REPORTED_TCB, Milan layout [0] BL [1] TEE [6] SNP [7] µcode
  const vlek = await x509.X509CertificateGenerator.create({
    serialNumber: '03',
    subject: 'CN=SEV-VLEK',
    issuer: asvk.subject,
    notBefore: nb,
    notAfter: na,
    publicKey: vlekKeys.publicKey,
    signingKey: asvkKeys.privateKey,
    signingAlgorithm: P384,
    extensions: [
      ext(OID.bl, int(tcb[0] ?? 0)),
      ext(OID.tee, int(tcb[1] ?? 0)),
      ext(OID.snp, int(tcb[6] ?? 0)),
      ext(OID.ucode, int(tcb[7] ?? 0)),
      ...(o.cspId === null ? [] : [ext(OID.cspId, new asn1js.IA5String({ value: o.cspId }).toBER())]),
    ],
  });
  const report = Buffer.from(milanReport);
  report.writeUInt32LE((report.readUInt32LE(0x48) & ~(7 << 2)) | (1 << 2), 0x48); // SIGNING_KEY = VLEK
  const pkcs8 = Buffer.from(await webcrypto.subtle.exportKey('pkcs8', vlekKeys.privateKey));
  const p1363 = sign('sha384', report.subarray(0, 0x2a0), {
    key: createPrivateKey({ key: pkcs8, format: 'der', type: 'pkcs8' }),
    dsaEncoding: 'ieee-p1363',
  });
  report.fill(0, 0x2a0, 0x330);
  Buffer.from(p1363.subarray(0, 48)).reverse().copy(report, 0x2a0);
  Buffer.from(p1363.subarray(48)).reverse().copy(report, 0x2e8);
  const der = (c: x509.X509Certificate) => Buffer.from(c.rawData);
  return { report, vlek: der(vlek), asvk: der(asvk), ark: der(ark) };
}
