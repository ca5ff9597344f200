/**
 * The SEV-SNP evidence entry, for claims (`evidence.sev_snp`) and raw evidence: report bytes →
 * ATTESTATION_REPORT (abi) → VCEK/VLEK signature and chain → REPORT_DATA → appraisal.
 */
import type { ClaimEvidence } from '../claim-schema.js';
import { snpFields } from '../common/fields.js';
import { type EvidenceKind, type KindContext, type KindResult, tryB64u } from '../common/kind.js';
import type { RawEvidenceOptions } from '../common/raw.js';
import { teeClaim, teeContextInput } from '../common/tee.js';
import { type SnpInput, verifySnpReport } from './report.js';

/** Raw SEV-SNP evidence. */
export interface RawSnpEvidence
  extends RawEvidenceOptions,
    Omit<SnpInput, 'trustStore' | 'at' | 'referenceValues'> {}

function run(input: Omit<SnpInput, 'trustStore' | 'at' | 'referenceValues'>, ctx: KindContext): KindResult {
  const r = verifySnpReport({ ...input, ...teeContextInput(ctx) });
  return { checks: r.checks, anchors: r.anchors, notes: [], fields: snpFields(r.report) };
}

function fromClaim(ev: ClaimEvidence, expectedReportData: Buffer | null, ctx: KindContext): KindResult {
  const snp = ev.sev_snp as NonNullable<ClaimEvidence['sev_snp']>;
  const certs = snp.certs.map((c) => tryB64u(c.der) ?? Buffer.from('not base64url'));
  return teeClaim(
    ev.provider,
    tryB64u(snp.report),
    expectedReportData,
    { id: 'snp.report_parse', field: 'report' },
    (report, expected) => run({ report, certs, expectedReportData: expected }, ctx),
  );
}

/** The SEV-SNP evidence kind. */
export const SNP_KIND: EvidenceKind<RawSnpEvidence> = {
  tee: 'sev-snp',
  inClaim: (ev) => ev.provider === 'sev-snp' && ev.sev_snp !== undefined,
  fromClaim,
  fromRaw: (e, ctx) => {
    const { trustStore: _t, referenceValues: _r, now: _n, ...input } = e;
    return run(input, ctx);
  },
};
