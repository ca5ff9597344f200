/**
 * EK and AK enrollment on swtpm (docs/spec/tpm.md#ek-and-ak-enrollment): the EK certificate from NV against the
 * template EK, software MakeCredential + TPM ActivateCredential, `cmcp tpm enroll` issuing an AK
 * certificate from a throwaway AK CA, persistence of the AK across a TPM restart, and the
 * refusals (untrusted EK certificate, certificate for another key, unacceptable AK attributes,
 * occupied handle). swtpm is provisioned with --create-ek-cert and without --allow-signing.
 */
import { createHash, randomBytes, X509Certificate } from 'node:crypto';
import { cpSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fromB64u } from '@cmcp/verify/formats';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { stringify } from 'yaml';
import {
  EK_PROFILES,
  makeCredential,
  parsePublic,
  publicKeyOf,
  spkiDer,
  Tpm,
  TpmError,
} from '../native/tpm/index.js';
import { runEnroll } from '../src/cli/tpm.js';
import { EnrollmentError, enrollTpm, readEk } from '../src/tee/enrollment.js';
import { loadAkCa, loadCertFiles } from '../src/tee/x509.js';
import { enrollmentSection, makeAkCa, type TestAkCa } from '../testing/attestation-ca.js';
import { startSwtpm as startSwtpmInPlace } from '../testing/swtpm.js';
import { startSwtpm, swtpmCa, swtpmRunContext } from '../testing/vitest-swtpm.js';

const sha = (alg: string, ...b: Buffer[]) => createHash(alg).update(Buffer.concat(b)).digest();
const u32 = (v: number) => {
  const b = Buffer.alloc(4);
  b.writeUInt32BE(v);
  return b;
};

let dir: string;
let ca: TestAkCa;
beforeAll(async () => {
  dir = mkdtempSync(join(tmpdir(), 'cmcp-enroll-'));
  ca = await makeAkCa(dir);
});
afterAll(() => rmSync(dir, { recursive: true, force: true }));

describe('EK (item 1)', () => {
  let sw: Awaited<ReturnType<typeof startSwtpm>>;
  let tpm: Tpm;
  beforeAll(async () => {
    sw = await startSwtpm();
    tpm = Tpm.open(sw.tcti);
  });
  afterAll(async () => {
    tpm?.close();
    await sw?.stop();
  });

  for (const alg of ['rsa2048', 'ecc-p384'] as const) {
    it(`${alg}: the NV certificate certifies the EK recreated from the TCG default template`, async () => {
      const { ek, certificate } = readEk(tpm, alg);
      try {
        const cert = new X509Certificate(certificate);
        expect(spkiDer(cert.publicKey).equals(spkiDer(publicKeyOf(parsePublic(ek.publicArea))))).toBe(true);
        // the same key swtpm_setup persisted at its usual handle: same Name
        const persisted = tpm.readPublic(EK_PROFILES[alg].persistentHandle);
        expect(persisted?.name.toString('hex')).toBe(ek.name.toString('hex'));
        // the certificate chains to the run's local CA (independent check with node:crypto)
        const sw = await swtpmCa();
        const issuer = new X509Certificate(readFileSync(sw.issuerCertPath));
        expect(cert.verify(issuer.publicKey)).toBe(true);
        expect(cert.keyUsage).toContain('2.23.133.8.1');
        // QN of the EK = nameAlg ‖ H(TPM_RH_ENDORSEMENT ‖ Name), computed independently
        const h = alg === 'rsa2048' ? 'sha256' : 'sha384';
        const qn = Buffer.concat([ek.name.subarray(0, 2), sha(h, u32(0x4000000b), ek.name)]);
        expect(ek.qualifiedName.equals(qn)).toBe(true);
      } finally {
        ek.flush();
      }
    });
  }

  it('no certificate at the ECC P-256 index → EK_CERT_ABSENT', () => {
    expect(() => readEk(tpm, 'ecc-p256')).toThrow(expect.objectContaining({ reason: 'EK_CERT_ABSENT' }));
  });

  it('a certificate for another key than the template EK → EK_CERT_KEY_MISMATCH (EK flushed)', async () => {
    const sw2 = await startSwtpm();
    const t2 = Tpm.open(sw2.tcti);
    try {
      // Stage the RSA EK certificate at the P-256 EK certificate index.
      t2.writeNewNv(EK_PROFILES['ecc-p256'].certIndex, t2.readNv(EK_PROFILES.rsa2048.certIndex) as Buffer);
      let err: unknown;
      try {
        readEk(t2, 'ecc-p256');
      } catch (e) {
        err = e;
      }
      expect(err).toBeInstanceOf(EnrollmentError);
      expect((err as EnrollmentError).reason).toBe('EK_CERT_KEY_MISMATCH');
      expect((err as EnrollmentError).message).toMatch(/different key/);
      // nothing leaked: three primaries still fit in swtpm's three slots
      for (let i = 0; i < 3; i++) t2.createEk('ecc-p256');
    } finally {
      t2.close();
      await sw2.stop();
    }
  });

  for (const alg of ['rsa2048', 'ecc-p384'] as const) {
    it(`${alg}: software MakeCredential is recovered only by ActivateCredential for that AK`, () => {
      const ek = tpm.createEk(alg);
      const ak = tpm.loadAkUnderEk(ek, tpm.createAkUnderEk(ek, 'ecc-p256'));
      try {
        const secret = randomBytes(32);
        const made = makeCredential(ek.publicArea, ak.name, secret);
        expect(tpm.activateCredential(ak, ek, made.credentialBlob, made.secret).equals(secret)).toBe(true);
        // made for another Name: the TPM refuses (integrity check)
        const other = Buffer.from(ak.name);
        other[5]! ^= 1;
        const wrong = makeCredential(ek.publicArea, other, secret);
        expect(() => tpm.activateCredential(ak, ek, wrong.credentialBlob, wrong.secret)).toThrow(TpmError);
        // the AK is EK-parented: its QN = nameAlg ‖ H(QN(EK) ‖ Name)
        expect(ak.parentQualifiedName.equals(ek.qualifiedName)).toBe(true);
        const q = tpm.quote(ak, randomBytes(32), [0]);
        const qs = q.attest.subarray(6, 6 + 2 + q.attest.readUInt16BE(6) - 0);
        expect(
          qs
            .subarray(2)
            .equals(Buffer.concat([ak.name.subarray(0, 2), sha('sha256', ek.qualifiedName, ak.name)])),
        ).toBe(true);
      } finally {
        ak.flush();
        ek.flush();
      }
    });
  }
});

