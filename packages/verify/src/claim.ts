/**
 * Claim verification for relying parties (docs/spec/binding.md, docs/spec/claims.md). Re-derives everything it reports:
 * claim signature → key thumbprint → binding preimage → REPORT_DATA → hardware evidence
 * (TPM quote: signature, nonce, AK, PCRs) → AK anchor → audit bundle.
 *
 * Imports only `packages/verify/src/format/*`, sibling verifier modules, node built-ins and npm libraries.
 * Every check runs over one parsed claim in the order its report lists them; the hardware
 * evidence's live in ./claim-evidence.ts, the bundle's in ./bundle-checks.ts.
 */
import type { z } from 'zod';
import { verifyBundle } from './bundle.js';
import {
  challengeCheck,
  inclusionCheck,
  keyThumbprintCheck,
  preimageChecks,
  reportDataCheck,
} from './claim-binding.js';
import { verifyEvidence } from './claim-evidence.js';
import { bindingReplicaJwk, replicaChecks, weakerVerdict, writersCheck } from './claim-replicas.js';
import { anyClaimSchema, claimSchema, claimSchemaFor, type ParsedClaim } from './claim-schema.js';
import { type FieldSource, markFields } from './common/fields.js';
import { tryB64u } from './common/kind.js';
import { jwkThumbprint } from './format/binding.js';
import { b64u, CanonicalJsonError, canonicalJson, fromB64u } from './format/canonical.js';
import { type Claim, claimHash, verifyClaimSignature } from './format/claim.js';
import { CLAIM_PROFILE_REPLICAS } from './format/replica.js';
import { gatewayReferenceCheck, verifyMeasurement } from './measurement.js';
import {
  type AnchorUsed,
  type CheckResult,
  type ClaimSigner,
  check,
  computeVerdict,
  fail,
  HARDWARE_SIGNATURE_CHECK,
  intermediateAnchorNotes,
  pass,
  quoteUntrusted,
  type ReasonCode,
  type Verdict,
  type VerificationReport,
  verdictAtLeast,
} from './result.js';
import type { ReferenceValues, TrustStore } from './trust.js';

export { claimSchema };

/** Options of {@link verifyClaim}. */
export interface VerifyClaimOptions {
  /** The audit bundle (parsed JSON) of the claim's chain; undefined ⇒ audit checks `absent`. */
  bundle?: unknown;
  /**
   * The verifier's nonce (base64url) the binding must carry; `null` requires that no challenge
   * was bound; undefined ⇒ `binding.challenge` is not-applicable.
   */
  expectedChallenge?: string | null;
  /** Required PCR selection policy: the quote must select exactly these SHA-256 PCRs. */
  requiredPcrs?: number[];
  /** The claim issued just before this one; checks `prev_claim_hash` and `claim_sequence`. */
  previousClaim?: unknown;
  /** Pinned policy bundle hash (`sha256:<hex>`): adds check `claim.policy_hash`. */
  expectedPolicyHash?: string;
  /** Pinned catalog hash (`sha256:<hex>`): adds check `claim.catalog_hash`. */
  expectedCatalogHash?: string;
  /** Pinned roots; without one, no AK chain can be anchored (verdict at best hardware-unanchored). */
  trustStore?: TrustStore;
  /** Reference values (allowed TEE types, required PCRs, expected PCR values, gateway measurements). */
  referenceValues?: ReferenceValues;
  /** Verification time for certificate validity; defaults to now. */
  now?: Date;
  /**
   * The weakest verdict accepted from a signer nobody pinned (default `hardware-attested`).
   * Lowering it to `signed-only` accepts a claim whose signer is self-asserted: anyone with a
   * key of their own can sign such a claim. Sets {@link VerificationReport.accepted}.
   */
  require?: Exclude<Verdict, 'invalid'>;
  /**
   * RFC 7638 thumbprints (unpadded base64url) of claim signing keys the relying party pinned:
   * a claim signed by one of them is accepted whatever its verdict short of `invalid`.
   */
  trustedKeys?: readonly string[];
}

