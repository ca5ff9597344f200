/**
 * The TDX evidence entry, for claims (`evidence.tdx`) and raw evidence: quote bytes → TDX quote
 * (abi) → attestation key, QE report and PCK chain → REPORTDATA → TD appraisal → collateral.
 * Collateral is not carried in claims, so a claim's TCB status is reported as unknown.
 */
import type { ClaimEvidence } from '../claim-schema.js';
import { tdxFields } from '../common/fields.js';
import {
  type EvidenceKind,
  type KindContext,
  type KindResult,
  replaceCheck,
  tryB64u,
} from '../common/kind.js';
import type { RawEvidenceOptions } from '../common/raw.js';
import { finishTeeClaim } from '../common/tee.js';
import { fail } from '../result.js';
import { type TdxInput, verifyTdxQuote } from './quote.js';

/** Raw TDX evidence. */
export interface RawTdxEvidence
  extends RawEvidenceOptions,
    Omit<TdxInput, 'trustStore' | 'at' | 'referenceValues'> {}

function run(input: Omit<TdxInput, 'trustStore' | 'at' | 'referenceValues'>, ctx: KindContext): KindResult {
  const r = verifyTdxQuote({
    ...input,
    trustStore: ctx.trustStore,
    at: ctx.at,
    ...(ctx.referenceValues ? { referenceValues: ctx.referenceValues } : {}),
  });
  return { checks: r.checks, anchors: r.anchors, notes: [...r.notes], fields: tdxFields(r.quote) };
}

function fromClaim(ev: ClaimEvidence, expectedReportData: Buffer | null, ctx: KindContext): KindResult {
  const quote = tryB64u(ev.tdx?.quote ?? '');
  const r = run(
    { quote: quote ?? Buffer.alloc(0), expectedReportData: expectedReportData ?? Buffer.alloc(0) },
    ctx,
  );
  if (!quote)
    replaceCheck(
      r.checks,
      'tdx.quote_parse',
      fail('tdx.quote_parse', 'EVIDENCE_MALFORMED', 'quote is not base64url'),
    );
  return finishTeeClaim(ev.provider, r, expectedReportData);
}

/** The TDX evidence kind. */
export const TDX_KIND: EvidenceKind<RawTdxEvidence> = {
  tee: 'tdx',
  inClaim: (ev) => ev.provider === 'tdx' && ev.tdx !== undefined,
  fromClaim,
  fromRaw: (e, ctx) => {
    const { trustStore: _t, referenceValues: _r, now: _n, ...input } = e;
    return run(input, ctx);
  },
};
