/**
 * A claim's hardware evidence as the claim verifier checks it (docs/spec/claims.md#verification):
 * the kind registered for `evidence.provider` (kinds.ts) against the claim's REPORT_DATA, the
 * `absent` checks of a claim without a hardware binding, and the previous claim's quote for
 * `tpm.clock`. Split from ./claim.ts, which runs these in its order.
 */
import type { VerifyClaimOptions } from './claim.js';
import type { ClaimEvidence, ParsedClaim } from './claim-schema.js';
import type { FieldSource } from './common/fields.js';
import { type ClaimKindContext, tryB64u } from './common/kind.js';
import { evidenceKind } from './kinds.js';
import {
  type AnchorUsed,
  type CheckResult,
  check,
  fail,
  HARDWARE_ANCHOR_CHECK,
  HARDWARE_BINDING_CHECK,
  HARDWARE_SIGNATURE_CHECK,
  pass,
  quoteUntrusted,
} from './result.js';
import { EMPTY_TRUST_STORE } from './trust.js';

/**
 * The claim's hardware evidence: `policy.tee_type` (when the reference values restrict TEE
 * types), `evidence.status`, then the checks of the kind registered for `evidence.provider`
 * (kinds.ts) with this claim's REPORT_DATA as the expected binding.
 */
export function verifyEvidence(
  c: ParsedClaim,
  expectedReportData: Buffer | null,
  opts: VerifyClaimOptions,
  checks: CheckResult[],
  notes: string[],
  anchors: AnchorUsed[],
): FieldSource[] | undefined {
  const ev = c.evidence;
  const allowed = opts.referenceValues?.allowed_tee_types;
  if (allowed && ev.status === 'bound') {
    const tee = ev.provider;
    checks.push(
      (allowed as readonly string[]).includes(tee)
        ? pass('policy.tee_type', `${tee} is an allowed TEE type`)
        : fail(
            'policy.tee_type',
            'TEE_TYPE_NOT_ALLOWED',
            `${quoteUntrusted(tee, 32)} is not one of ${allowed.join(', ')}`,
          ),
    );
  }
  if (ev.status === 'absent') {
    absentEvidence(ev, opts, checks, notes);
    return;
  }
  const kind = evidenceKind(ev.provider);
  if (!kind?.inClaim(ev)) {
    checks.push(
      fail(
        'evidence.status',
        'EVIDENCE_INCOMPLETE',
        `status "bound" but no evidence this verifier can check (provider ${quoteUntrusted(ev.provider, 32)}, tpm ${ev.tpm === null ? 'null' : 'present'})`,
      ),
    );
    for (const id of [HARDWARE_SIGNATURE_CHECK, HARDWARE_BINDING_CHECK, HARDWARE_ANCHOR_CHECK]) {
      checks.push(fail(id, 'DEPENDENCY_FAILED', 'no checkable evidence'));
    }
    return;
  }
  checks.push(pass('evidence.status', `provider ${ev.provider} reports the binding bound`));
  const r = kind.fromClaim(ev, expectedReportData, {
    trustStore: opts.trustStore ?? EMPTY_TRUST_STORE,
    at: opts.now ?? new Date(),
    ...(opts.referenceValues ? { referenceValues: opts.referenceValues } : {}),
    ...(opts.requiredPcrs ? { requiredPcrs: opts.requiredPcrs } : {}),
    ...previousTpmAttest(opts.previousClaim, c.binding.preimage.opened_after_claim),
  });
  checks.push(...r.checks);
  anchors.push(...r.anchors);
  notes.push(...r.notes);
  return r.fields;
}

/**
 * The previous claim's TPM quote (TPMS_ATTEST), for `tpm.clock`; none when the previous claim
 * carries no TPM quote (then `tpm.clock` is not reported). Bytes that are not base64url are
 * passed as empty, which the clock check reports as not parsing. Its quote is known to be the
 * earlier one only when this session opened after the previous claim was issued
 * (`opened_after_claim` ≥ its claim_sequence, bound in this quote's preimage).
 */
function previousTpmAttest(
  previousClaim: unknown,
  openedAfterClaim: number | null | undefined,
): Pick<ClaimKindContext, 'previousTpmAttest' | 'previousTpmAttestOrder'> {
  const prev = previousClaim as
    | { evidence?: { tpm?: { attest?: unknown } | null }; claim_sequence?: unknown }
    | null
    | undefined;
  const attest = prev?.evidence?.tpm?.attest;
  if (typeof attest !== 'string') return {};
  const seq = prev?.claim_sequence;
  const earlier = typeof openedAfterClaim === 'number' && typeof seq === 'number' && seq <= openedAfterClaim;
  return {
    previousTpmAttest: tryB64u(attest) ?? Buffer.alloc(0),
    previousTpmAttestOrder: earlier ? 'earlier' : 'close-order',
  };
}

/** A claim that says its hardware binding is absent: the hardware checks are `absent`. */
function absentEvidence(
  ev: ClaimEvidence,
  opts: VerifyClaimOptions,
  checks: CheckResult[],
  notes: string[],
): void {
  const why = `hardware binding absent: provider ${quoteUntrusted(ev.provider, 32)}, reason ${quoteUntrusted(ev.reason ?? 'none given', 64)}`;
  checks.push(check('evidence.status', 'absent', 'EVIDENCE_ABSENT', why));
  checks.push(check(HARDWARE_SIGNATURE_CHECK, 'absent', 'EVIDENCE_ABSENT', why));
  checks.push(check(HARDWARE_BINDING_CHECK, 'absent', 'EVIDENCE_ABSENT', why));
  checks.push(check(HARDWARE_ANCHOR_CHECK, 'absent', 'EVIDENCE_ABSENT', why));
  if (opts.requiredPcrs) {
    checks.push(
      check(
        'tpm.pcr_policy',
        'absent',
        'EVIDENCE_ABSENT',
        `${why}: the required PCR selection is not attested`,
      ),
    );
  }
  notes.push(`${why}. The claim is signed by the gateway key only; it is not hardware evidence.`);
  if (ev.tpm !== null)
    notes.push('The claim carries TPM data although it states the binding is absent; it was ignored.');
}
