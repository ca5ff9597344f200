/**
 * TPM AK certificate chains to pinned roots: the Azure vTPM AK certificate (CA-03 ← Root 2023),
 * the ms-tpm-20-ref synthetic chains, and claims whose `evidence.tpm.ak_cert_chain` makes the
 * verdict hardware-attested. Fixed clocks per test/vectors/README.md.
 */
import 'reflect-metadata';
import { createHash, createPublicKey, randomUUID } from 'node:crypto';
import { readFileSync } from 'node:fs';
import type { CheckResult, TrustStore, VerificationReport } from '@cmcp/verify';
import { loadTrustStore, verifyClaim, verifyTpmEvidence } from '@cmcp/verify';
import type { Claim, UnsignedClaim } from '@cmcp/verify/formats';
import { b64u } from '@cmcp/verify/formats';
import type * as px from '@peculiar/x509';
import { beforeAll, describe, expect, it } from 'vitest';
import { verifyAkCertChain } from '../packages/verify/src/akcert.js';
import { type Cert, certsFromBytes, validateChain } from '../packages/verify/src/x509.js';
import { type AkPki, bareSession, claimWithAkChain, makeAkPki } from '../testing/ak-pki.js';
import { signedClaim } from '../testing/evidence.js';
import { hasVectors, vectorPath } from './harness/vectors.js';

const get = (checks: readonly CheckResult[], id: string): CheckResult => {
  const c = checks.find((x) => x.id === id);
  if (!c) throw new Error(`no check ${id}`);
  return c;
};
const failed = (r: VerificationReport) =>
  r.checks.filter((c) => c.status === 'fail').map((c) => c.reason_code);
const repoTrust = (): TrustStore =>
  loadTrustStore(new URL('../attestation/trust-store.yaml', import.meta.url).pathname);
const AZ = 'azure-vtpm-2026-07-27';
const MS = 'ms-tpm-20-ref-v183';
const AZ_AT = new Date('2026-11-30T00:00:00Z');

