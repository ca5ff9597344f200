/**
 * VLEK certificates must carry the CSP-ID extension (issue 13 item 9): a VLEK-signed report
 * (testing/snp-vlek.ts: the real Milan report re-signed under a test ARK ← ASVK ← VLEK) verifies
 * with a CSP-ID and is refused without one.
 */
import { readFileSync } from 'node:fs';
import type { CheckResult } from '@cmcp/verify';
import { parseReferenceValues, parseTrustStore, verifySnpEvidence } from '@cmcp/verify';
import { describe, expect, it } from 'vitest';
import { parseCert } from '../packages/verify/src/x509.js';
import { vlekEvidence } from '../testing/snp-vlek.js';
import { hasVectors, vectorPath } from './harness/vectors.js';

const get = (checks: readonly CheckResult[], id: string) => checks.find((c) => c.id === id) as CheckResult;
const milan = () => readFileSync(vectorPath('snp', 'go-sev-guest-milan', 'attestation.bin'));

describe.skipIf(!hasVectors())('SEV-SNP VLEK and its CSP-ID', () => {
  const verify = (e: Awaited<ReturnType<typeof vlekEvidence>>) =>
    verifySnpEvidence({
      report: e.report,
      certs: [e.vlek, e.asvk, e.ark],
      product: 'Milan',
      trustStore: parseTrustStore(
        `version: 1\nroots:\n  - {name: test ARK-Milan, purpose: amd-ark, product: Milan, sha256: "${parseCert(e.ark).sha256}", source: test}\n`,
      ),
      referenceValues: parseReferenceValues('version: 1\nsev_snp:\n  allow_debug: true\n'),
      now: new Date('2026-11-30T00:00:00Z'),
    });

  it('a VLEK with a CSP-ID: signature, chain ARK ← ASVK ← VLEK and signer verify; the CSP-ID is reported', async () => {
    const r = verify(await vlekEvidence(milan(), { cspId: 'cmcp-test-csp' }));
    expect(r.checks.filter((c) => c.status === 'fail')).toEqual([]);
    expect(get(r.checks, 'snp.signing_key').status).toBe('pass');
    expect(get(r.checks, 'snp.signer').detail).toMatch(
      /SEV-VLEK issued by SEV-VLEK-Milan.*CSP-ID "cmcp-test-csp"/,
    );
    expect(get(r.checks, 'snp.hwid').status).toBe('not-applicable');
    expect(r.verdict).toBe('hardware-attested');
    expect(r.anchors_used[0]?.used_for).toBe('sev-snp-vlek');
  });

  it('a VLEK without the CSP-ID extension (or with an empty one) → the chain is refused: END_ENTITY_INVALID, invalid', async () => {
    for (const cspId of [null, '']) {
      const r = verify(await vlekEvidence(milan(), { cspId }));
      expect(get(r.checks, 'evidence.anchor')).toMatchObject({
        status: 'fail',
        reason_code: 'END_ENTITY_INVALID',
      });
      expect(get(r.checks, 'evidence.anchor').detail).toMatch(
        /CSP-ID extension \(1\.3\.6\.1\.4\.1\.3704\.1\.5\)/,
      );
      expect(get(r.checks, 'evidence.signature').status).toBe('pass');
      expect(r.verdict).toBe('invalid');
    }
  });

  it('the same re-signed report with a flipped signed byte, or claimed as VCEK, is refused', async () => {
    const e = await vlekEvidence(milan(), { cspId: 'x' });
    const flipped = Buffer.from(e.report);
    flipped[0x90] = (flipped[0x90] ?? 0) ^ 1;
    expect(get(verify({ ...e, report: flipped }).checks, 'evidence.signature').reason_code).toBe(
      'SNP_SIGNATURE_INVALID',
    );
    const asVcek = Buffer.from(e.report);
    asVcek.writeUInt32LE(asVcek.readUInt32LE(0x48) & ~(7 << 2), 0x48);
    expect(verify({ ...e, report: asVcek }).verdict).toBe('invalid');
  });
});
