/**
 * Azure confidential VM evidence built and signed here, under throwaway roots: an HCL report
 * (header, hardware report, IGVM request data with the runtime data JSON holding HCLAkPub),
 * the SEV-SNP report under a test ARK → ASK → VCEK chain, the TDX TD report with a v4 quote
 * under a test "Intel SGX Root CA" → PCK chain, and a vTPM quote under the HCLAkPub key.
 * Layouts: packages/verify/src/abi/azure/hcl.ts, abi/snp/report.ts, abi/tdx/{quote,tdreport}.ts.
 * Nothing here is imported by src/, native/ or packages/.
 */
import 'reflect-metadata';
import { createHash, generateKeyPairSync, type KeyObject, randomBytes, sign, webcrypto } from 'node:crypto';
import * as px from '@peculiar/x509';
import * as asn1js from 'asn1js';
import { tpm2b, u16 } from './evidence.js';

px.cryptoProvider.set(webcrypto as unknown as Parameters<typeof px.cryptoProvider.set>[0]);

const le32 = (n: number) => {
  const b = Buffer.alloc(4);
  b.writeUInt32LE(n);
  return b;
};
const le16 = (n: number) => {
  const b = Buffer.alloc(2);
  b.writeUInt16LE(n);
  return b;
};

// ---------- the HCL report ----------

/** The runtime data JSON with `akPub` (a JWK) as HCLAkPub. */
export function runtimeDataJson(akPub: KeyObject, extra: Record<string, unknown> = {}): Buffer {
  const jwk = akPub.export({ format: 'jwk' });
  return Buffer.from(
    JSON.stringify({
      keys: [{ kid: 'HCLAkPub', key_ops: ['sign'], ...jwk }],
      'vm-configuration': { 'secure-boot': true, 'tpm-enabled': true, vmUniqueId: 'TEST' },
      'user-data': '00'.repeat(64),
      ...extra,
    }),
  );
}

/** HCL report bytes: header, the hardware report padded to 1184, request data, zero fill to `nvSize`. */
export function hclReport(o: {
  kind: 'sev-snp' | 'tdx';
  hwReport: Buffer;
  runtimeData: Buffer;
  hashType?: number;
  nvSize?: number;
}): Buffer {
  const area = Buffer.alloc(1184);
  o.hwReport.copy(area);
  const request = Buffer.concat([
    le32(20 + o.runtimeData.length),
    le32(1),
    le32(o.kind === 'sev-snp' ? 2 : 4),
    le32(o.hashType ?? 1),
    le32(o.runtimeData.length),
    o.runtimeData,
  ]);
  const size = 32 + 1184 + request.length;
  const header = Buffer.concat([
    Buffer.from('HCLA'),
    le32(o.kind === 'sev-snp' ? 1 : 2),
    le32(size),
    le32(2),
    Buffer.alloc(16),
  ]);
  const out = Buffer.alloc(Math.max(o.nvSize ?? size, size));
  Buffer.concat([header, area, request]).copy(out);
  return out;
}

/** REPORT_DATA as the paravisor writes it: SHA-256(runtime data) ‖ 32 zero bytes. */
export const hclReportData = (runtimeData: Buffer): Buffer =>
  Buffer.concat([createHash('sha256').update(runtimeData).digest(), Buffer.alloc(32)]);

// ---------- certificates ----------

const P384 = { name: 'ECDSA', namedCurve: 'P-384', hash: 'SHA-384' };
const P256 = { name: 'ECDSA', namedCurve: 'P-256', hash: 'SHA-256' };

interface Issued {
  der: Buffer;
  keys: webcrypto.CryptoKeyPair;
}

async function cert(o: {
  subject: string;
  issuer?: Issued & { name: string };
  alg: typeof P384;
  ca: boolean;
  extensions?: px.Extension[];
}): Promise<Issued> {
  const keys = (await webcrypto.subtle.generateKey(o.alg, true, [
    'sign',
    'verify',
  ])) as webcrypto.CryptoKeyPair;
  const common = {
    serialNumber: randomBytes(8)
      .toString('hex')
      .replace(/^[89a-f]/, '1'),
    notBefore: new Date('2025-01-01T00:00:00Z'),
    notAfter: new Date('2035-01-01T00:00:00Z'),
    signingAlgorithm: o.alg,
    extensions: [
      new px.BasicConstraintsExtension(o.ca, undefined, true),
      new px.KeyUsagesExtension(
        o.ca ? px.KeyUsageFlags.keyCertSign | px.KeyUsageFlags.cRLSign : px.KeyUsageFlags.digitalSignature,
        true,
      ),
      ...(o.extensions ?? []),
    ],
  };
  const c = o.issuer
    ? await px.X509CertificateGenerator.create({
        ...common,
        subject: o.subject,
        issuer: o.issuer.name,
        publicKey: keys.publicKey as unknown as px.PublicKeyType,
        signingKey: o.issuer.keys.privateKey as never,
      })
    : await px.X509CertificateGenerator.createSelfSigned({
        ...common,
        name: o.subject,
        keys: keys as unknown as px.X509CertificateCreateSelfSignedParams['keys'],
      });
  return { der: Buffer.from(c.rawData), keys };
}