describe.skipIf(!hasVectors())('tpm/azure-vtpm-2026-07-27 AK certificate', () => {
  const az = (f: string) => readFileSync(vectorPath('tpm', AZ, f));
  const chain = (): Cert[] => [
    ...certsFromBytes(az('akcert_0x01C101D0.der')),
    ...certsFromBytes(az('issuer-certs/global-virtual-tpm-ca-03.pem')),
    ...certsFromBytes(az('issuer-certs/azure-virtual-tpm-root-ca-2023.pem')),
  ];
  const akRoots = () => repoTrust().roots.filter((r) => r.purpose === 'cloud-vtpm');
  const validate = (certs: Cert[], at: Date) =>
    validateChain({ certs, roots: akRoots(), at, what: 'AK', usedFor: 'tpm-ak' });

  it('fingerprints: akcert 1434c62f…, CA-03 FD:7C:92…, Root 2023 E6:C5:96:B1…0E:95 (pinned in the trust store)', () => {
    const [leaf, ca03, root] = chain();
    expect(leaf?.sha256).toBe('1434c62f6bff108fbcde2af25bd1e9972f267fa37c8106285b4e136ab8f11962');
    expect(ca03?.sha256).toBe('fd7c92dabce4dcec9feaa30f8b087ada0598413189182152b881f5564064a29c');
    expect(root?.sha256).toBe('e6c596b17f8ffefba5c300f714cfb1260c6028704ecf7becc4ab5018efb00e95');
    expect(akRoots().map((r) => r.sha256)).toContain(root?.sha256);
    expect(leaf?.node.serialNumber.toLowerCase()).toBe('f5816db35723a70293afd45f22daec5f');
  });

  it('akcert ← CA-03 ← Root 2023 is valid at a fixed clock (2026-11-30), with the AK EKU and no CA flag', () => {
    const r = validate(chain(), AZ_AT);
    expect(r.status).toBe('anchored');
    if (r.status === 'anchored') {
      expect(r.anchor.sha256_fingerprint).toBe(
        'E6:C5:96:B1:7F:8F:FE:FB:A5:C3:00:F7:14:CF:B1:26:0C:60:28:70:4E:CF:7B:EC:C4:AB:50:18:EF:B0:0E:95',
      );
      expect(r.path).toHaveLength(3);
    }
    // the AK end-entity profile holds for the Azure leaf (EKU 2.23.133.8.3 present)
    const leaf = chain()[0];
    if (!leaf) throw new Error('leaf');
    const withKey = verifyAkCertChain({
      certs: chain(),
      akKey: leaf.node.publicKey,
      trustStore: repoTrust(),
      at: AZ_AT,
    });
    expect(withKey.check.status).toBe('pass');
    expect(withKey.anchor?.name).toBe('Azure Virtual TPM Root Certificate Authority 2023');
  });

  it('the chain stays valid until the leaf notAfter: 2027-04-20 OK, 2027-04-22 leaf expired, 2027-04-25 CA-03 expired too', () => {
    expect(validate(chain(), new Date('2027-04-20T00:00:00Z')).status).toBe('anchored');
    const late = validate(chain(), new Date('2027-04-22T00:00:00Z'));
    expect(late).toMatchObject({ status: 'invalid', code: 'CERT_NOT_VALID_AT_TIME' });
    expect(validate(chain(), new Date('2027-04-25T00:00:00Z')).status).toBe('invalid');
  });

  it('negative: build the akcert chain without CA-03 → cannot chain (no AIA)', () => {
    const [leaf, , root] = chain();
    if (!leaf || !root) throw new Error('certs');
    expect(validate([leaf, root], AZ_AT)).toMatchObject({ status: 'invalid', code: 'CHAIN_INCOMPLETE' });
  });

  it('negative: binding the quote to akcert_0x01C101D0.der must be refused (the certificate key is not ak.pub)', () => {
    const nonce = Buffer.from(az('nonce.hex').toString('utf8').trim(), 'hex');
    const r = verifyTpmEvidence({
      attest: az('quote.msg'),
      signature: az('quote.sig'),
      signatureFormat: 'raw-rsassa-sha256',
      ak: { key: createPublicKey(az('ak.pub')) },
      akCertChain: [
        az('akcert_0x01C101D0.der'),
        az('issuer-certs/global-virtual-tpm-ca-03.pem'),
        az('issuer-certs/azure-virtual-tpm-root-ca-2023.pem'),
      ],
      nonce,
      trustStore: repoTrust(),
      now: AZ_AT,
    });
    expect(get(r.checks, 'evidence.signature').status).toBe('pass');
    expect(get(r.checks, 'evidence.binding').status).toBe('pass');
    expect(get(r.checks, 'evidence.anchor').reason_code).toBe('AK_CERT_KEY_MISMATCH');
    expect(r.verdict).toBe('invalid');
    expect(r.anchors_used).toEqual([]);
  });

  it('the quote with ak.pub and no certificate: hardware-unanchored (signature, nonce and pcrDigest valid)', () => {
    const e = JSON.parse(az('expected.json').toString('utf8')) as {
      pcrs_bin: { sha256_bank: Record<string, string> };
    };
    const r = verifyTpmEvidence({
      attest: az('quote.msg'),
      signature: az('quote.sig'),
      signatureFormat: 'raw-rsassa-sha256',
      ak: { key: createPublicKey(az('ak.pub')) },
      nonce: Buffer.from(az('nonce.hex').toString('utf8').trim(), 'hex'),
      pcrValues: Object.entries(e.pcrs_bin.sha256_bank).map(([i, h]) => ({
        hashAlg: 0x000b,
        index: Number(i),
        value: Buffer.from(h, 'hex'),
      })),
      trustStore: repoTrust(),
      now: AZ_AT,
    });
    expect(failed(r)).toEqual([]);
    expect(r.verdict).toBe('hardware-unanchored');
    expect(get(r.checks, 'evidence.anchor').reason_code).toBe('AK_NOT_ENROLLED');
  });
});

