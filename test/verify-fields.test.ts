/**
 * Everything parsed is shown (issue 13 item 7): the text and JSON reports list every field a
 * relying party appraises, pinned or not, each marked verified (covered by a checked signature
 * and a chain to a pinned root) or unverified. With an event log, a PCR the quote does not cover
 * is unverified however the log replays.
 */
import { readFileSync } from 'node:fs';
import {
  loadTrustStore,
  parseReferenceValues,
  renderJson,
  renderText,
  type TrustStore,
  verifyClaim,
  verifySnpEvidence,
  verifyTdxEvidence,
  verifyTpmEvidence,
} from '@cmcp/verify';
import { parseSnpReport, parseTdxQuote, TPM_ALG } from '@cmcp/verify/abi';
import { beforeAll, describe, expect, it } from 'vitest';
import type { EvidenceField, VerificationReport } from '../packages/verify/src/result.js';
import { type AkPki, certDer, claimWithAkChain, makeAkPki, pinnedAkRoot } from '../testing/ak-pki.js';
import { hasVectors, vectorPath } from './harness/vectors.js';

const repo = (): TrustStore =>
  loadTrustStore(new URL('../packages/verify/attestation/trust-store.yaml', import.meta.url).pathname);
const field = (r: VerificationReport, name: string) =>
  r.fields?.find((f) => f.name === name) as EvidenceField;
const EMPTY: TrustStore = { version: 1, roots: [] };

describe.skipIf(!hasVectors())('fields of TDX and SEV-SNP evidence', () => {
  it('TDX: MRTD, RTMR0–3, REPORTDATA, MRCONFIGID, TEE_TCB_SVN with their values, verified when anchored, unverified when not', () => {
    const bytes = readFileSync(vectorPath('tdx', 'go-tdx-guest-spr-e4', 'tdx_prod_quote_SPR_E4.dat'));
    const b = parseTdxQuote(bytes).body;
    const at = new Date('2023-07-01T01:00:00Z');
    const r = verifyTdxEvidence({ quote: bytes, trustStore: repo(), now: at });
    const want: [string, Buffer][] = [
      ['tdx.MRTD', b.mrTd],
      ['tdx.RTMR0', b.rtmr[0]],
      ['tdx.RTMR1', b.rtmr[1]],
      ['tdx.RTMR2', b.rtmr[2]],
      ['tdx.RTMR3', b.rtmr[3]],
      ['tdx.REPORTDATA', b.reportData],
      ['tdx.MRCONFIGID', b.mrConfigId],
      ['tdx.TEE_TCB_SVN', b.teeTcbSvn],
    ];
    for (const [name, value] of want)
      expect(field(r, name), name).toEqual({ name, value: value.toString('hex'), verified: true });
    const text = renderText(r);
    expect(text).toMatch(new RegExp(`VERIFIED\\s+tdx\\.MRTD\\s+${b.mrTd.toString('hex')}`));
    expect(JSON.parse(renderJson(r)).fields).toEqual(r.fields);
    const unanchored = verifyTdxEvidence({ quote: bytes, trustStore: EMPTY, now: at });
    expect(unanchored.fields?.every((f) => !f.verified)).toBe(true);
    expect(renderText(unanchored)).toMatch(/UNVERIFIED\s+tdx\.RTMR2/);
  });

  it('SEV-SNP: REPORT_DATA, MEASUREMENT, HOST_DATA, POLICY, TCB values, CHIP_ID — verified with the chain, unverified without', () => {
    const d = (f: string) => readFileSync(vectorPath('snp', 'go-sev-guest-milan', f));
    const rep = parseSnpReport(d('attestation.bin'));
    const run = (certs: Buffer[]) =>
      verifySnpEvidence({
        report: d('attestation.bin'),
        certs,
        trustStore: repo(),
        referenceValues: parseReferenceValues('version: 1\nsev_snp:\n  allow_debug: true\n'),
        now: new Date('2026-11-30T00:00:00Z'),
      });
    const r = run([d('vcek.testcer'), d('ask_ark_milan.pem')]);
    expect(r.verdict).toBe('hardware-attested');
    for (const [name, value] of [
      ['snp.REPORT_DATA', rep.reportData.toString('hex')],
      ['snp.MEASUREMENT', rep.measurement.toString('hex')],
      ['snp.HOST_DATA', rep.hostData.toString('hex')],
      ['snp.POLICY', `0x${rep.policy.toString(16).padStart(16, '0')}`],
      ['snp.REPORTED_TCB', rep.reportedTcb.toString('hex')],
      ['snp.CURRENT_TCB', rep.currentTcb.toString('hex')],
      ['snp.CHIP_ID', rep.chipId.toString('hex')],
    ] as const) {
      expect(field(r, name), name).toEqual({ name, value, verified: true });
    }
    // the VCEK alone does not chain: every field is unverified, still listed
    const alone = run([d('vcek.testcer')]);
    expect(alone.fields?.length).toBe(r.fields?.length);
    expect(alone.fields?.every((f) => !f.verified)).toBe(true);
  });
});