describe('AK enrollment (item 2)', () => {
  it('enrolls, persists the AK across a TPM restart, and refuses re-enrollment without --replace', async () => {
    const ctx = await swtpmRunContext();
    const stateDir = join(dir, 'state-persist');
    cpSync(ctx.templateStateDir, stateDir, { recursive: true });
    rmSync(join(stateDir, '.lock'), { force: true });
    let sw = await startSwtpmInPlace({ stateDir, pidRegistryDir: ctx.pidRegistryDir });
    const sca = await swtpmCa();
    const recordPath = join(dir, 'persist-record.json');
    const base = {
      tcti: sw.tcti,
      ekAlgorithm: 'rsa2048' as const,
      akAlgorithm: 'ecc-p256' as const,
      akHandle: 0x81000101,
      ekRoots: loadCertFiles([sca.rootCertPath]),
      ekIntermediates: loadCertFiles([sca.issuerCertPath]),
      akCa: loadAkCa(ca.keyPath, ca.certPath, []),
      akCertDays: 30,
      recordPath,
    };
    try {
      const record = await enrollTpm(base);
      expect(JSON.parse(readFileSync(recordPath, 'utf8'))).toEqual(record);
      // the AK: restricted, sign, fixedTPM, fixedParent, no decrypt
      const akPub = parsePublic(fromB64u(record.ak_public));
      for (const bit of [0x10000, 0x40000, 0x2, 0x10]) expect(akPub.attributes & bit).toBe(bit);
      expect(akPub.attributes & 0x20000).toBe(0);
      // AK certificate: issued by the AK CA, for the AK's key, with the AIK EKU
      const [leafDer, caDer] = record.ak_cert_chain.map((c) => fromB64u(c));
      const leaf = new X509Certificate(leafDer!);
      expect(caDer!.equals(ca.certDer)).toBe(true);
      expect(leaf.verify(new X509Certificate(ca.certDer).publicKey)).toBe(true);
      expect(leaf.keyUsage).toEqual(['2.23.133.8.3']);
      expect(leaf.ca).toBe(false);
      expect(spkiDer(leaf.publicKey).equals(spkiDer(publicKeyOf(akPub)))).toBe(true);
      // parent QN is the EK's: nameAlg ‖ SHA-256(0x4000000B ‖ EK Name)
      const ekName = Buffer.concat([Buffer.from([0, 0x0b]), sha('sha256', fromB64u(record.ek.public))]);
      expect(record.ak_parent_qualified_name).toBe(
        Buffer.concat([Buffer.from([0, 0x0b]), sha('sha256', u32(0x4000000b), ekName)]).toString('base64url'),
      );
      expect(record.ek.chain).toHaveLength(3); // EK cert ← issuer ← root

      // TPM restart: the same key is still at the handle, and is the EK's child
      await sw.stop();
      sw = await startSwtpmInPlace({ stateDir, pidRegistryDir: ctx.pidRegistryDir });
      const tpm = Tpm.open(sw.tcti);
      try {
        const ak = tpm.loadPersistentAk(0x81000101, fromB64u(record.ak_parent_qualified_name));
        expect(ak?.publicArea.toString('base64url')).toBe(record.ak_public);
        expect(ak?.persistentHandle).toBe(0x81000101);
        ak?.flush();
        // and not a child of anything else
        expect(() => tpm.loadPersistentAk(0x81000101, u32(0x4000000b))).toThrow(/expected parent/);
      } finally {
        tpm.close();
      }

      // re-enrollment needs --replace; with it, a new AK replaces the old one
      await expect(enrollTpm({ ...base, tcti: sw.tcti })).rejects.toMatchObject({
        reason: 'AK_HANDLE_OCCUPIED',
      });
      const again = await enrollTpm({ ...base, tcti: sw.tcti, replace: true });
      expect(again.ak_public).not.toBe(record.ak_public);
    } finally {
      await sw.stop();
    }
  });

  it('refuses an EK certificate that does not chain to the pinned roots → EK_CERT_UNTRUSTED', async () => {
    const sw = await startSwtpm();
    try {
      await expect(
        enrollTpm({
          tcti: sw.tcti,
          ekAlgorithm: 'rsa2048',
          akAlgorithm: 'ecc-p256',
          akHandle: 0x81000101,
          ekRoots: [ca.certDer], // not the TPM manufacturer
          ekIntermediates: [],
          akCa: loadAkCa(ca.keyPath, ca.certPath, []),
          akCertDays: 30,
          recordPath: join(dir, 'untrusted.json'),
        }),
      ).rejects.toMatchObject({ reason: 'EK_CERT_UNTRUSTED' });
      // nothing was persisted
      const tpm = Tpm.open(sw.tcti);
      expect(tpm.readPublic(0x81000101)).toBeNull();
      tpm.close();
    } finally {
      await sw.stop();
    }
  });

  it('the enrollment side refuses an AK that is not restricted → AK_ATTRIBUTES_REFUSED', async () => {
    const sw = await startSwtpm();
    const sca = await swtpmCa();
    try {
      await expect(
        enrollTpm({
          tcti: sw.tcti,
          ekAlgorithm: 'ecc-p384',
          akAlgorithm: 'rsa2048',
          akHandle: 0x81000101,
          ekRoots: loadCertFiles([sca.rootCertPath]),
          ekIntermediates: loadCertFiles([sca.issuerCertPath]),
          akCa: loadAkCa(ca.keyPath, ca.certPath, []),
          akCertDays: 30,
          recordPath: join(dir, 'unrestricted.json'),
          tamperAkPublic: (p) => {
            const b = Buffer.from(p);
            b.writeUInt32BE(b.readUInt32BE(4) & ~0x10000, 4); // clear restricted
            return b;
          },
        }),
      ).rejects.toMatchObject({
        reason: 'AK_ATTRIBUTES_REFUSED',
        message: expect.stringMatching(/restricted must be set/),
      });
    } finally {
      await sw.stop();
    }
  });

  it('`cmcp tpm enroll --config` writes the record; a second run without --replace exits 1', async () => {
    const sw = await startSwtpm();
    const cdir = mkdtempSync(join(dir, 'cli-'));
    try {
      const cfgPath = join(cdir, 'cmcp.yaml');
      writeFileSync(
        cfgPath,
        stringify({
          dev_mode: false,
          database: join(cdir, 'cmcp.db'),
          agents: [{ agent_id: 'a', token_sha256: '0'.repeat(64) }],
          attestation: {
            provider: 'tpm',
            tcti: sw.tcti,
            enrollment: await enrollmentSection(cdir, ca, { ek_algorithm: 'ecc-p384' }),
          },
        }),
      );
      let out = '';
      let err = '';
      const io = { stdout: (t: string) => (out += t), stderr: (t: string) => (err += t) };
      expect(await runEnroll({ config: cfgPath }, io)).toBe(0);
      expect(out).toMatch(/enrolled/);
      expect(out).toMatch(/ak_handle: {3}0x81000101/);
      const rec = JSON.parse(readFileSync(join(cdir, 'ak-enrollment.json'), 'utf8'));
      expect(rec.ek.algorithm).toBe('ecc-p384');
      expect(await runEnroll({ config: cfgPath }, io)).toBe(1);
      expect(err).toMatch(/refused: AK_HANDLE_OCCUPIED/);
      expect(await runEnroll({ config: cfgPath, replace: true }, io)).toBe(0);
    } finally {
      await sw.stop();
    }
  });
});
