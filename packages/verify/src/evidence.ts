/**
 * Raw hardware evidence (not produced by cmcp) → the same {@link VerificationReport} claims
 * get: TPM quote (+ AK certificate chain), SEV-SNP report (+ VCEK/VLEK chain), TDX quote
 * (+ PCS collateral). No claim is involved, so `evidence.binding` is checked only against a
 * nonce / report data the relying party supplies (and is `not-applicable` otherwise).
 */
import type { KeyObject } from 'node:crypto';
import { verifyAkCertChain } from './akcert.js';
import { verifyEventLog } from './eventlog.js';
import {
  type AnchorUsed,
  type CheckResult,
  check,
  computeVerdict,
  fail,
  HARDWARE_ANCHOR_CHECK,
  HARDWARE_SIGNATURE_CHECK,
  pass,
  type VerificationReport,
} from './result.js';
import { type SnpInput, verifySnpReport } from './snp.js';
import { type TdxInput, verifyTdxQuote } from './tdx.js';
import {
  type PcrSelection,
  type PcrValue,
  pcrPinsCheck,
  TPM_ALG,
  type TpmQuoteInput,
  verifyTpmQuote,
} from './tpm.js';
import { EMPTY_TRUST_STORE, type ReferenceValues, type TeeType, type TrustStore } from './trust.js';
import { type Cert, CertError, certsFromBytes } from './x509.js';

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
      'No expected nonce / report data was checked: the evidence is not shown to be fresh or bound to anything.',
    );
  }
  return { verdict, checks, anchors_used: anchors, notes };
}

/** Options common to raw evidence. */
export interface RawEvidenceOptions {
  trustStore?: TrustStore;
  referenceValues?: ReferenceValues;
  /** Verification time; defaults to now. */
  now?: Date;
}

/** Raw TPM evidence. */
export interface RawTpmEvidence extends RawEvidenceOptions {
  attest: Uint8Array;
  /** TPMT_SIGNATURE bytes, or a raw signature (RSASSA with the hash given, e.g. tpm2_quote -f plain). */
  signature: Uint8Array;
  /** How `signature` is framed. */
  signatureFormat?: 'tpmt' | 'raw-rsassa-sha256' | 'raw-rsassa-sha384';
  /** AK as TPMT_PUBLIC wire bytes or a node key (PEM SPKI or from a certificate). */
  ak: { public: Uint8Array } | { key: KeyObject };
  /** AK certificate chain files (DER/PEM), leaf first. */
  akCertChain?: readonly Uint8Array[];
  /** Expected qualifyingData (exact bytes); undefined ⇒ not-applicable. */
  nonce?: Uint8Array;
  /** PCR values (SHA-256 bank). */
  pcrValues?: readonly PcrValue[];
  /**
   * A TCG2 crypto-agile event log (`binary_bios_measurements`): replayed and, for the PCRs it
   * covers, compared with `pcrValues` (checks `eventlog.parse`, `eventlog.pcrs`).
   */
  eventLog?: Uint8Array;
}

/** Verifies a raw TPM quote (+ AK certificate chain) and reports like a claim. Never throws. */
export function verifyTpmEvidence(e: RawTpmEvidence): VerificationReport {
  return guarded(() => tpmEvidence(e));
}