async function nodeKey(k: webcrypto.CryptoKey): Promise<KeyObject> {
  const { createPrivateKey } = await import('node:crypto');
  const pkcs8 = Buffer.from(await webcrypto.subtle.exportKey('pkcs8', k));
  return createPrivateKey({ key: pkcs8, format: 'der', type: 'pkcs8' });
}

const derExt = (oid: string, v: asn1js.AsnType) => new px.Extension(oid, false, v.toBER(false));
const sha256Fp = (der: Buffer) => createHash('sha256').update(der).digest('hex');

/** A test SEV-SNP chain: ARK-Milan (self-signed) → SEV-Milan (ASK) → SEV-VCEK, all P-384. */
export interface SnpTestChain {
  ark: Buffer;
  ask: Buffer;
  vcek: Buffer;
  vcekKey: KeyObject;
  chipId: Buffer;
  /** REPORTED_TCB bytes (Milan layout) the VCEK's SPLs name. */
  reportedTcb: Buffer;
  /** A trust store YAML pinning the test ARK for Milan. */
  trustStoreYaml: string;
}

/** Builds {@link SnpTestChain}. */
export async function snpTestChain(): Promise<SnpTestChain> {
  const ark = await cert({ subject: 'CN=ARK-Milan', alg: P384, ca: true });
  const ask = await cert({
    subject: 'CN=SEV-Milan',
    issuer: { ...ark, name: 'CN=ARK-Milan' },
    alg: P384,
    ca: true,
  });
  const chipId = randomBytes(64);
  const reportedTcb = Buffer.from([3, 0, 0, 0, 0, 0, 8, 115]);
  const spl = (oid: string, v: number) => derExt(oid, new asn1js.Integer({ value: v }));
  const vcek = await cert({
    subject: 'CN=SEV-VCEK',
    issuer: { ...ask, name: 'CN=SEV-Milan' },
    alg: P384,
    ca: false,
    extensions: [
      derExt('1.3.6.1.4.1.3704.1.2', new asn1js.IA5String({ value: 'Milan-B0' })),
      spl('1.3.6.1.4.1.3704.1.3.1', 3),
      spl('1.3.6.1.4.1.3704.1.3.2', 0),
      spl('1.3.6.1.4.1.3704.1.3.3', 8),
      spl('1.3.6.1.4.1.3704.1.3.8', 115),
      new px.Extension('1.3.6.1.4.1.3704.1.4', false, chipId),
    ],
  });
  return {
    ark: ark.der,
    ask: ask.der,
    vcek: vcek.der,
    vcekKey: await nodeKey(vcek.keys.privateKey),
    chipId,
    reportedTcb,
    trustStoreYaml: [
      'version: 1',
      'roots:',
      '  - name: test ARK-Milan',
      '    purpose: amd-ark',
      '    product: Milan',
      `    sha256: "${sha256Fp(ark.der)}"`,
      '    source: generated by the test',
      '',
    ].join('\n'),
  };
}

/** An SEV-SNP ATTESTATION_REPORT v2 (VMPL 0, no debug) signed by the chain's VCEK. */
export function snpReport(
  chain: SnpTestChain,
  reportData: Buffer,
  measurement = Buffer.alloc(48, 0x5a),
): Buffer {
  const b = Buffer.alloc(0x4a0);
  b.writeUInt32LE(2, 0); // VERSION
  b.writeBigUInt64LE(0x30000n, 0x08); // POLICY: SMT allowed, reserved bit 17; DEBUG clear
  b.writeUInt32LE(0, 0x30); // VMPL
  b.writeUInt32LE(1, 0x34); // SIGNATURE_ALGO: ECDSA P-384 SHA-384
  chain.reportedTcb.copy(b, 0x38); // CURRENT_TCB
  reportData.copy(b, 0x50);
  measurement.copy(b, 0x90);
  chain.reportedTcb.copy(b, 0x180); // REPORTED_TCB
  chain.chipId.copy(b, 0x1a0);
  const p1363 = sign('sha384', b.subarray(0, 0x2a0), { key: chain.vcekKey, dsaEncoding: 'ieee-p1363' });
  Buffer.from(p1363.subarray(0, 48)).reverse().copy(b, 0x2a0);
  Buffer.from(p1363.subarray(48)).reverse().copy(b, 0x2e8);
  return b;
}

/** A test TDX chain: "Intel SGX Root CA" → platform CA → "Intel SGX PCK Certificate", P-256. */
export interface TdxTestChain {
  pem: string;
  pckKey: KeyObject;
  trustStoreYaml: string;
}

const pem = (der: Buffer) =>
  `-----BEGIN CERTIFICATE-----\n${der.toString('base64').replace(/.{64}/g, '$&\n')}\n-----END CERTIFICATE-----\n`;