describe.skipIf(!hasVectors())('tpm/ms-tpm-20-ref-v183 synthetic AK chains', () => {
  const AT = new Date('2030-01-01T00:00:00Z');
  const SCHEMES = ['rsassa-sha256', 'rsapss-sha256', 'rsassa-sha384', 'ecdsa-sha384'] as const;
  const ms = (f: string) => readFileSync(vectorPath('tpm', MS, f));
  const rootPin = (s: string): TrustStore => {
    const root = certsFromBytes(ms(`${s}-root.pem`))[0];
    if (!root) throw new Error('root');
    return {
      version: 1,
      roots: [
        {
          name: `h3-synthetic-ak-root (${s})`,
          purpose: 'tpm-ak-root',
          sha256: root.sha256,
          source: 'test vector',
        },
      ],
    };
  };
  const nonce = () => Buffer.from(ms('nonce.hex').toString('utf8').trim(), 'hex');
  const expected = JSON.parse(readFileSync(vectorPath('tpm', MS, 'expected.json'), 'utf8')) as {
    schemes: Record<string, { root: { sha256: string }; ak: { leaf_sha256: string } }>;
  };

  for (const s of SCHEMES) {
    it(`${s}: the leaf chains to its own root (pinned); quote + chain → hardware-attested`, () => {
      const certs = certsFromBytes(ms(`${s}-ak-chain.pem`));
      expect(certs[0]?.sha256).toBe(expected.schemes[s]?.ak.leaf_sha256);
      expect(certs[1]?.sha256).toBe(expected.schemes[s]?.root.sha256);
      const leaf = certs[0];
      if (!leaf) throw new Error('leaf');
      const r = verifyTpmEvidence({
        attest: ms(`${s}-attest.bin`),
        signature: ms(`${s}-tpmt-signature.bin`),
        ak: { key: leaf.node.publicKey },
        akCertChain: [ms(`${s}-ak-chain.pem`)],
        nonce: nonce(),
        trustStore: rootPin(s),
        now: AT,
      });
      expect(failed(r)).toEqual([]);
      expect(r.verdict).toBe('hardware-attested');
      expect(r.anchors_used).toEqual([
        {
          name: `h3-synthetic-ak-root (${s})`,
          sha256_fingerprint: expected.schemes[s]?.root.sha256.toUpperCase().match(/.{2}/g)?.join(':'),
          used_for: 'tpm-ak',
        },
      ]);
    });

    it(`${s}: negative: the leaf checked against another scheme's root → chain invalid`, () => {
      const other = s === 'rsapss-sha256' ? 'rsassa-sha256' : 'rsapss-sha256';
      const leaf = certsFromBytes(ms(`${s}-ak-chain.pem`))[0];
      const otherRoot = certsFromBytes(ms(`${other}-root.pem`))[0];
      if (!leaf || !otherRoot) throw new Error('certs');
      const r = validateChain({
        certs: [leaf, otherRoot],
        roots: rootPin(other).roots,
        at: AT,
        what: 'AK',
        usedFor: 'tpm-ak',
      });
      expect(r.status).toBe('invalid');
      const r2 = verifyAkCertChain({
        certs: [leaf, otherRoot],
        akKey: leaf.node.publicKey,
        trustStore: rootPin(other),
        at: AT,
      });
      expect(r2.check.status).toBe('fail');
    });
  }

  it('the synthetic chains are valid until 2035-12-30 (fixed clock), not after', () => {
    const certs = certsFromBytes(ms('rsassa-sha256-ak-chain.pem'));
    const leaf = certs[0];
    if (!leaf) throw new Error('leaf');
    const at = (d: string) =>
      verifyAkCertChain({
        certs,
        akKey: leaf.node.publicKey,
        trustStore: rootPin('rsassa-sha256'),
        at: new Date(d),
      }).check;
    expect(at('2035-12-29T00:00:00Z').status).toBe('pass');
    expect(at('2035-12-31T00:00:00Z').reason_code).toBe('CERT_NOT_VALID_AT_TIME');
  });

  it('without the root pinned, a valid chain is not an anchor (ROOT_NOT_PINNED → hardware-unanchored)', () => {
    const leaf = certsFromBytes(ms('ecdsa-sha384-ak-chain.pem'))[0];
    if (!leaf) throw new Error('leaf');
    const r = verifyTpmEvidence({
      attest: ms('ecdsa-sha384-attest.bin'),
      signature: ms('ecdsa-sha384-tpmt-signature.bin'),
      ak: { key: leaf.node.publicKey },
      akCertChain: [ms('ecdsa-sha384-ak-chain.pem')],
      nonce: nonce(),
      trustStore: repoTrust(),
      now: AT,
    });
    expect(get(r.checks, 'evidence.anchor')).toMatchObject({
      status: 'absent',
      reason_code: 'ROOT_NOT_PINNED',
    });
    expect(r.verdict).toBe('hardware-unanchored');
  });
});

// ---------- claims carrying an AK certificate chain ----------

