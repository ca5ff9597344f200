/**
 * Enrollment, measurement and quoting end to end on swtpm (docs/spec/tpm.md#ek-and-ak-enrollment, docs/spec/measurement.md): `cmcp tpm
 * enroll`, a gateway that loads the enrolled AK, extends its measurement into PCR 15 and quotes
 * it, and `cmcp verify` offline against a trust store pinning the test AK CA → hardware-attested.
 * The measurement is recomputed here from its inputs with an independent encoder, and the PCR
 * extend checked from the claim. Also: a cloud platform AK (Azure layout) staged on swtpm.
 */
import { createHash, randomBytes } from 'node:crypto';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { runVerify } from '@cmcp/verify/cli';
import type { Claim } from '@cmcp/verify/formats';
import { fromB64u } from '@cmcp/verify/formats';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { stringify } from 'yaml';
import { parsePublic, publicKeyOf, spkiDer, Tpm } from '../native/tpm/index.js';
import { runEnroll } from '../src/cli/tpm.js';
import { issueAkCertificate, loadAkCa } from '../src/tee/x509.js';
import { enrollmentSection, makeAkCa, type TestAkCa, writeTrustStore } from '../testing/attestation-ca.js';
import { startSwtpm } from '../testing/vitest-swtpm.js';
import { cleanup, rest, startInProcess, type TestConfig, writeConfig } from './harness/gateway.js';

const sha256 = (...b: (Buffer | string)[]) => {
  const h = createHash('sha256');
  for (const x of b) h.update(x);
  return h.digest();
};
/** Independent encoder of the measurement (docs/attestation.md), not the gateway's code. */
function lp(s: string): Buffer {
  const b = Buffer.from(s, 'utf8');
  const n = Buffer.alloc(4);
  n.writeUInt32BE(b.length);
  return Buffer.concat([n, b]);
}
function expectedMeasurement(i: Record<string, unknown>): Buffer {
  const v = Buffer.alloc(4);
  v.writeUInt32BE(1);
  const parts = [lp('cmcp.gateway-measurement'), v];
  for (const k of ['code', 'lockfile', 'policy_bundle_hash', 'catalog_hash', 'config']) {
    parts.push(lp(k), lp((i[k] as string | null) ?? ''));
  }
  return sha256(Buffer.concat(parts));
}

let dir: string;
let ca: TestAkCa;
let trustStore: string;
beforeAll(async () => {
  dir = mkdtempSync(join(tmpdir(), 'cmcp-att-e2e-'));
  ca = await makeAkCa(dir);
  trustStore = writeTrustStore(dir, ca);
});
afterAll(() => rmSync(dir, { recursive: true, force: true }));

async function closedSession(url: string): Promise<{ claim: Claim; bundle: unknown; sid: string }> {
  const s = await rest(url, 'alice-token', 'POST', '/sessions', {});
  expect(s.status).toBe(201);
  const sid = s.body.session_id as string;
  const claim = (await rest(url, 'alice-token', 'POST', `/sessions/${sid}/close`)).body as Claim;
  const bundle = (await rest(url, 'alice-token', 'GET', `/sessions/${sid}/audit`)).body;
  return { claim, bundle, sid };
}

async function verifyCli(claim: Claim, bundle: unknown, extra: Record<string, string> = {}) {
  const cp = join(dir, `claim-${randomBytes(4).toString('hex')}.json`);
  const bp = `${cp}.audit.json`;
  writeFileSync(cp, JSON.stringify(claim));
  writeFileSync(bp, JSON.stringify(bundle));
  let out = '';
  let err = '';
  const code = await runVerify(
    cp,
    { audit: bp, json: true, ...extra },
    { stdout: (t) => (out += t), stderr: (t) => (err += t) },
  );
  return { code, report: out ? JSON.parse(out) : null, err };
}