/** The RFC 7638 thumbprint of the claim's cnf.jwk, or null when it has none usable. */
function signerThumbprint(claim: unknown): string | null {
  const jwk = (claim as { cnf?: { jwk?: { kty?: unknown; crv?: unknown; x?: unknown } } } | null)?.cnf?.jwk;
  if (typeof jwk?.x !== 'string' || jwk.kty !== 'OKP' || jwk.crv !== 'Ed25519') return null;
  try {
    return b64u(jwkThumbprint({ kty: 'OKP', crv: 'Ed25519', x: jwk.x }));
  } catch {
    return null;
  }
}

/**
 * Who vouches for the claim's signer, whether the relying party's policy accepts the claim, and
 * the `claim.signer` check (reported unless the claim is invalid anyway). A self-asserted signer
 * is never a failure by itself — the verdict stays what the evidence shows — but it is `absent`
 * with `CLAIM_SIGNER_NOT_TRUSTED`, named in a warning note, and the claim is not `accepted`
 * unless the caller lowered `require`.
 */
function signerPolicy(
  claim: unknown,
  verdict: Verdict,
  opts: VerifyClaimOptions,
): { signer: ClaimSigner; accepted: boolean; required: Verdict; check: CheckResult | null; notes: string[] } {
  const required = opts.require ?? 'hardware-attested';
  const thumb = signerThumbprint(claim);
  const pinned = thumb !== null && (opts.trustedKeys ?? []).includes(thumb);
  const signer: ClaimSigner =
    verdict === 'hardware-attested' ? 'hardware-attested' : pinned ? 'pinned-key' : 'self-asserted';
  const accepted = verdict !== 'invalid' && (pinned || verdictAtLeast(verdict, required));
  if (verdict === 'invalid') return { signer, accepted, required, check: null, notes: [] };
  if (signer === 'hardware-attested') {
    const c = pass('claim.signer', 'cnf.jwk is bound by hardware evidence that chains to a pinned root');
    return { signer, accepted, required, check: c, notes: [] };
  }
  if (signer === 'pinned-key') {
    const c = pass('claim.signer', `cnf.jwk is a key the verifier pinned (thumbprint ${thumb})`);
    return { signer, accepted, required, check: c, notes: [] };
  }
  const why = `the claim signer is self-asserted: cnf.jwk (thumbprint ${thumb ?? 'none'}) is neither bound by evidence chaining to a pinned root nor a pinned key, so anyone could have signed this claim`;
  const outcome = accepted
    ? `accepted only because the verifier lowered its requirement to ${required}`
    : `not accepted: ${required} or a pinned key (--key) is required`;
  return {
    signer,
    accepted,
    required,
    check: check('claim.signer', 'absent', 'CLAIM_SIGNER_NOT_TRUSTED', `${why}; ${outcome}`),
    notes: [`WARNING: ${why}; ${outcome}.`],
  };
}

function firstIssue(err: z.ZodError): string {
  const issue = err.issues[0];
  return issue ? `${issue.path.join('.') || '(root)'}: ${issue.message}`.slice(0, 160) : 'unknown';
}

/** `claim.signature`: Ed25519 over JCS(claim without signature), key from cnf.jwk (RFC 8032/8037). */
function claimSignatureCheck(c: ParsedClaim, raw: Claim): CheckResult {
  let reason: ReasonCode | null = null;
  let detail = '';
  try {
    const { signature: _sig, ...unsigned } = raw;
    canonicalJson(unsigned);
  } catch (err) {
    reason = 'CLAIM_NOT_CANONICALIZABLE';
    detail = err instanceof CanonicalJsonError ? err.message.slice(0, 160) : 'not canonicalisable';
  }
  if (!reason) {
    try {
      if (fromB64u(c.cnf.jwk.x).length !== 32) throw new Error('x is not 32 bytes');
    } catch (err) {
      reason = 'CLAIM_KEY_INVALID';
      detail = `cnf.jwk: ${err instanceof Error ? err.message : 'invalid'}`.slice(0, 160);
    }
  }
  if (!reason) {
    let ok = false;
    try {
      ok = verifyClaimSignature(raw);
    } catch (err) {
      detail = `signature not checkable: ${err instanceof Error ? err.message : 'error'}`.slice(0, 160);
    }
    if (!ok) {
      reason = 'CLAIM_SIGNATURE_INVALID';
      detail ||= 'Ed25519 signature over JCS(claim without signature) does not verify under cnf.jwk';
    }
  }
  return reason
    ? fail('claim.signature', reason, detail)
    : pass('claim.signature', 'Ed25519 signature over JCS(claim without signature) verifies under cnf.jwk');
}