describe('claims with evidence.tpm.ak_cert_chain', () => {
  let pki: AkPki;
  let pinned: TrustStore;
  const der = (c: px.X509Certificate) => Buffer.from(c.rawData);
  const AT = new Date('2026-11-30T00:00:00Z');
  beforeAll(async () => {
    pki = await makeAkPki();
    pinned = {
      version: 1,
      roots: [
        {
          name: 'test AK root',
          purpose: 'tpm-ak-root',
          sha256: createHash('sha256').update(der(pki.root)).digest('hex'),
          source: 'generated by the test',
        },
      ],
    };
  });

  it('a chain to a pinned root makes evidence.anchor pass and the verdict hardware-attested, naming the root by SHA-256', () => {
    const claim = claimWithAkChain(pki, [der(pki.leaf), der(pki.ca), der(pki.root)]);
    const r = verifyClaim(claim, { trustStore: pinned, now: AT });
    expect(failed(r)).toEqual([]);
    expect(get(r.checks, 'evidence.anchor').status).toBe('pass');
    expect(r.verdict).toBe('hardware-attested');
    expect(r.anchors_used).toHaveLength(1);
    expect(r.anchors_used[0]?.sha256_fingerprint.replace(/:/g, '').toLowerCase()).toBe(
      pinned.roots[0]?.sha256,
    );
  });

  it('intermediates may come in any order after the leaf', () => {
    const claim = claimWithAkChain(pki, [der(pki.leaf), der(pki.root), der(pki.ca)]);
    expect(verifyClaim(claim, { trustStore: pinned, now: AT }).verdict).toBe('hardware-attested');
  });

  it('the same chain without a trust store (or with the repo store) → ROOT_NOT_PINNED, hardware-unanchored', () => {
    const claim = claimWithAkChain(pki, [der(pki.leaf), der(pki.ca), der(pki.root)]);
    const r = verifyClaim(claim, { now: AT });
    expect(get(r.checks, 'evidence.anchor')).toMatchObject({
      status: 'absent',
      reason_code: 'ROOT_NOT_PINNED',
    });
    expect(r.verdict).toBe('hardware-unanchored');
    expect(r.notes.join(' ')).toMatch(/NOT anchored to a pinned root/);
  });

  it('missing intermediate → CHAIN_INCOMPLETE (invalid)', () => {
    const r = verifyClaim(claimWithAkChain(pki, [der(pki.leaf), der(pki.root)]), {
      trustStore: pinned,
      now: AT,
    });
    expect(get(r.checks, 'evidence.anchor').reason_code).toBe('CHAIN_INCOMPLETE');
    expect(r.verdict).toBe('invalid');
  });

  it('verification after the leaf expired → CERT_NOT_VALID_AT_TIME', () => {
    const r = verifyClaim(claimWithAkChain(pki, [der(pki.leaf), der(pki.ca), der(pki.root)]), {
      trustStore: pinned,
      now: new Date('2037-01-01T00:00:00Z'),
    });
    expect(get(r.checks, 'evidence.anchor').reason_code).toBe('CERT_NOT_VALID_AT_TIME');
  });

  it('end-entity rules: a leaf that is a CA, or whose EKU lacks tcg-kp-AIKCertificate → END_ENTITY_INVALID', async () => {
    for (const o of [{ leafIsCa: true }, { eku: ['1.3.6.1.5.5.7.3.2'] }]) {
      const bad = await makeAkPki(o);
      const store: TrustStore = {
        version: 1,
        roots: [
          {
            name: 'r',
            purpose: 'tpm-ak-root',
            sha256: createHash('sha256').update(der(bad.root)).digest('hex'),
            source: 'test',
          },
        ],
      };
      const r = verifyClaim(claimWithAkChain(bad, [der(bad.leaf), der(bad.ca), der(bad.root)]), {
        trustStore: store,
        now: AT,
      });
      expect(get(r.checks, 'evidence.anchor').reason_code, JSON.stringify(o)).toBe('END_ENTITY_INVALID');
    }
  });

  it('a leaf certifying another key → AK_CERT_KEY_MISMATCH, even when the chain is pinned', async () => {
    const other = await makeAkPki();
    const claim = claimWithAkChain(pki, [der(other.leaf), der(other.ca), der(other.root)]);
    const store: TrustStore = {
      version: 1,
      roots: [
        {
          name: 'o',
          purpose: 'tpm-ak-root',
          sha256: createHash('sha256').update(der(other.root)).digest('hex'),
          source: 't',
        },
      ],
    };
    expect(
      get(verifyClaim(claim, { trustStore: store, now: AT }).checks, 'evidence.anchor').reason_code,
    ).toBe('AK_CERT_KEY_MISMATCH');
  });

  it('a root pinned for another purpose (e.g. the Intel SGX root slot) does not anchor an AK', () => {
    const store: TrustStore = {
      version: 1,
      roots: [{ ...(pinned.roots[0] as TrustStore['roots'][number]), purpose: 'intel-sgx-root' }],
    };
    const r = verifyClaim(claimWithAkChain(pki, [der(pki.leaf), der(pki.ca), der(pki.root)]), {
      trustStore: store,
      now: AT,
    });
    expect(get(r.checks, 'evidence.anchor')).toMatchObject({
      status: 'absent',
      reason_code: 'ANCHOR_PURPOSE_MISMATCH',
    });
  });

  it('speed: a claim with a TPM quote and its chain verifies in well under 10 ms', () => {
    // CPU time of this process, not wall-clock: other test workers share the 2 cores.
    const claim = claimWithAkChain(pki, [der(pki.leaf), der(pki.ca), der(pki.root)]);
    expect(verifyClaim(claim, { trustStore: pinned, now: AT }).verdict).toBe('hardware-attested'); // warm
    const n = 50;
    const c0 = process.cpuUsage();
    for (let i = 0; i < n; i++) verifyClaim(claim, { trustStore: pinned, now: AT });
    const c = process.cpuUsage(c0);
    const ms = (c.user + c.system) / 1000 / n;
    expect(ms).toBeLessThan(5);
  });
});

