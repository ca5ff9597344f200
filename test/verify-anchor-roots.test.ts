/**
 * Anchors are roots (issue 13 item 6): a trust-store certificate anchors a chain only when it is
 * self-signed, unless its entry says `anchor: intermediate` (then the report carries a warning).
 * The pinned roots shipped in attestation/ are checked to be self-signed certificates that still
 * anchor the real vectors.
 */
import 'reflect-metadata';
import { readFileSync } from 'node:fs';
import type { CheckResult } from '@cmcp/verify';
import {
  loadTrustStore,
  parseTrustStore,
  renderText,
  type TrustStore,
  verifyClaim,
  verifySnpEvidence,
  verifyTdxEvidence,
} from '@cmcp/verify';
import { parseTdxQuote } from '@cmcp/verify/abi';
import { beforeAll, describe, expect, it } from 'vitest';
import { type Cert, certsFromBytes, issuedBy, parseCert, pemBlocks } from '../packages/verify/src/x509.js';
import { type AkPki, claimWithAkChain, makeAkPki } from '../testing/ak-pki.js';
import { hasVectors, vectorPath } from './harness/vectors.js';

const AT = new Date('2027-01-01T00:00:00Z');
const get = (checks: readonly CheckResult[], id: string): CheckResult => {
  const c = checks.find((x) => x.id === id);
  if (!c) throw new Error(`no check ${id}`);
  return c;
};
const der = (c: { rawData: ArrayBuffer }) => Buffer.from(c.rawData);
const store = (sha256: string, extra = ''): TrustStore =>
  parseTrustStore(
    `version: 1\nroots:\n  - name: pinned CA\n    purpose: tpm-ak-root\n    sha256: "${sha256}"\n    source: test\n${extra}`,
  );
const repoTrust = (): TrustStore =>
  loadTrustStore(new URL('../packages/verify/attestation/trust-store.yaml', import.meta.url).pathname);

describe('a pinned certificate anchors only as a root', () => {
  let pki: AkPki;
  beforeAll(async () => {
    pki = await makeAkPki();
  });
  const caSha = () => parseCert(der(pki.ca)).sha256;
  const rootSha = () => parseCert(der(pki.root)).sha256;

  it('pinning the intermediate (no anchor field) → ANCHOR_NOT_ROOT, absent, hardware-unanchored — with or without the root in the chain', () => {
    for (const chain of [
      [der(pki.leaf), der(pki.ca)],
      [der(pki.leaf), der(pki.ca), der(pki.root)],
    ]) {
      const r = verifyClaim(claimWithAkChain(pki, chain), { trustStore: store(caSha()), now: AT });
      expect(get(r.checks, 'evidence.anchor')).toMatchObject({
        status: 'absent',
        reason_code: 'ANCHOR_NOT_ROOT',
      });
      expect(get(r.checks, 'evidence.anchor').detail).toMatch(/not self-signed.*anchor: intermediate/);
      expect(r.verdict).toBe('hardware-unanchored');
      expect(r.anchors_used).toEqual([]);
    }
  });

  it('`anchor: root` on an intermediate changes nothing; the real root pinned beside it still anchors', () => {
    const r = verifyClaim(claimWithAkChain(pki, [der(pki.leaf), der(pki.ca)]), {
      trustStore: store(caSha(), '    anchor: root\n'),
      now: AT,
    });
    expect(get(r.checks, 'evidence.anchor').reason_code).toBe('ANCHOR_NOT_ROOT');
    const both = parseTrustStore(
      `version: 1\nroots:\n  - {name: pinned CA, purpose: tpm-ak-root, sha256: "${caSha()}", source: t}\n  - {name: pinned root, purpose: tpm-ak-root, sha256: "${rootSha()}", source: t}\n`,
    );
    const ok = verifyClaim(claimWithAkChain(pki, [der(pki.leaf), der(pki.ca), der(pki.root)]), {
      trustStore: both,
      now: AT,
    });
    expect(ok.verdict).toBe('hardware-attested');
    expect(ok.anchors_used.map((a) => a.name)).toEqual(['pinned root']);
    expect(ok.anchors_used[0]?.intermediate).toBeUndefined();
  });

  it('`anchor: intermediate` anchors at the intermediate, with a warning in the anchor, the notes and the text report', () => {
    const r = verifyClaim(claimWithAkChain(pki, [der(pki.leaf), der(pki.ca)]), {
      trustStore: store(caSha(), '    anchor: intermediate\n'),
      now: AT,
    });
    expect(get(r.checks, 'evidence.anchor').status).toBe('pass');
    expect(get(r.checks, 'evidence.anchor').detail).toMatch(/INTERMEDIATE pinned as "pinned CA"/);
    expect(r.verdict).toBe('hardware-attested');
    expect(r.anchors_used[0]).toMatchObject({ name: 'pinned CA', intermediate: true, used_for: 'tpm-ak' });
    expect(r.notes.join('\n')).toMatch(/WARNING: "pinned CA" anchors tpm-ak as an intermediate CA/);
    expect(renderText(r)).toMatch(/WARNING: this anchor is an intermediate CA/);
  });

  it('the trust store refuses other anchor values', () => {
    expect(() => store(caSha(), '    anchor: leaf\n')).toThrow(/anchor/);
  });
});

describe.skipIf(!hasVectors())(
  'the pinned roots in attestation/ are self-signed and still anchor the vectors',
  () => {
    const byPin = (certs: Cert[]) => {
      const pins = new Map(repoTrust().roots.map((r) => [r.sha256, r]));
      return certs.filter((c) => pins.has(c.sha256));
    };

    it('every pinned certificate found in the vectors (AMD ARK-Milan, Intel SGX Root CA, Azure vTPM root) is self-signed', () => {
      const found = byPin([
        ...certsFromBytes(readFileSync(vectorPath('snp', 'go-sev-guest-milan', 'ask_ark_milan.pem'))),
        ...pemBlocks(
          parseTdxQuote(readFileSync(vectorPath('tdx', 'go-tdx-guest-spr-e4', 'tdx_prod_quote_SPR_E4.dat')))
            .pckChainPem,
        ).map(parseCert),
        ...certsFromBytes(
          readFileSync(
            vectorPath('tpm', 'azure-vtpm-2026-07-27', 'issuer-certs', 'azure-virtual-tpm-root-ca-2023.pem'),
          ),
        ),
      ]);
      expect(found).toHaveLength(3);
      for (const c of found) expect(issuedBy(c, c), c.subject).toBe(true);
    });

    it('SEV-SNP Milan and TDX SPR E4 are still hardware-attested under the repository trust store', () => {
      const snp = verifySnpEvidence({
        report: readFileSync(vectorPath('snp', 'go-sev-guest-milan', 'attestation.bin')),
        certs: [
          readFileSync(vectorPath('snp', 'go-sev-guest-milan', 'vcek.testcer')),
          readFileSync(vectorPath('snp', 'go-sev-guest-milan', 'ask_ark_milan.pem')),
        ],
        trustStore: repoTrust(),
        now: new Date('2026-11-30T00:00:00Z'),
      });
      expect(get(snp.checks, 'evidence.anchor').status).toBe('pass');
      const tdx = verifyTdxEvidence({
        quote: readFileSync(vectorPath('tdx', 'go-tdx-guest-spr-e4', 'tdx_prod_quote_SPR_E4.dat')),
        trustStore: repoTrust(),
        now: new Date('2023-07-01T01:00:00Z'),
      });
      expect(tdx.verdict).toBe('hardware-attested');
      expect(tdx.anchors_used.every((a) => !a.intermediate)).toBe(true);
    });
  },
);