describe('fields of TPM evidence', () => {
  let pki: AkPki;
  beforeAll(async () => {
    pki = await makeAkPki();
  });
  const AT = new Date('2027-01-01T00:00:00Z');

  it('claim: extraData, pcrDigest, clock info, firmwareVersion and every PCR, verified under the pinned AK root', () => {
    const claim = claimWithAkChain(pki, [certDer(pki.leaf), certDer(pki.ca), certDer(pki.root)], [0, 7]);
    const r = verifyClaim(claim, { trustStore: pinnedAkRoot(pki.root), now: AT });
    expect(r.verdict).toBe('hardware-attested');
    const names = r.fields?.map((f) => f.name);
    expect(names).toEqual([
      'tpm.extraData',
      'tpm.pcrDigest',
      'tpm.clockInfo.clock',
      'tpm.clockInfo.resetCount',
      'tpm.clockInfo.restartCount',
      'tpm.clockInfo.safe',
      'tpm.firmwareVersion',
      'tpm.pcr.sha256.0',
      'tpm.pcr.sha256.7',
    ]);
    expect(r.fields?.every((f) => f.verified)).toBe(true);
    expect(field(r, 'tpm.pcr.sha256.7').value).toBe(
      claim.evidence.tpm?.pcr_values['7']
        ? Buffer.from(claim.evidence.tpm.pcr_values['7'], 'base64url').toString('hex')
        : '',
    );
    // without the pinned root nothing is verified
    expect(verifyClaim(claim, { now: AT }).fields?.every((f) => !f.verified)).toBe(true);
  });

  it.skipIf(!hasVectors())(
    'raw with an event log: quoted PCRs verified only when pcrDigest passes; PCRs only the log replays are unverified',
    () => {
      const claim = claimWithAkChain(pki, [], [0]);
      const tpm = claim.evidence.tpm as NonNullable<typeof claim.evidence.tpm>;
      const b = (s: string) => Buffer.from(s, 'base64url');
      const base = {
        attest: b(tpm.attest),
        signature: b(tpm.signature),
        ak: { public: b(tpm.ak_public) },
        akParentQualifiedName: b(tpm.ak_parent_qualified_name),
        akCertChain: [certDer(pki.leaf), certDer(pki.ca), certDer(pki.root)],
        trustStore: pinnedAkRoot(pki.root),
        now: AT,
        eventLog: readFileSync(vectorPath('tpm', 'eventlogs', 'ubuntu-2404-amd-sevsnp.bin')),
      };
      const pcr0 = { hashAlg: TPM_ALG.SHA256, index: 0, value: b(tpm.pcr_values['0'] ?? '') };
      const r = verifyTpmEvidence({ ...base, pcrValues: [pcr0] });
      expect(r.checks.find((c) => c.id === 'evidence.anchor')?.status).toBe('pass');
      expect(field(r, 'tpm.pcr.sha256.0').verified).toBe(true);
      const logOnly = (r.fields ?? []).filter((f) => f.name.startsWith('eventlog.pcr.'));
      expect(logOnly.length).toBeGreaterThan(10);
      expect(logOnly.every((f) => !f.verified)).toBe(true);
      expect(logOnly.some((f) => f.name === 'eventlog.pcr.sha256.7')).toBe(true);
      // a wrong PCR value: pcrDigest fails, the PCR is unverified, the signed fields stay verified
      const wrong = verifyTpmEvidence({ ...base, pcrValues: [{ ...pcr0, value: Buffer.alloc(32, 1) }] });
      expect(field(wrong, 'tpm.pcr.sha256.0').verified).toBe(false);
      expect(field(wrong, 'tpm.extraData').verified).toBe(true);
    },
  );
});