// ---------- claims carrying SEV-SNP / TDX evidence ----------

function teeClaim(provider: 'sev-snp' | 'tdx', evidence: Record<string, unknown>): Claim {
  const sessionId = randomUUID();
  const root = createHash('sha256').update('tee-root').digest('hex');
  const session = bareSession(sessionId, root);
  return signedClaim(session, {
    audit_chain: { chain_id: sessionId, root, tip: root, length: 1 },
    evidence: {
      provider,
      status: 'bound',
      reason: null,
      report_data: b64u(session.reportData),
      tpm: null,
      ...evidence,
    } as UnsignedClaim['evidence'],
  });
}

describe.skipIf(!hasVectors())('claims with evidence.sev_snp / evidence.tdx', () => {
  it('SEV-SNP: the real report verifies (signature, ARK-Milan anchor) but carries another REPORT_DATA → EVIDENCE_BINDING_MISMATCH', () => {
    const snp = (f: string) => readFileSync(vectorPath('snp', 'go-sev-guest-milan', f));
    const certs = [snp('vcek.testcer'), ...certsFromBytes(snp('ask_ark_milan.pem')).map((c) => c.der)];
    const claim = teeClaim('sev-snp', {
      sev_snp: {
        report: b64u(snp('attestation.bin')),
        certs: certs.map((der, i) => ({
          guid: String(i),
          kind: ['vcek', 'ask', 'ark'][i] ?? 'other',
          der: b64u(der),
        })),
        source: 'configfs-tsm',
      },
    });
    const r = verifyClaim(claim, { trustStore: repoTrust(), now: AZ_AT });
    expect(get(r.checks, 'evidence.signature').status).toBe('pass');
    expect(get(r.checks, 'evidence.anchor').status).toBe('pass');
    expect(get(r.checks, 'evidence.binding').reason_code).toBe('EVIDENCE_BINDING_MISMATCH');
    expect(r.verdict).toBe('invalid');
    expect(r.anchors_used[0]?.name).toBe('AMD ARK-Milan');
  });

  it('TDX: the real quote verifies (signature, PCK → Intel root) but carries another REPORTDATA → EVIDENCE_BINDING_MISMATCH', () => {
    const quote = readFileSync(vectorPath('tdx', 'go-tdx-guest-spr-e4', 'tdx_prod_quote_SPR_E4.dat'));
    const claim = teeClaim('tdx', { tdx: { quote: b64u(quote), source: 'configfs-tsm' } });
    const r = verifyClaim(claim, { trustStore: repoTrust(), now: new Date('2023-07-01T01:00:00Z') });
    expect(get(r.checks, 'evidence.signature').status).toBe('pass');
    expect(get(r.checks, 'evidence.anchor').status).toBe('pass');
    expect(get(r.checks, 'evidence.binding').reason_code).toBe('EVIDENCE_BINDING_MISMATCH');
    expect(get(r.checks, 'tdx.tcb_status').reason_code).toBe('COLLATERAL_NOT_SUPPLIED');
    expect(r.verdict).toBe('invalid');
  });
});