/** `claim.sequence`: prev_claim_hash and claim_sequence follow the supplied previous claim. */
function sequenceCheck(c: ParsedClaim, previousClaim: unknown, checks: CheckResult[]): void {
  if (previousClaim === undefined) {
    checks.push(check('claim.sequence', 'not-applicable', 'NO_PREVIOUS_CLAIM', 'no previous claim supplied'));
  } else {
    const prev = anyClaimSchema.safeParse(previousClaim);
    let prevHash: string | null = null;
    if (prev.success) {
      try {
        prevHash = claimHash(previousClaim as Claim);
      } catch {
        prevHash = null;
      }
    }
    if (!prev.success || prevHash === null) {
      checks.push(
        fail(
          'claim.sequence',
          'PREVIOUS_CLAIM_MALFORMED',
          prev.success
            ? 'previous claim is not canonicalisable'
            : `previous claim: ${firstIssue(prev.error)}`,
        ),
      );
    } else if (c.prev_claim_hash !== prevHash || c.claim_sequence !== prev.data.claim_sequence + 1) {
      checks.push(
        fail(
          'claim.sequence',
          'CLAIM_NOT_SUCCESSOR',
          `claim ${c.claim_sequence} (prev_claim_hash ${c.prev_claim_hash ?? 'null'}) does not follow claim ${prev.data.claim_sequence} (hash ${prevHash})`,
        ),
      );
    } else {
      checks.push(
        pass('claim.sequence', `claim ${c.claim_sequence} follows claim ${prev.data.claim_sequence}`),
      );
    }
  }
}

/** `claim.policy_hash` / `claim.catalog_hash`: pins asked for by the relying party (docs/spec/policy.md). */
function pinChecks(c: ParsedClaim, opts: VerifyClaimOptions, checks: CheckResult[]): void {
  // claim.policy_hash / claim.catalog_hash: pins asked for by the relying party (docs/spec/policy.md).
  // The binding.preimage check ties these claim fields to the bound preimage.
  const pins = [
    [
      'claim.policy_hash',
      'policy_bundle_hash',
      c.policy_bundle_hash,
      opts.expectedPolicyHash,
      'POLICY_HASH_MISMATCH',
    ],
    ['claim.catalog_hash', 'catalog_hash', c.catalog_hash, opts.expectedCatalogHash, 'CATALOG_HASH_MISMATCH'],
  ] as const;
  for (const [id, field, actual, pinned, reason] of pins) {
    if (pinned === undefined) continue;
    checks.push(
      actual === pinned
        ? pass(id, `${field} is the pinned ${pinned}`)
        : fail(
            id,
            reason,
            `${field} ${quoteUntrusted(actual ?? 'null', 80)} is not the pinned ${quoteUntrusted(pinned, 80)}`,
          ),
    );
  }
}

