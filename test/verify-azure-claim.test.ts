/**
 * Azure CVM claims (`evidence.provider` azure-cvm: `evidence.tpm` + `evidence.azure_hcl`,
 * docs/spec/evidence-azure.md) verified by the library, built here with a software ECC AK as
 * HCLAkPub (the EC JWK path) and an SEV-SNP report under a test VCEK chain: a good claim is
 * hardware-attested; the AK public area of another key, a quote of another REPORT_DATA, a
 * missing `azure_hcl` and a raw `--ak` of another key are refused, each with its own code.
 */
import { createHash, createPublicKey, randomUUID } from 'node:crypto';
import type { VerificationReport } from '@cmcp/verify';
import { parseReferenceValues, parseTrustStore, verifyAzureCvmEvidence, verifyClaim } from '@cmcp/verify';
import type { Claim } from '@cmcp/verify/formats';
import { b64u, tpmQualifyingData } from '@cmcp/verify/formats';
import { beforeAll, describe, expect, it } from 'vitest';
import {
  hclReport,
  hclReportData,
  runtimeDataJson,
  type SnpTestChain,
  snpReport,
  snpTestChain,
} from '../testing/azure-cvm.js';
import {
  bindSession,
  bundleOf,
  makeChain,
  type SoftTpm,
  signedClaim,
  softQuote,
  softTpm,
  tpmEvidence,
} from '../testing/evidence.js';

const PCRS = [0, 7];
const pcrValue = (i: number) => createHash('sha256').update(`pcr-${i}`).digest();
const pcrDigest = createHash('sha256')
  .update(Buffer.concat(PCRS.map(pcrValue)))
  .digest();
const fails = (r: VerificationReport) =>
  r.checks.filter((c) => c.status === 'fail').map((c) => `${c.id}:${c.reason_code}`);

let snp: SnpTestChain;
beforeAll(async () => {
  snp = await snpTestChain();
});

/** A signed azure-cvm claim whose quote is by `quoting` and whose HCL report names `hclAk`. */
function build(o: {
  hclAk: SoftTpm;
  quoting?: SoftTpm;
  presented?: SoftTpm;
  extraData?: Buffer;
  noHcl?: boolean;
}) {
  const sessionId = randomUUID();
  const { entries } = makeChain(sessionId, 3);
  const root = entries[0]?.entry_hash ?? '';
  const s = bindSession({
    sessionId,
    chainRoot: root,
    gatewayMeasurement: null,
    policyBundleHash: null,
    catalogHash: null,
    challenge: null,
  });
  const rt = runtimeDataJson(createPublicKey(o.hclAk.priv));
  const hcl = hclReport({ kind: 'sev-snp', hwReport: snpReport(snp, hclReportData(rt)), runtimeData: rt });
  const quoting = o.quoting ?? o.hclAk;
  const q = softQuote(quoting, {
    extraData: o.extraData ?? tpmQualifyingData(s.reportData),
    pcrs: PCRS,
    pcrDigest,
  });
  const ev = tpmEvidence({
    reportData: s.reportData,
    attest: q.attest,
    signature: q.signature,
    akPublic: (o.presented ?? quoting).akPublic,
    pcrs: PCRS,
    pcrValue,
  });
  const evidence: Claim['evidence'] = {
    ...ev,
    provider: 'azure-cvm',
    ...(o.noHcl
      ? {}
      : {
          azure_hcl: {
            report: b64u(hcl),
            certs: [
              { kind: 'vcek' as const, der: b64u(snp.vcek) },
              { kind: 'ask' as const, der: b64u(snp.ask) },
              { kind: 'ark' as const, der: b64u(snp.ark) },
            ],
            source: 'vtpm-nv' as const,
          },
        }),
  };
  const claim = signedClaim(s, {
    audit_chain: {
      chain_id: sessionId,
      root,
      tip: entries[entries.length - 1]?.entry_hash ?? '',
      length: entries.length,
    },
    evidence,
  });
  return { claim, bundle: bundleOf(sessionId, entries), hcl, q };
}

const opts = () => ({
  trustStore: parseTrustStore(snp.trustStoreYaml),
  now: new Date('2026-12-01T12:00:00Z'),
});

describe('azure-cvm claims', () => {
  it('a claim bound through HCLAkPub (EC) under a pinned VCEK chain is hardware-attested', () => {
    const ak = softTpm();
    const { claim, bundle } = build({ hclAk: ak });
    const r = verifyClaim(claim, { bundle, ...opts() });
    expect(fails(r)).toEqual([]);
    expect(r.verdict).toBe('hardware-attested');
    const ids = new Map(r.checks.map((c) => [c.id, c.status]));
    for (const id of [
      'azure.report_data',
      'evidence.signature',
      'evidence.anchor',
      'azure.quote_signature',
      'evidence.binding',
      'azure.ak_match',
      'tpm.qualified_signer',
      'tpm.pcr_digest',
    ])
      expect(ids.get(id), id).toBe('pass');
  });

  it('each broken link of a claim is refused with its own code', () => {
    const ak = softTpm();
    const other = softTpm();
    const cases: [string, Parameters<typeof build>[0], string][] = [
      [
        'the quote and its AK are another key (HCLAkPub names ak)',
        { hclAk: ak, quoting: other },
        'azure.ak_match:HCL_AK_MISMATCH',
      ],
      [
        'the AK presented is another key than the one that quoted',
        { hclAk: ak, presented: other },
        'azure.quote_signature:QUOTE_SIGNATURE_INVALID',
      ],
      [
        'the quote carries another REPORT_DATA',
        { hclAk: ak, extraData: Buffer.alloc(32, 9) },
        'evidence.binding:QUOTE_NONCE_MISMATCH',
      ],
    ];
    for (const [what, o, want] of cases) {
      const { claim, bundle } = build(o);
      const r = verifyClaim(claim, { bundle, ...opts() });
      expect(r.verdict, what).toBe('invalid');
      expect(fails(r), what).toContain(want);
    }
    // reference values pinning a PCR apply to the vTPM quote
    const good = build({ hclAk: ak });
    const rv = parseReferenceValues(`version: 1\ntpm:\n  pcrs:\n    "7": ["${'00'.repeat(32)}"]\n`);
    expect(fails(verifyClaim(good.claim, { bundle: good.bundle, ...opts(), referenceValues: rv }))).toEqual([
      'tpm.pcr_values:MEASUREMENT_NOT_ALLOWED',
    ]);
    const { claim } = build({ hclAk: ak, noHcl: true });
    expect(fails(verifyClaim(claim, opts()))).toContain('evidence.status:EVIDENCE_INCOMPLETE');
  });

  it('raw evidence with --ak: the TPMT_PUBLIC must be HCLAkPub', () => {
    const ak = softTpm();
    const other = softTpm();
    const { hcl, q } = build({ hclAk: ak, extraData: Buffer.alloc(32, 5) });
    const raw = {
      hclReport: hcl,
      ...q,
      nonce: Buffer.alloc(32, 5),
      snpCerts: [snp.vcek, snp.ask, snp.ark],
      ...opts(),
    };
    const good = verifyAzureCvmEvidence({
      ...raw,
      akPublic: ak.akPublic,
      akParentQualifiedName: Buffer.from('4000000b', 'hex'),
    });
    expect(fails(good)).toEqual([]);
    expect(good.verdict).toBe('hardware-attested');
    const bad = verifyAzureCvmEvidence({ ...raw, akPublic: other.akPublic });
    expect(fails(bad)).toContain('azure.ak_match:HCL_AK_MISMATCH');
  });
});