function tpmEvidence(e: RawTpmEvidence): VerificationReport {
  const trust = e.trustStore ?? EMPTY_TRUST_STORE;
  const at = e.now ?? new Date();
  const rv = e.referenceValues;
  const checks: CheckResult[] = [teeTypeCheck('tpm', rv)];
  const notes: string[] = [];
  const anchors: AnchorUsed[] = [];
  const signature: TpmQuoteInput['signature'] =
    e.signatureFormat === 'raw-rsassa-sha256' || e.signatureFormat === 'raw-rsassa-sha384'
      ? {
          sigAlg: TPM_ALG.RSASSA,
          hashAlg: e.signatureFormat === 'raw-rsassa-sha256' ? TPM_ALG.SHA256 : TPM_ALG.SHA384,
          sig: Buffer.from(e.signature),
        }
      : e.signature;
  const required = rv?.tpm?.required_pcrs;
  const requiredSelection: PcrSelection[] | undefined = required
    ? [{ hashAlg: TPM_ALG.SHA256, pcrs: [...required].sort((a, b) => a - b) }]
    : undefined;
  const q = verifyTpmQuote({
    attest: e.attest,
    signature,
    ak: e.ak,
    expectedExtraData: e.nonce ?? null,
    expectedExtraDataLabel: 'the expected nonce',
    ...(e.pcrValues ? { pcrValues: e.pcrValues } : {}),
    ...(requiredSelection ? { requiredSelection } : {}),
  });
  checks.push(...q.checks);
  // expected PCR values from the reference values
  const pins = rv?.tpm?.pcrs;
  if (!pins) checks.push(check('tpm.pcr_values', 'not-applicable', 'NO_POLICY', 'no expected PCR values'));
  else if (!e.pcrValues)
    checks.push(check('tpm.pcr_values', 'absent', 'NOT_SUPPLIED', 'no PCR values supplied'));
  else checks.push(pcrPinsCheck(pins, e.pcrValues, checks));
  // event log replay against the quoted PCR values
  let eventLog: VerificationReport['event_log'];
  if (e.eventLog) {
    const digest = checks.find((c) => c.id === 'tpm.pcr_digest');
    const el = verifyEventLog({
      log: e.eventLog,
      ...(e.pcrValues ? { pcrValues: e.pcrValues } : {}),
      pcrValuesQuoted: digest?.status === 'pass',
    });
    checks.push(...el.checks);
    notes.push(...el.notes);
    eventLog = el.summary;
  }
  let certs: Cert[] = [];
  let certProblem: CheckResult | null = null;
  try {
    certs = (e.akCertChain ?? []).flatMap((c) => certsFromBytes(c));
  } catch (err) {
    certProblem = fail(
      HARDWARE_ANCHOR_CHECK,
      err instanceof CertError ? err.code : 'CERT_MALFORMED',
      (err as Error).message,
    );
  }
  const akKey = q.akPublic?.key ?? ('key' in e.ak ? e.ak.key : undefined);
  if (certProblem) checks.push(certProblem);
  else {
    const a = verifyAkCertChain({ certs, akKey, trustStore: trust, at });
    checks.push(a.check);
    if (a.anchor) anchors.push(a.anchor);
  }
  const r = report(checks, anchors, notes);
  if (eventLog) r.event_log = eventLog;
  return r;
}

/** A TCG2 event log on its own (no quote). */
export interface RawEventLogEvidence {
  log: Uint8Array;
}

/**
 * Parses and replays an event log without a quote: checks `eventlog.parse` and `eventlog.pcrs`
 * (not-applicable), the replayed PCRs in `event_log`. Nothing signs a log, so the verdict is at
 * best `signed-only` (meaning here: no hardware signature was checked). Never throws.
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
    const r: VerificationReport = {
      verdict: computeVerdict(checks),
      checks,
      anchors_used: [],
      notes: [...el.notes],
    };
    if (el.summary) r.event_log = el.summary;
    return r;
  });
}

/** Raw SEV-SNP evidence. */
export interface RawSnpEvidence
  extends RawEvidenceOptions,
    Omit<SnpInput, 'trustStore' | 'at' | 'referenceValues'> {}

/** Verifies a raw SEV-SNP report (+ certificates) and reports like a claim. Never throws. */
export function verifySnpEvidence(e: RawSnpEvidence): VerificationReport {
  return guarded(() => snpEvidence(e));
}

function snpEvidence(e: RawSnpEvidence): VerificationReport {
  const r = verifySnpReport({
    ...e,
    trustStore: e.trustStore ?? EMPTY_TRUST_STORE,
    at: e.now ?? new Date(),
    ...(e.referenceValues ? { referenceValues: e.referenceValues } : {}),
  });
  return report([teeTypeCheck('sev-snp', e.referenceValues), ...r.checks], r.anchors, []);
}

/** Raw TDX evidence. */
export interface RawTdxEvidence
  extends RawEvidenceOptions,
    Omit<TdxInput, 'trustStore' | 'at' | 'referenceValues'> {}

/** Verifies a raw TDX quote (+ collateral) and reports like a claim. Never throws. */
export function verifyTdxEvidence(e: RawTdxEvidence): VerificationReport {
  return guarded(() => tdxEvidence(e));
}

function tdxEvidence(e: RawTdxEvidence): VerificationReport {
  const r = verifyTdxQuote({
    ...e,
    trustStore: e.trustStore ?? EMPTY_TRUST_STORE,
    at: e.now ?? new Date(),
    ...(e.referenceValues ? { referenceValues: e.referenceValues } : {}),
  });
  return report([teeTypeCheck('tdx', e.referenceValues), ...r.checks], r.anchors, [...r.notes]);
}
