/**
 * A TDX quote verified without collateral still has its Quoting Enclave checked (issue 13 item 9):
 * the QE report's MRSIGNER and ISVPRODID against the trust store's `intel_qe_identity`; the
 * report says the TCB status was not appraised.
 */
import { readFileSync } from 'node:fs';
import type { CheckResult } from '@cmcp/verify';
import { loadTrustStore, parseTrustStore, type TrustStore, verifyTdxEvidence } from '@cmcp/verify';
import { describe, expect, it } from 'vitest';
import { hasVectors, vectorPath } from './harness/vectors.js';

const AT = new Date('2023-07-01T01:00:00Z');
const quote = () => readFileSync(vectorPath('tdx', 'go-tdx-guest-spr-e4', 'tdx_prod_quote_SPR_E4.dat'));
const repo = (): TrustStore =>
  loadTrustStore(new URL('../packages/verify/attestation/trust-store.yaml', import.meta.url).pathname);
const get = (checks: readonly CheckResult[], id: string) => checks.find((c) => c.id === id) as CheckResult;
const run = (trustStore: TrustStore, q = quote()) => verifyTdxEvidence({ quote: q, trustStore, now: AT });
const withPin = (mrsigner: string, isvprodid: number): TrustStore => ({
  ...repo(),
  intel_qe_identity: { mrsigner, isvprodid, source: 'test' },
});
const INTEL = 'dc9e2a7c6f948f17474e34a7fc43ed030f7c1563f1babddf6340c82e0e54a8c5';

describe.skipIf(!hasVectors())('TDX without collateral: the QE identity pinned in the trust store', () => {
  it('the repository trust store pins Intel TD_QE (MRSIGNER dc9e2a7c…, ISVPRODID 2) and the real quote matches it', () => {
    expect(repo().intel_qe_identity).toMatchObject({ mrsigner: INTEL, isvprodid: 2 });
    const r = run(repo());
    expect(get(r.checks, 'tdx.qe_identity')).toMatchObject({ status: 'pass', reason_code: 'OK' });
    expect(r.verdict).toBe('hardware-attested');
    expect(r.notes.join('\n')).toMatch(/TCB status not appraised/);
  });

  it('another MRSIGNER or ISVPRODID in the pin → COLLATERAL_MISMATCH, invalid', () => {
    for (const store of [withPin(`00${INTEL.slice(2)}`, 2), withPin(INTEL, 1)]) {
      const r = run(store);
      expect(get(r.checks, 'tdx.qe_identity')).toMatchObject({
        status: 'fail',
        reason_code: 'COLLATERAL_MISMATCH',
      });
      expect(r.verdict).toBe('invalid');
    }
  });

  it('a store without intel_qe_identity leaves the check absent and says so', () => {
    const { intel_qe_identity: _, ...bare } = repo();
    const r = run(bare);
    expect(get(r.checks, 'tdx.qe_identity')).toMatchObject({
      status: 'absent',
      reason_code: 'COLLATERAL_NOT_SUPPLIED',
    });
    expect(get(r.checks, 'tdx.qe_identity').detail).toMatch(/pins no intel_qe_identity/);
  });

  it('the trust store validates intel_qe_identity (32 bytes of hex, ISVPRODID 0–65535, a source)', () => {
    const head = 'version: 1\nroots: []\nintel_qe_identity:\n';
    expect(
      parseTrustStore(`${head}  mrsigner: ${INTEL.toUpperCase()}\n  isvprodid: 2\n  source: s\n`)
        .intel_qe_identity?.mrsigner,
    ).toBe(INTEL);
    for (const bad of [
      `  mrsigner: abcd\n  isvprodid: 2\n  source: s\n`,
      `  mrsigner: ${INTEL}\n  isvprodid: -1\n  source: s\n`,
      `  mrsigner: ${INTEL}\n  isvprodid: 2\n`,
    ]) {
      expect(() => parseTrustStore(head + bad)).toThrow(/trust store/);
    }
  });

  it('a flipped MRSIGNER byte in the QE report breaks the QE report signature (the pin is not the only guard)', () => {
    const b = Buffer.from(quote());
    // QE report at 770 in this v4 quote (header 48 + body 584 + 4 + 64 + 64 + 6); MRSIGNER at +128
    b[770 + 128] = (b[770 + 128] ?? 0) ^ 1;
    const r = run(repo(), b);
    expect(get(r.checks, 'tdx.qe_report_signature').reason_code).toBe('TDX_QE_REPORT_SIGNATURE_INVALID');
    expect(get(r.checks, 'tdx.qe_identity').reason_code).toBe('COLLATERAL_MISMATCH');
  });
});
