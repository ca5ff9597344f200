/**
 * Raw hardware evidence (not produced by cmcp) → the same {@link VerificationReport} claims
 * get: TPM quote (+ AK certificate chain), SEV-SNP report (+ VCEK/VLEK chain), TDX quote
 * (+ PCS collateral). No claim is involved, so `evidence.binding` is checked only against a
 * nonce / report data the relying party supplies (and is `not-applicable` otherwise). Each kind
 * is run through the registry (kinds.ts); the glue here is shared by all of them.
 */

import { markFields, tpmFields } from './common/fields.js';
import type { RawEvidenceOptions } from './common/raw.js';
import { verifyEventLog } from './eventlog.js';
import { EVIDENCE_KINDS, type RawEvidenceByKind } from './kinds.js';
import {
  type AnchorUsed,
  type CheckResult,
  check,
  computeVerdict,
  fail,
  HARDWARE_ANCHOR_CHECK,
  HARDWARE_SIGNATURE_CHECK,
  intermediateAnchorNotes,
  NOT_FRESH_NO_NONCE,
  pass,
  type VerificationReport,
} from './result.js';
import { EMPTY_TRUST_STORE, type ReferenceValues, type TeeType } from './trust.js';

export type { RawAzureEvidence } from './azure/evidence.js';
export type { RawEvidenceOptions } from './common/raw.js';
export type { RawSnpEvidence } from './snp/evidence.js';
export type { RawTdxEvidence } from './tdx/evidence.js';
export type { RawTpmEvidence } from './tpm/evidence.js';

/** `policy.tee_type`: whether the reference values allow this TEE type. */
export function teeTypeCheck(tee: TeeType, rv: ReferenceValues | undefined): CheckResult {
  const allowed = rv?.allowed_tee_types;
  if (!allowed)
    return check('policy.tee_type', 'not-applicable', 'NO_POLICY', `${tee}; no TEE type restriction`);
  return allowed.includes(tee)
    ? pass('policy.tee_type', `${tee} is an allowed TEE type`)
    : fail('policy.tee_type', 'TEE_TYPE_NOT_ALLOWED', `${tee} is not one of ${allowed.join(', ')}`);
}

/** Runs `fn`; an unexpected exception becomes a failed `verify.internal` check (never a crash). */
function guarded(fn: () => VerificationReport): VerificationReport {
  try {
    return fn();
  } catch (err) {
    const checks = [
      fail(
        'verify.internal',
        'EVIDENCE_MALFORMED',
        `verification stopped: ${(err as Error)?.message?.slice(0, 120) ?? 'error'}`,
      ),
    ];
    return { verdict: computeVerdict(checks), checks, anchors_used: [], notes: [] };
  }
}

function report(checks: CheckResult[], anchors: AnchorUsed[], notes: string[]): VerificationReport {
  const verdict = computeVerdict(checks);
  const anchor = checks.find((c) => c.id === HARDWARE_ANCHOR_CHECK);
  if (anchor && anchor.status !== 'pass' && verdict !== 'invalid') {
    notes.push(`The signing key is NOT anchored to a pinned root (${anchor.reason_code}).`);
  }
  if (!checks.some((c) => c.id === 'evidence.binding' && c.status === 'pass')) {
    notes.push(
      `${NOT_FRESH_NO_NONCE[0]?.toUpperCase()}${NOT_FRESH_NO_NONCE.slice(1)}: no expected nonce / report data was checked, so the evidence is not shown to be fresh or bound to anything.`,
    );
  }
  notes.push(...intermediateAnchorNotes(anchors));
  return { verdict, checks, anchors_used: anchors, notes };
}

/**
 * Verifies raw evidence of a registered kind: `policy.tee_type`, then the kind's checks
 * (see each kind's `evidence.ts`). Never throws.
 */
export function verifyRawEvidence<K extends keyof RawEvidenceByKind>(
  kind: K,
  e: RawEvidenceByKind[K],
): VerificationReport {
  return guarded(() => {
    const k = EVIDENCE_KINDS[kind];
    const opts: RawEvidenceOptions = e;
    const r = k.fromRaw(e, {
      trustStore: opts.trustStore ?? EMPTY_TRUST_STORE,
      at: opts.now ?? new Date(),
      ...(opts.referenceValues ? { referenceValues: opts.referenceValues } : {}),
    });
    const out = report([teeTypeCheck(k.tee, opts.referenceValues), ...r.checks], r.anchors, r.notes);
    if (r.eventLog) out.event_log = r.eventLog;
    if (r.fields) out.fields = markFields(r.fields, out.checks);
    return out;
  });
}

/** Verifies a raw TPM quote (+ AK certificate chain) and reports like a claim. Never throws. */
export function verifyTpmEvidence(e: RawEvidenceByKind['tpm']): VerificationReport {
  return verifyRawEvidence('tpm', e);
}

/** Verifies a raw SEV-SNP report (+ certificates) and reports like a claim. Never throws. */
export function verifySnpEvidence(e: RawEvidenceByKind['sev-snp']): VerificationReport {
  return verifyRawEvidence('sev-snp', e);
}

/** Verifies a raw TDX quote (+ collateral) and reports like a claim. Never throws. */
export function verifyTdxEvidence(e: RawEvidenceByKind['tdx']): VerificationReport {
  return verifyRawEvidence('tdx', e);
}

/** Verifies an Azure CVM HCL report with its vTPM quote (and SNP/TDX evidence). Never throws. */
export function verifyAzureCvmEvidence(e: RawEvidenceByKind['azure-cvm']): VerificationReport {
  return verifyRawEvidence('azure-cvm', e);
}

/** A TCG2 event log on its own (no quote). */
export interface RawEventLogEvidence {
  log: Uint8Array;
}

/**
 * Parses and replays an event log without a quote: checks `eventlog.parse` and `eventlog.pcrs`
 * (not-applicable), the replayed PCRs in `event_log` and as `fields` (`eventlog.pcr.<bank>.<index>`,
 * unverified; TCG PC Client Platform Firmware Profile §10). Nothing signs a log, so the verdict is
 * at best `signed-only` (meaning here: no hardware signature was checked). Never throws.
 */
export function verifyEventLogEvidence(e: RawEventLogEvidence): VerificationReport {
  return guarded(() => {
    const el = verifyEventLog({ log: e.log });
    const checks: CheckResult[] = [
      ...el.checks,
      check(
        HARDWARE_SIGNATURE_CHECK,
        'absent',
        'NOT_SUPPLIED',
        'an event log is not signed: give the quote (--tpm-quote, --pcrs-file) to compare it with',
      ),
    ];
    // The replayed PCRs are fields like any other, never verified: nothing signs a log.
    const r: VerificationReport = {
      verdict: computeVerdict(checks),
      checks,
      anchors_used: [],
      notes: [...el.notes],
      fields: markFields(tpmFields(undefined, [], el.summary), checks),
    };
    if (el.summary) r.event_log = el.summary;
    return r;
  });
}