/** Gateway measurement: inputs → digest → claim/preimage → quoted measurement PCR. */
function measurementChecks(
  c: ParsedClaim,
  raw: Claim,
  opts: VerifyClaimOptions,
  checks: CheckResult[],
  notes: string[],
): void {
  const pre = c.binding.preimage;
  {
    const ev = c.evidence;
    // an Azure CVM claim's quote is a vTPM quote too (its signature check is azure.quote_signature)
    const quoteVia = ev.provider === 'azure-cvm' ? 'azure.quote_signature' : HARDWARE_SIGNATURE_CHECK;
    const tpm =
      ev.status === 'bound' && (ev.provider === 'tpm' || ev.provider === 'azure-cvm') ? ev.tpm : null;
    let tpmInput: Parameters<typeof verifyMeasurement>[0]['tpm'];
    if (tpm) {
      const values = new Map<number, Buffer>();
      for (const [k, v] of Object.entries(tpm.pcr_values)) {
        const bytes = tryB64u(v);
        if (/^(0|[1-9]\d?)$/.test(k) && bytes) values.set(Number(k), bytes);
      }
      const passed = (id: string) => checks.find((x) => x.id === id)?.status === 'pass';
      tpmInput = {
        pcrs: tpm.pcr_selection.pcrs,
        values,
        quoted: passed('tpm.pcr_digest') && passed(quoteVia),
      };
    }
    const m = verifyMeasurement({
      measurement: (raw.evidence as { measurement?: unknown }).measurement,
      claimMeasurement: c.gateway_measurement,
      preimageMeasurement: pre.gateway_measurement,
      claimPolicyHash: c.policy_bundle_hash,
      ...(tpmInput ? { tpm: tpmInput } : {}),
      provider: ev.provider,
    });
    checks.push(...m.checks);
    notes.push(...m.notes);
    const accepted = opts.referenceValues?.gateway?.measurements;
    if (accepted) checks.push(gatewayReferenceCheck(c.gateway_measurement, accepted));
  }
}

/**
 * Verifies a claim (parsed JSON of unknown shape) and returns the full report.
 *
 * Checks, in order (ids stable): `claim.shape`, `claim.signature` (Ed25519 over JCS(claim
 * without signature), key from cnf.jwk, RFC 8032/8037), `binding.key_thumbprint` (RFC 7638),
 * `binding.session`, `binding.chain_root`, `binding.preimage`, `binding.challenge`,
 * `binding.inclusion` (a batched binding's RFC 6962 audit path; not-applicable for a single
 * binding), `binding.report_data` (thumbprint ‖ SHA-256(JCS(preimage)), or thumbprint ‖ batch
 * digest for a batched binding, docs/spec/binding.md), `claim.sequence`,
 * `evidence.status`, then for a bound TPM claim the checks of {@link verifyTpmQuote} with
 * extraData = SHA-256(REPORT_DATA), then `evidence.anchor`, then the audit checks of
 * {@link verifyBundle} (or `audit.bundle` absent).
 *
 * `evidence.anchor` passes when `evidence.tpm.ak_cert_chain` (leaf first) certifies the quoting
 * AK and chains to a root pinned in `opts.trustStore` at `opts.now` ({@link verifyAkCertChain});
 * the verdict can then be `hardware-attested` and the root is listed in `anchors_used` by SHA-256
 * fingerprint. Without a chain (or a pinned root) the verdict is `hardware-unanchored` at best.
 *
 * The verdict says what the evidence shows; `accepted` says whether the relying party's policy
 * takes the claim. By default only a `hardware-attested` claim, or one signed by a key in
 * `opts.trustedKeys`, is accepted; `opts.require` lowers the bar explicitly. `signer` and the
 * last check, `claim.signer`, say who vouches for the signing key — `self-asserted` when nothing
 * but the claim does (with a WARNING note). Callers must test `accepted`, not only the verdict.
 * Never throws.
 */