describe('enrolled AK + measured gateway on swtpm', () => {
  let sw: Awaited<ReturnType<typeof startSwtpm>>;
  let cfg: TestConfig;
  beforeAll(async () => {
    sw = await startSwtpm();
    const cdir = mkdtempSync(join(dir, 'gw-'));
    cfg = await writeConfig({
      dir: cdir,
      attestation: {
        provider: 'tpm',
        tcti: sw.tcti,
        ak_algorithm: 'ecc-p256',
        pcrs: [0, 7],
        enrollment: await enrollmentSection(cdir, ca),
      },
    });
    let err = '';
    const code = await runEnroll({ config: cfg.file }, { stdout: () => {}, stderr: (t) => (err += t) });
    expect(err).toBe('');
    expect(code).toBe(0);
  });
  afterAll(async () => {
    await sw?.stop();
    if (cfg) cleanup(cfg.dir);
  });

  it('claims carry the AK chain, the EK-parent QN and the measurement; cmcp verify says hardware-attested', async () => {
    const gw = await startInProcess(cfg);
    try {
      const { claim, bundle } = await closedSession(gw.url);
      const tpm = claim.evidence.tpm!;
      expect(claim.evidence.status).toBe('bound');
      expect(tpm.ak_source).toBe('enrolled');
      expect(tpm.ak_cert_chain).toHaveLength(2);
      expect(fromB64u(tpm.ak_cert_chain[1]!).equals(ca.certDer)).toBe(true);
      const record = JSON.parse(
        (await import('node:fs')).readFileSync(join(cfg.dir, 'ak-enrollment.json'), 'utf8'),
      );
      expect(tpm.ak_public).toBe(record.ak_public);
      expect(tpm.ak_parent_qualified_name).toBe(record.ak_parent_qualified_name);
      // the parent QN is the EK's (recomputed here), so qualifiedSigner = H(QN(EK) ‖ AK Name)
      const ekName = Buffer.concat([Buffer.from([0, 0x0b]), sha256(fromB64u(record.ek.public))]);
      const ekQn = Buffer.concat([Buffer.from([0, 0x0b]), sha256(Buffer.from('4000000b', 'hex'), ekName)]);
      expect(fromB64u(tpm.ak_parent_qualified_name).equals(ekQn)).toBe(true);

      // measurement: inputs → digest (independent encoder) → claim and preimage
      const m = claim.evidence.measurement!;
      expect(m.version).toBe(1);
      expect(m.inputs.code_files).toBeGreaterThan(0);
      expect(m.inputs.lockfile).toMatch(/^sha256:[0-9a-f]{64}$/);
      const digest = expectedMeasurement(m.inputs);
      expect(m.digest).toBe(`sha256:${digest.toString('hex')}`);
      expect(claim.gateway_measurement).toBe(m.digest);
      expect(claim.binding.preimage.gateway_measurement).toBe(m.digest);
      // PCR 15 is quoted; its value is SHA-256(pcr_before ‖ digest); fresh TPM → pcr_before = 0
      expect(tpm.pcr_selection.pcrs).toEqual([0, 7, 15]);
      expect(m.pcr).toBe(15);
      expect(fromB64u(m.pcr_before!).equals(Buffer.alloc(32))).toBe(true);
      const pcr15 = fromB64u(tpm.pcr_values['15']!);
      expect(pcr15.equals(sha256(Buffer.alloc(32), digest))).toBe(true);

      // gateway chain records the provider choice and the measurement
      const g = gw.chain.entries('gateway');
      expect(g.find((e) => e.entry_type === 'attestation_provider')?.detail).toMatchObject({
        provider: 'tpm',
        tier: 'tpm',
        reason: 'configured',
      });
      const me = g.find((e) => e.entry_type === 'gateway_measurement')?.detail as Record<string, unknown>;
      expect(me.digest).toBe(m.digest);
      expect(me.provider_start).toMatchObject({ ok: true, ak_source: 'enrolled', ak_handle: '0x81000101' });

      // offline verification with the test AK CA pinned
      const v = await verifyCli(claim, bundle, { trustStore });
      expect(v.err).toBe('');
      expect(v.report.verdict).toBe('hardware-attested');
      expect(v.code).toBe(0);
      const anchor = v.report.checks.find((c: { id: string }) => c.id === 'evidence.anchor');
      expect(anchor.status).toBe('pass');
      // without the pin the same claim is only hardware-unanchored
      const empty = join(dir, 'empty-trust.yaml');
      writeFileSync(empty, 'version: 1\nroots: []\n');
      expect((await verifyCli(claim, bundle, { trustStore: empty })).report.verdict).toBe(
        'hardware-unanchored',
      );
      // PCR 15 pinned as a reference value: the verifier checks the quoted value
      const rv = join(dir, 'rv.yaml');
      writeFileSync(
        rv,
        `version: 1\ntpm:\n  pcrs:\n    "15": ["${sha256(Buffer.alloc(32), digest).toString('hex')}"]\n`,
      );
      const vr = await verifyCli(claim, bundle, { trustStore, referenceValues: rv });
      expect(vr.report.verdict).toBe('hardware-attested');
      writeFileSync(rv, `version: 1\ntpm:\n  pcrs:\n    "15": ["${'00'.repeat(32)}"]\n`);
      expect((await verifyCli(claim, bundle, { trustStore, referenceValues: rv })).report.verdict).toBe(
        'invalid',
      );
    } finally {
      await gw.close();
    }
  });

  it('after a gateway restart the same AK signs, and pcr_before is the previous PCR value', async () => {
    const gw = await startInProcess(cfg);
    try {
      const { claim, bundle } = await closedSession(gw.url);
      const tpm = claim.evidence.tpm!;
      const m = claim.evidence.measurement!;
      const digest = expectedMeasurement(m.inputs);
      const before = fromB64u(m.pcr_before!);
      expect(before.equals(Buffer.alloc(32))).toBe(false);
      expect(fromB64u(tpm.pcr_values['15']!).equals(sha256(before, digest))).toBe(true);
      expect((await verifyCli(claim, bundle, { trustStore })).report.verdict).toBe('hardware-attested');
    } finally {
      await gw.close();
    }
  });

  it('an enrolled AK that was evicted → start refused; with serve_unbound: binding absent AK_NOT_PERSISTED, signed-only', async () => {
    const t = Tpm.open(sw.tcti);
    expect(t.evictPersistent(0x81000101)).toBe(true);
    t.close();
    // provider: tpm is named: a provider that cannot start refuses start-up unless serve_unbound
    await expect(startInProcess(cfg)).rejects.toMatchObject({
      code: 'ATTESTATION_UNAVAILABLE',
      message: expect.stringContaining('AK_NOT_PERSISTED'),
    });
    const raw = structuredClone(cfg.raw) as { attestation: Record<string, unknown> };
    raw.attestation.on_unavailable = 'serve_unbound';
    const file = join(cfg.dir, 'cmcp-serve-unbound.yaml');
    writeFileSync(file, stringify(raw));
    const gw = await startInProcess({ ...cfg, file, raw });
    try {
      const start = gw.chain.entries('gateway').filter((e) => e.entry_type === 'attestation_binding_failed');
      expect(start.at(-1)?.detail).toMatchObject({ phase: 'start-up', reason: 'AK_NOT_PERSISTED' });
      const { claim, bundle, sid } = await closedSession(gw.url);
      expect(claim.evidence).toMatchObject({ status: 'absent', reason: 'AK_NOT_PERSISTED' });
      expect(gw.chain.entries(sid).some((e) => e.entry_type === 'attestation_binding_failed')).toBe(true);
      expect((await verifyCli(claim, bundle, { trustStore })).report.verdict).toBe('signed-only');
    } finally {
      await gw.close();
    }
  });
});