/** Builds {@link TdxTestChain}. */
export async function tdxTestChain(): Promise<TdxTestChain> {
  const root = await cert({ subject: 'CN=Intel SGX Root CA', alg: P256, ca: true });
  const platform = await cert({
    subject: 'CN=Intel SGX PCK Platform CA',
    issuer: { ...root, name: 'CN=Intel SGX Root CA' },
    alg: P256,
    ca: true,
  });
  const sgx = new asn1js.Sequence({ value: [] });
  const pck = await cert({
    subject: 'CN=Intel SGX PCK Certificate',
    issuer: { ...platform, name: 'CN=Intel SGX PCK Platform CA' },
    alg: P256,
    ca: false,
    extensions: [derExt('1.2.840.113741.1.13.1', sgx)],
  });
  return {
    pem: pem(pck.der) + pem(platform.der) + pem(root.der),
    pckKey: await nodeKey(pck.keys.privateKey),
    trustStoreYaml: [
      'version: 1',
      'roots:',
      '  - name: test Intel SGX Root CA',
      '    purpose: intel-sgx-root',
      `    sha256: "${sha256Fp(root.der)}"`,
      '    source: generated by the test',
      '',
    ].join('\n'),
  };
}

/** TD measurements shared by the TD report and its quote. */
export interface TdMeasurements {
  mrTd: Buffer;
  rtmr: [Buffer, Buffer, Buffer, Buffer];
}

/** TDREPORT_STRUCT (1024 bytes) with REPORTDATA and the measurements (MAC not computed). */
export function tdReport(reportData: Buffer, m: TdMeasurements): Buffer {
  const b = Buffer.alloc(1024);
  b[0] = 0x81; // REPORTTYPE.TYPE = TDX
  reportData.copy(b, 128);
  // TDINFO_STRUCT at 512: ATTRIBUTES 8, XFAM 8, MRTD, MRCONFIGID, MROWNER, MROWNERCONFIG, RTMR0-3
  Buffer.from([0xe7, 0x18, 0x06, 0, 0, 0, 0, 0]).copy(b, 520); // XFAM
  m.mrTd.copy(b, 528);
  for (const [i, r] of m.rtmr.entries()) r.copy(b, 720 + 48 * i);
  return b;
}

/** A TDX quote v4 of `td` (TDREPORT_STRUCT): header, TD report body, signature data, PCK chain. */
export function tdxQuote(chain: TdxTestChain, td: Buffer): Buffer {
  const header = Buffer.concat([
    le16(4),
    le16(2),
    le32(0x81),
    le16(0),
    le16(0),
    Buffer.from('939a7233f79c4ca9940a0db3957f0607', 'hex'),
    Buffer.alloc(20),
  ]);
  // TD report body: TEE_TCB_SVN, MRSEAM, MRSIGNERSEAM, SEAMATTRIBUTES, then TDINFO fields, REPORTDATA
  const body = Buffer.concat([
    Buffer.alloc(16 + 48 + 48 + 8),
    td.subarray(512, 512 + 8 + 8 + 48 * 4 + 48 * 4),
    td.subarray(128, 192),
  ]);
  const att = generateKeyPairSync('ec', { namedCurve: 'P-256' });
  const jwk = att.publicKey.export({ format: 'jwk' }) as { x: string; y: string };
  const attKey = Buffer.concat([Buffer.from(jwk.x, 'base64url'), Buffer.from(jwk.y, 'base64url')]);
  const signed = Buffer.concat([header, body]);
  const sig = sign('sha256', signed, { key: att.privateKey, dsaEncoding: 'ieee-p1363' });
  const auth = Buffer.alloc(32, 7);
  const qe = Buffer.alloc(384);
  Buffer.concat([createHash('sha256').update(attKey).update(auth).digest(), Buffer.alloc(32)]).copy(qe, 320);
  const qeSig = sign('sha256', qe, { key: chain.pckKey, dsaEncoding: 'ieee-p1363' });
  const pckPem = Buffer.from(chain.pem);
  const inner = Buffer.concat([qe, qeSig, le16(auth.length), auth, le16(5), le32(pckPem.length), pckPem]);
  const sigData = Buffer.concat([sig, attKey, le16(6), le32(inner.length), inner]);
  return Buffer.concat([signed, le32(sigData.length), sigData]);
}

// ---------- the vTPM quote under HCLAkPub ----------

/** An RSA-2048 HCLAkPub key pair. */
export function hclAk(): { publicKey: KeyObject; privateKey: KeyObject } {
  return generateKeyPairSync('rsa', { modulusLength: 2048 });
}

/** TPMT_SIGNATURE (RSASSA, SHA-256) of `attest` by `priv`. */
export function rsassaQuoteSignature(attest: Buffer, priv: KeyObject): Buffer {
  return Buffer.concat([u16(0x0014), u16(0x000b), tpm2b(sign('sha256', attest, priv))]);
}