export function verifyClaim(claim: unknown, opts: VerifyClaimOptions = {}): VerificationReport {
  const checks: CheckResult[] = [];
  const notes: string[] = [];
  const anchors: AnchorUsed[] = [];
  let fieldSources: FieldSource[] | undefined;
  // A `/2` claim is as strong as its weakest writer (docs/spec/claims.md#replicas).
  let writers: Verdict = 'hardware-attested';
  const report = (): VerificationReport => {
    const verdict = weakerVerdict(computeVerdict(checks), writers);
    const policy = signerPolicy(claim, verdict, opts);
    return {
      verdict,
      signer: policy.signer,
      accepted: policy.accepted,
      required: policy.required,
      checks: policy.check ? [...checks, policy.check] : checks,
      anchors_used: anchors,
      notes: [...notes, ...intermediateAnchorNotes(anchors), ...policy.notes],
      ...(fieldSources ? { fields: markFields(fieldSources, checks) } : {}),
    };
  };

  const profile = (claim as { profile?: unknown } | null)?.profile;
  const v2 = profile === CLAIM_PROFILE_REPLICAS;
  const shape = claimSchemaFor(claim).safeParse(claim);
  if (!shape.success) {
    checks.push(fail('claim.shape', 'CLAIM_MALFORMED', `claim does not parse: ${firstIssue(shape.error)}`));
    checks.push(fail('claim.signature', 'DEPENDENCY_FAILED', 'the claim did not parse'));
    return report();
  }
  const c: ParsedClaim = shape.data;
  // Everything signed is the claim as given (extra members included), not the zod output.
  const raw = claim as Claim;
  if (!v2 && Object.hasOwn(raw, 'replicas')) {
    // A /1 check would ignore the writers a /2 claim lists: refuse rather than under-check.
    checks.push(fail('claim.shape', 'CLAIM_PROFILE_MISMATCH', `profile ${c.profile} with a replicas member`));
    checks.push(fail('claim.signature', 'DEPENDENCY_FAILED', 'the claim has the wrong profile'));
    return report();
  }
  if (c.tree_head && c.tree_head.size !== c.audit_chain.length) {
    checks.push(
      fail(
        'claim.shape',
        'TREE_HEAD_SIZE_MISMATCH',
        `tree_head.size ${c.tree_head.size}, audit_chain.length ${c.audit_chain.length}`,
      ),
    );
    checks.push(fail('claim.signature', 'DEPENDENCY_FAILED', 'the claim did not parse'));
    return report();
  }
  checks.push(pass('claim.shape', `claim v${c.claim_version}, profile ${c.profile}`));
  checks.push(claimSignatureCheck(c, raw));
  if (v2) writers = replicaChecks(c, raw, opts, checks, anchors);
  const thumb = keyThumbprintCheck(c, checks, v2 ? bindingReplicaJwk(c) : c.cnf.jwk);
  const digest = preimageChecks(c, raw, checks);
  challengeCheck(c, opts.expectedChallenge, checks);
  const bound = inclusionCheck(c, thumb, digest, checks);
  const expectedReportData = reportDataCheck(c, thumb, bound, checks);
  sequenceCheck(c, opts.previousClaim, checks);
  pinChecks(c, opts, checks);
  fieldSources = verifyEvidence(c, expectedReportData, opts, checks, notes, anchors);
  measurementChecks(c, raw, opts, checks, notes);
  // audit bundle
  if (opts.bundle === undefined) {
    checks.push(
      check(
        'audit.bundle',
        'absent',
        'BUNDLE_NOT_PROVIDED',
        'no audit bundle supplied: root, tip and length not re-derived',
      ),
    );
    if (v2)
      checks.push(check('audit.writers', 'absent', 'BUNDLE_NOT_PROVIDED', 'no bundle: writers not checked'));
  } else {
    const bv = verifyBundle(opts.bundle, {
      chain_id: c.audit_chain.chain_id,
      session_id: c.session_id,
      agent_id: c.agent_id,
      root: c.audit_chain.root,
      tip: c.audit_chain.tip,
      length: c.audit_chain.length,
      ...(c.transcript ? { transcript: c.transcript } : {}),
      ...(c.tree_head ? { tree_head: c.tree_head } : {}),
      ...(c.entry_counts ? { counts: { entry_counts: c.entry_counts, counters: c.counters } } : {}),
    });
    checks.push(...bv.checks);
    notes.push(...bv.notes);
    if (v2) checks.push(writersCheck(c, bv.entries, opts.bundle));
    const r = report();
    if (bv.execution_id_groups.length) r.execution_id_groups = bv.execution_id_groups;
    r.entry_counts = bv.entry_counts;
    return r;
  }
  return report();
}