describe('cloud platform AK (Azure layout staged on swtpm)', () => {
  it('uses the AK at 0x81000003 with its NV certificate; refuses a certificate of another key', async () => {
    const akCa = loadAkCa(ca.keyPath, ca.certPath, []);
    const certFor = (ak: { publicArea: Buffer; name: Buffer }) =>
      issueAkCertificate({
        ca: akCa,
        akKey: publicKeyOf(parsePublic(ak.publicArea)),
        akName: ak.name,
        days: 30,
      });
    const sw = await startSwtpm();
    const cdir = mkdtempSync(join(dir, 'azure-'));
    try {
      // A: an EK-parented key at 0x81000003 with its certificate at NV 0x01C101D0. Its parent QN
      // cannot be derived from the hierarchy handles, so it is refused and the reason recorded.
      const tpm = Tpm.open(sw.tcti);
      const ek = tpm.createEk('rsa2048');
      const child = tpm.loadAkUnderEk(ek, tpm.createAkUnderEk(ek, 'rsa2048'));
      tpm.persistAk(child, 0x81000003).flush();
      tpm.writeNewNv(0x01c101d0, await certFor(child));
      child.flush();
      ek.flush();
      tpm.close();
      const cfg = await writeConfig({ dir: cdir, attestation: { provider: 'tpm', tcti: sw.tcti } });
      const gw = await startInProcess(cfg);
      try {
        expect((await closedSession(gw.url)).claim.evidence.tpm?.ak_source).toBe('ephemeral');
        const me = gw.chain.entries('gateway').find((e) => e.entry_type === 'gateway_measurement');
        expect(JSON.stringify(me?.detail)).toMatch(/not a primary key of a hierarchy/);
      } finally {
        await gw.close();
      }
      // B: a primary AK at 0x81000003 but the NV certificate is still the old key's: refused.
      const t2 = Tpm.open(sw.tcti);
      t2.evictPersistent(0x81000003);
      const prim = t2.createAk('rsa2048');
      t2.persistAk(prim, 0x81000003).flush();
      prim.flush();
      t2.close();
      const gw2 = await startInProcess(cfg);
      try {
        expect((await closedSession(gw2.url)).claim.evidence.tpm?.ak_source).toBe('ephemeral');
        const me = gw2.chain
          .entries('gateway')
          .filter((e) => e.entry_type === 'gateway_measurement')
          .at(-1);
        expect(JSON.stringify(me?.detail)).toMatch(/certifies another key/);
      } finally {
        await gw2.close();
      }
    } finally {
      await sw.stop();
    }

    // C: a primary AK with its own certificate (as on Azure), plus the issuing CA configured as
    // the platform chain (on Azure: "Azure Virtual TPM CA 03"): platform AK, anchored.
    const sw2 = await startSwtpm();
    try {
      const t = Tpm.open(sw2.tcti);
      const p = t.createAk('rsa2048');
      t.persistAk(p, 0x81000003).flush();
      const leaf = await certFor(p);
      t.writeNewNv(0x01c101d0, leaf);
      p.flush();
      t.close();
      const cfg3 = await writeConfig({
        attestation: { provider: 'tpm', tcti: sw2.tcti, platform_ak_chain: [ca.certPath] },
      });
      const gw3 = await startInProcess(cfg3);
      try {
        const { claim, bundle } = await closedSession(gw3.url);
        const tpmEv = claim.evidence.tpm!;
        expect(tpmEv.ak_source).toBe('platform');
        expect(tpmEv.ak_cert_chain.map((c) => fromB64u(c))).toEqual([leaf, ca.certDer]);
        expect(spkiDer(publicKeyOf(parsePublic(fromB64u(tpmEv.ak_public))))).toEqual(
          spkiDer(new (await import('node:crypto')).X509Certificate(leaf).publicKey),
        );
        // a primary key of the endorsement hierarchy: its parent QN is the hierarchy handle
        expect(tpmEv.ak_parent_qualified_name).toBe(Buffer.from('4000000b', 'hex').toString('base64url'));
        expect((await verifyCli(claim, bundle, { trustStore })).report.verdict).toBe('hardware-attested');
      } finally {
        await gw3.close();
        cleanup(cfg3.dir);
      }
    } finally {
      await sw2.stop();
    }
  });
});
