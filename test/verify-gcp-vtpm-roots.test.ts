/**
 * The Google Cloud vTPM roots as an opt-in trust anchor set (attestation/trust-store.gcp-vtpm.yaml
 * and the certificates in attestation/gcp-vtpm/): each pin is the SHA-256 of a shipped self-signed
 * certificate, the default store pins none of them, and real GCE AK certificates
 * (test/vectors/tpm/gce-vtpm-ak-certs) anchor under the set and only under it.
 */
import { createHash } from 'node:crypto';
import { readFileSync } from 'node:fs';
import { loadTrustStore, parseTrustStore, type TrustStore } from '@cmcp/verify';
import { describe, expect, it } from 'vitest';
import { verifyAkCertChain } from '../packages/verify/src/akcert.js';
import {
  type Cert,
  certsFromBytes,
  issuedBy,
  parseCert,
  validateChain,
} from '../packages/verify/src/x509.js';
import { hasVectors, vectorPath } from './harness/vectors.js';

const ATT = new URL('../packages/verify/attestation/', import.meta.url).pathname;
const AT = new Date('2027-01-01T00:00:00Z');
const gcp = (f: string): Cert => parseCert(readFileSync(`${ATT}gcp-vtpm/${f}`));
const gcpStore = (): TrustStore => loadTrustStore(`${ATT}trust-store.gcp-vtpm.yaml`);
const defaultStore = (): TrustStore => loadTrustStore(`${ATT}trust-store.yaml`);

describe('the Google Cloud vTPM trust anchor set (opt-in)', () => {
  it('pins exactly the two shipped self-signed roots, as cloud-vtpm; their SPKI hashes as stated; each intermediate is signed by its root', () => {
    const store = gcpStore();
    const roots = [gcp('gcp_ek_ak_ca_root.crt'), gcp('tpm_ek_root_1.cer')];
    expect(store.roots.map((r) => [r.purpose, r.sha256])).toEqual(roots.map((c) => ['cloud-vtpm', c.sha256]));
    for (const c of roots) expect(issuedBy(c, c), c.node.subject).toBe(true);
    expect(roots[0]?.node.subject).toMatch(/CN=EK\/AK CA Root/);
    expect(issuedBy(gcp('gcp_ek_ak_ca_intermediate_v3.crt'), roots[0] as Cert)).toBe(true);
    for (const f of ['tpm_ek_intermediate_2.crt', 'tpm_ek_intermediate_3.crt'])
      expect(issuedBy(gcp(f), roots[1] as Cert), f).toBe(true);
    for (const r of store.roots) {
      const c = roots.find((x) => x.sha256 === r.sha256) as Cert;
      const spki = c.node.publicKey.export({ type: 'spki', format: 'der' });
      expect(r.spki_sha256).toBe(createHash('sha256').update(spki).digest('hex'));
    }
  });

  it('is opt-in: the default trust store pins none of its certificates', () => {
    const pinned = new Set(defaultStore().roots.map((r) => r.sha256));
    for (const f of [
      'gcp_ek_ak_ca_root.crt',
      'gcp_ek_ak_ca_intermediate_v3.crt',
      'tpm_ek_root_1.cer',
      'tpm_ek_intermediate_2.crt',
      'tpm_ek_intermediate_3.crt',
    ])
      expect(pinned.has(gcp(f).sha256), f).toBe(false);
    // a store may combine both sets
    const both = parseTrustStore(
      JSON.stringify({ version: 1, roots: [...defaultStore().roots, ...gcpStore().roots] }),
    );
    expect(both.roots.length).toBe(defaultStore().roots.length + 2);
  });
});

describe.skipIf(!hasVectors())('real GCE AK certificates under the set', () => {
  const leaf = (f: string) =>
    certsFromBytes(readFileSync(vectorPath('tpm', 'gce-vtpm-ak-certs', f)))[0] as Cert;
  // the certificates travel with the evidence (leaf, intermediate, root); the store pins the root
  const EKAK = ['gcp_ek_ak_ca_intermediate_v3.crt', 'gcp_ek_ak_ca_root.crt'] as const;
  const V1 = ['tpm_ek_intermediate_3.crt', 'tpm_ek_root_1.cer'] as const;
  const cases = [
    ['pca_tpm_ecc_sign_cert.pem', EKAK, 'Google Cloud EK/AK CA Root'],
    ['pca_tpm_rsa_sign_cert.pem', EKAK, 'Google Cloud EK/AK CA Root'],
  ] as const;
  const anchor = (l: Cert, issuers: readonly string[], trustStore: TrustStore, key = l.node.publicKey) =>
    verifyAkCertChain({ certs: [l, ...issuers.map(gcp)], akKey: key, trustStore, at: AT });

  for (const [f, issuers, root] of cases) {
    it(`${f}: anchored at ${root} with the set; ROOT_NOT_PINNED with the default store`, () => {
      const l = leaf(f);
      const ok = anchor(l, issuers, gcpStore());
      expect(ok.check, ok.check.detail).toMatchObject({ status: 'pass' });
      expect(ok.anchor?.name).toBe(root);
      const dflt = anchor(l, issuers, defaultStore());
      expect(dflt.check).toMatchObject({ status: 'absent', reason_code: 'ROOT_NOT_PINNED' });
      expect(dflt.anchor).toBeUndefined();
    });
  }

  it('uca_tpm_ecc_sign_cert.pem (older CA): its chain anchors at the tpm_ek_v1 root of the set, but as an AK certificate it is refused — its EKU is tcg-kp-EKCertificate, not AIKCertificate', () => {
    const l = leaf('uca_tpm_ecc_sign_cert.pem');
    const chain = validateChain({
      certs: [l, ...V1.map(gcp)],
      roots: gcpStore().roots,
      at: AT,
      what: 'EK',
      usedFor: 'tpm-ek',
    });
    expect(chain.status).toBe('anchored');
    if (chain.status === 'anchored') expect(chain.root.name).toBe('Google Cloud tpm_ek_v1_cloud_host_root');
    const ak = anchor(l, V1, gcpStore());
    expect(ak.check.status).toBe('fail');
    expect(ak.check.detail).toMatch(/EKU 2\.23\.133\.8\.1 does not include tcg-kp-AIKCertificate/);
  });

  it('a flipped byte in a leaf’s signed part breaks the chain; another key than the leaf’s is not bound', () => {
    const [f, issuers] = cases[0];
    const der = Buffer.from(leaf(f).der);
    der[200] = (der[200] as number) ^ 0x01;
    let flipped: Cert | undefined;
    try {
      flipped = parseCert(der);
    } catch {
      flipped = undefined;
    }
    if (flipped)
      expect(anchor(flipped, issuers, gcpStore(), leaf(f).node.publicKey).check.status).toBe('fail');
    const other = anchor(leaf(f), issuers, gcpStore(), leaf(cases[1][0]).node.publicKey);
    expect(other.check).toMatchObject({ status: 'fail', reason_code: 'AK_CERT_KEY_MISMATCH' });
  });
});
