/**
 * Claim verification for relying parties (design §4, §5). Re-derives everything it reports:
 * claim signature → key thumbprint → binding preimage → REPORT_DATA → hardware evidence
 * (TPM quote: signature, nonce, AK, PCRs) → AK anchor → audit bundle.
 *
 * Imports only `packages/verify/src/format/*`, sibling verifier modules, node built-ins and npm libraries.
 */
import { z } from 'zod';
import { verifyAkCertChain } from './akcert.js';
import { verifyBundle } from './bundle.js';
import { bindingDigest, jwkThumbprint, reportData, tpmQualifyingData } from './format/binding.js';
import { b64u, CanonicalJsonError, canonicalJson, fromB64u } from './format/canonical.js';
import { CLAIM_PROFILE, type Claim, claimHash, verifyClaimSignature } from './format/claim.js';
import { gatewayReferenceCheck, verifyMeasurement } from './measurement.js';
import {
  type AnchorUsed,
  type CheckResult,
  check,
  computeVerdict,
  fail,
  HARDWARE_ANCHOR_CHECK,
  HARDWARE_BINDING_CHECK,
  HARDWARE_SIGNATURE_CHECK,
  pass,
  quoteUntrusted,
  type ReasonCode,
  type VerificationReport,
} from './result.js';
import { verifySnpReport } from './snp.js';
import { verifyTdxQuote } from './tdx.js';
import { type PcrValue, pcrPinsCheck, TPM_ALG, verifyTpmQuote } from './tpm.js';
import { EMPTY_TRUST_STORE, type ReferenceValues, type TrustStore } from './trust.js';
import { type Cert, CertError, parseCert } from './x509.js';

const b64url = z.string().regex(/^[A-Za-z0-9_-]*$/, 'not unpadded base64url');
const hex64 = z.string().regex(/^[0-9a-f]{64}$/, 'not 64 lowercase hex');
const int0 = z.number().int().min(0);

/** zod schema of a claim v1 (packages/verify/src/format/claim.ts `Claim`). Extra members are tolerated but signed. */
export const claimSchema = z.object({
  claim_version: z.literal(1),
  profile: z.literal(CLAIM_PROFILE),
  issued_at: z.string(),
  session_id: z.string(),
  agent_id: z.string(),
  gateway_measurement: z.string().nullable(),
  policy_bundle_hash: z.string().nullable(),
  enforcement_mode: z.string(),
  catalog_hash: z.string().nullable(),
  cnf: z.object({ jwk: z.object({ kty: z.literal('OKP'), crv: z.literal('Ed25519'), x: b64url }) }),
  audit_chain: z.object({ chain_id: z.string(), root: hex64, tip: hex64, length: z.number().int().min(1) }),
  transcript: z.array(
    z.object({
      sequence_number: int0,
      tool_name: z.string().nullable(),
      policy_decision: z.string().nullable(),
      policy_rule_matched: z.array(z.string()).nullable().optional(),
      disposition: z.string().nullable(),
      error_code: z.string().nullable(),
    }),
  ),
  counters: z.object({ tool_calls: int0, allowed: int0, refused: int0, faulted: int0 }),
  binding: z.object({
    preimage: z.object({
      domain: z.string(),
      version: z.number(),
      session_id: z.string(),
      chain_root: z.string(),
      key_thumbprint: b64url,
      gateway_measurement: z.string().nullable(),
      policy_bundle_hash: z.string().nullable(),
      catalog_hash: z.string().nullable(),
      challenge: z.string().nullable(),
    }),
  }),
  evidence: z.object({
    provider: z.string(),
    status: z.enum(['bound', 'absent']),
    reason: z.string().nullable(),
    report_data: b64url,
    tpm: z
      .object({
        attest: b64url,
        signature: b64url,
        ak_public: b64url,
        pcr_selection: z.object({
          hash: z.literal('sha256'),
          pcrs: z.array(z.number().int().min(0).max(31)),
        }),
        pcr_values: z.record(z.string(), b64url),
        ak_cert_chain: z.array(b64url),
        ak_parent_qualified_name: b64url,
      })
      .nullable(),
    sev_snp: z
      .object({
        report: b64url,
        certs: z.array(z.object({ guid: z.string(), kind: z.string(), der: b64url })),
        source: z.string(),
      })
      .optional(),
    tdx: z.object({ quote: b64url, source: z.string() }).optional(),
    /** Checked by {@link verifyMeasurement} (a malformed one fails there, not in claim.shape). */
    measurement: z.unknown().optional(),
  }),
  claim_sequence: int0,
  prev_claim_hash: hex64.nullable(),
  signature: b64url,
});

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
}

function firstIssue(err: z.ZodError): string {
  const issue = err.issues[0];
  return issue ? `${issue.path.join('.') || '(root)'}: ${issue.message}`.slice(0, 160) : 'unknown';
}

function tryB64u(text: string): Buffer | null {
  try {
    return fromB64u(text);
  } catch {
    return null;
  }
}

function replaceCheck(checks: CheckResult[], id: string, replacement: CheckResult): void {
  const i = checks.findIndex((c) => c.id === id);
  if (i >= 0) checks[i] = replacement;
  else checks.push(replacement);
}

/**
 * Verifies a claim (parsed JSON of unknown shape) and returns the full report.
 *
 * Checks, in order (ids stable): `claim.shape`, `claim.signature` (Ed25519 over JCS(claim
 * without signature), key from cnf.jwk, RFC 8032/8037), `binding.key_thumbprint` (RFC 7638),
 * `binding.session`, `binding.chain_root`, `binding.preimage`, `binding.challenge`,
 * `binding.report_data` (thumbprint ‖ SHA-256(JCS(preimage)), design §4), `claim.sequence`,
 * `evidence.status`, then for a bound TPM claim the checks of {@link verifyTpmQuote} with
 * extraData = SHA-256(REPORT_DATA), then `evidence.anchor`, then the audit checks of
 * {@link verifyBundle} (or `audit.bundle` absent).
 *
 * `evidence.anchor` passes when `evidence.tpm.ak_cert_chain` (leaf first) certifies the quoting
 * AK and chains to a root pinned in `opts.trustStore` at `opts.now` ({@link verifyAkCertChain});
 * the verdict can then be `hardware-attested` and the root is listed in `anchors_used` by SHA-256
 * fingerprint. Without a chain (or a pinned root) the verdict is `hardware-unanchored` at best.
 * Never throws.
 */
export function verifyClaim(claim: unknown, opts: VerifyClaimOptions = {}): VerificationReport {
  const checks: CheckResult[] = [];
  const notes: string[] = [];
  const anchors: AnchorUsed[] = [];
  const report = (): VerificationReport => {
    const r: VerificationReport = { verdict: computeVerdict(checks), checks, anchors_used: anchors, notes };
    return r;
  };

  const shape = claimSchema.safeParse(claim);
  if (!shape.success) {
    checks.push(fail('claim.shape', 'CLAIM_MALFORMED', `claim does not parse: ${firstIssue(shape.error)}`));
    checks.push(fail('claim.signature', 'DEPENDENCY_FAILED', 'the claim did not parse'));
    return report();
  }
  const c = shape.data;
  // Everything signed is the claim as given (extra members included), not the zod output.
  const raw = claim as Claim;
  checks.push(pass('claim.shape', `claim v1, profile ${c.profile}`));

  // claim.signature
  {
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
    checks.push(
      reason
        ? fail('claim.signature', reason, detail)
        : pass(
            'claim.signature',
            'Ed25519 signature over JCS(claim without signature) verifies under cnf.jwk',
          ),
    );
  }

  // binding.key_thumbprint
  const pre = c.binding.preimage;
  let thumb: Buffer | null = null;
  try {
    thumb = jwkThumbprint(c.cnf.jwk);
  } catch {
    thumb = null;
  }
  if (!thumb) {
    checks.push(
      fail(
        'binding.key_thumbprint',
        'CLAIM_KEY_INVALID',
        'cannot compute the RFC 7638 thumbprint of cnf.jwk',
      ),
    );
  } else if (b64u(thumb) !== pre.key_thumbprint) {
    checks.push(
      fail(
        'binding.key_thumbprint',
        'KEY_THUMBPRINT_MISMATCH',
        `preimage key_thumbprint ${quoteUntrusted(pre.key_thumbprint, 48)} is not the RFC 7638 thumbprint ${b64u(thumb)} of cnf.jwk`,
      ),
    );
  } else {
    checks.push(
      pass('binding.key_thumbprint', 'preimage key_thumbprint is the RFC 7638 thumbprint of cnf.jwk'),
    );
  }

  // binding.session / binding.chain_root / binding.preimage
  checks.push(
    pre.session_id === c.session_id
      ? pass('binding.session', 'preimage session_id equals the claim session_id')
      : fail(
          'binding.session',
          'PREIMAGE_SESSION_MISMATCH',
          `preimage session ${quoteUntrusted(pre.session_id)} ≠ claim session ${quoteUntrusted(c.session_id)}`,
        ),
  );
  checks.push(
    pre.chain_root === c.audit_chain.root
      ? pass('binding.chain_root', 'preimage chain_root equals audit_chain.root')
      : fail(
          'binding.chain_root',
          'PREIMAGE_CHAIN_ROOT_MISMATCH',
          `preimage chain_root ${quoteUntrusted(pre.chain_root)} ≠ audit_chain.root ${c.audit_chain.root}`,
        ),
  );
  let digest: Buffer | null = null;
  {
    const fieldsDiffer = (['gateway_measurement', 'policy_bundle_hash', 'catalog_hash'] as const).filter(
      (k) => pre[k] !== c[k],
    );
    let canonErr: string | null = null;
    try {
      digest = bindingDigest(raw.binding.preimage);
    } catch (err) {
      canonErr = err instanceof Error ? err.message.slice(0, 120) : 'not canonicalisable';
    }
    if (pre.domain !== 'cmcp.session-binding' || pre.version !== 1) {
      checks.push(
        fail(
          'binding.preimage',
          'PREIMAGE_MALFORMED',
          `preimage domain/version ${quoteUntrusted(pre.domain, 40)}/${pre.version} is not cmcp.session-binding/1`,
        ),
      );
    } else if (canonErr) {
      checks.push(fail('binding.preimage', 'PREIMAGE_MALFORMED', canonErr));
    } else if (fieldsDiffer.length) {
      checks.push(
        fail(
          'binding.preimage',
          'PREIMAGE_FIELD_MISMATCH',
          `preimage ${fieldsDiffer.join(', ')} differ from the claim`,
        ),
      );
    } else {
      checks.push(
        pass('binding.preimage', 'preimage domain, version and hashed fields agree with the claim'),
      );
    }
  }

  // binding.challenge
  if (opts.expectedChallenge === undefined) {
    checks.push(
      check(
        'binding.challenge',
        'not-applicable',
        'NO_CHALLENGE_EXPECTED',
        pre.challenge === null
          ? 'no challenge expected; none bound'
          : `no challenge expected; the claim binds ${quoteUntrusted(pre.challenge, 48)} (freshness not checked)`,
      ),
    );
  } else if (pre.challenge !== opts.expectedChallenge) {
    checks.push(
      fail(
        'binding.challenge',
        'CHALLENGE_MISMATCH',
        `bound challenge ${quoteUntrusted(pre.challenge, 48)} ≠ expected ${quoteUntrusted(opts.expectedChallenge, 48)}`,
      ),
    );
  } else {
    checks.push(pass('binding.challenge', 'the binding carries the expected challenge'));
  }

  // binding.report_data
  const expectedReportData = thumb && digest ? reportData(thumb, digest) : null;
  {
    const claimed = tryB64u(c.evidence.report_data);
    if (claimed?.length !== 64) {
      checks.push(
        fail(
          'binding.report_data',
          'REPORT_DATA_MALFORMED',
          `report_data is ${claimed ? `${claimed.length} bytes` : 'not base64url'}, expected 64 bytes`,
        ),
      );
    } else if (!expectedReportData) {
      checks.push(
        fail(
          'binding.report_data',
          'DEPENDENCY_FAILED',
          'thumbprint or binding digest could not be computed',
        ),
      );
    } else if (!claimed.equals(expectedReportData)) {
      checks.push(
        fail(
          'binding.report_data',
          'REPORT_DATA_MISMATCH',
          'report_data is not key_thumbprint ‖ SHA-256(JCS(preimage))',
        ),
      );
    } else {
      checks.push(pass('binding.report_data', 'report_data = key_thumbprint ‖ SHA-256(JCS(preimage))'));
    }
  }

  // claim.sequence
  if (opts.previousClaim === undefined) {
    checks.push(check('claim.sequence', 'not-applicable', 'NO_PREVIOUS_CLAIM', 'no previous claim supplied'));
  } else {
    const prev = claimSchema.safeParse(opts.previousClaim);
    let prevHash: string | null = null;
    if (prev.success) {
      try {
        prevHash = claimHash(opts.previousClaim as Claim);
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

  // claim.policy_hash / claim.catalog_hash: pins asked for by the relying party (issue 6).
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

  // hardware evidence
  verifyEvidence(c, expectedReportData, opts, checks, notes, anchors);

  // gateway measurement: inputs → digest → claim/preimage → quoted measurement PCR
  {
    const ev = c.evidence;
    const tpm = ev.status === 'bound' && ev.provider === 'tpm' ? ev.tpm : null;
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
        quoted: passed('tpm.pcr_digest') && passed(HARDWARE_SIGNATURE_CHECK),
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
  } else {
    const bv = verifyBundle(opts.bundle, {
      chain_id: c.audit_chain.chain_id,
      session_id: c.session_id,
      root: c.audit_chain.root,
      tip: c.audit_chain.tip,
      length: c.audit_chain.length,
      transcript: c.transcript,
    });
    checks.push(...bv.checks);
    notes.push(...bv.notes);
    const r = report();
    if (bv.execution_id_groups.length) r.execution_id_groups = bv.execution_id_groups;
    return r;
  }
  return report();
}

type ParsedClaim = z.infer<typeof claimSchema>;

function verifyEvidence(
  c: ParsedClaim,
  expectedReportData: Buffer | null,
  opts: VerifyClaimOptions,
  checks: CheckResult[],
  notes: string[],
  anchors: AnchorUsed[],
): void {
  const ev = c.evidence;
  const rv = opts.referenceValues;
  const allowed = rv?.allowed_tee_types;
  if (allowed && ev.status === 'bound') {
    const tee = ev.provider === 'tpm' ? 'tpm' : ev.provider;
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
    return;
  }
  const tpm = ev.tpm;
  if ((ev.provider === 'sev-snp' && ev.sev_snp) || (ev.provider === 'tdx' && ev.tdx)) {
    verifyTeeEvidence(ev, expectedReportData, opts, checks, notes, anchors);
    return;
  }
  if (ev.provider !== 'tpm' || tpm === null) {
    checks.push(
      fail(
        'evidence.status',
        'EVIDENCE_INCOMPLETE',
        `status "bound" but no evidence this verifier can check (provider ${quoteUntrusted(ev.provider, 32)}, tpm ${tpm === null ? 'null' : 'present'})`,
      ),
    );
    for (const id of [HARDWARE_SIGNATURE_CHECK, HARDWARE_BINDING_CHECK, HARDWARE_ANCHOR_CHECK]) {
      checks.push(fail(id, 'DEPENDENCY_FAILED', 'no checkable evidence'));
    }
    return;
  }
  checks.push(pass('evidence.status', 'provider tpm reports the binding bound'));

  const attest = tryB64u(tpm.attest);
  const signature = tryB64u(tpm.signature);
  const akPublic = tryB64u(tpm.ak_public);

  // PCR values and selection from the claim
  let pcrValues: PcrValue[] | undefined = [];
  let pcrValuesProblem: string | null = null;
  for (const [k, v] of Object.entries(tpm.pcr_values)) {
    const bytes = tryB64u(v);
    if (!/^(0|[1-9]\d?)$/.test(k) || Number(k) > 31 || !bytes) {
      pcrValuesProblem = `pcr_values[${quoteUntrusted(k, 8)}] is not a PCR index with a base64url value`;
      break;
    }
    pcrValues.push({ hashAlg: TPM_ALG.SHA256, index: Number(k), value: bytes });
  }
  if (pcrValuesProblem) pcrValues = undefined;
  const pcrs = tpm.pcr_selection.pcrs;
  const rvPcrs = rv?.tpm?.required_pcrs;
  const requiredPcrs = opts.requiredPcrs ?? (rvPcrs ? [...rvPcrs].sort((a, b) => a - b) : undefined);
  const selectionOk = pcrs.every((p, i) => i === 0 || p > (pcrs[i - 1] ?? -1));

  const q = verifyTpmQuote({
    attest: attest ?? Buffer.alloc(0),
    signature: signature ?? Buffer.alloc(0),
    ak: { public: akPublic ?? Buffer.alloc(0) },
    akParentQualifiedName: tryB64u(tpm.ak_parent_qualified_name) ?? Buffer.alloc(0),
    expectedExtraData: expectedReportData ? tpmQualifyingData(expectedReportData) : Buffer.alloc(0),
    expectedExtraDataLabel: 'SHA-256(REPORT_DATA) of this claim',
    pcrValues: pcrValues ?? [],
    declaredSelection: [{ hashAlg: TPM_ALG.SHA256, pcrs }],
    ...(requiredPcrs ? { requiredSelection: [{ hashAlg: TPM_ALG.SHA256, pcrs: requiredPcrs }] } : {}),
  });
  const qc = q.checks;
  if (!attest)
    replaceCheck(
      qc,
      'tpm.attest_parse',
      fail('tpm.attest_parse', 'EVIDENCE_MALFORMED', 'attest is not base64url'),
    );
  if (!signature) {
    replaceCheck(
      qc,
      'tpm.signature_parse',
      fail('tpm.signature_parse', 'EVIDENCE_MALFORMED', 'signature is not base64url'),
    );
  }
  if (!akPublic)
    replaceCheck(
      qc,
      'tpm.ak_public',
      fail('tpm.ak_public', 'EVIDENCE_MALFORMED', 'ak_public is not base64url'),
    );
  if (!expectedReportData) {
    replaceCheck(
      qc,
      HARDWARE_BINDING_CHECK,
      fail(HARDWARE_BINDING_CHECK, 'DEPENDENCY_FAILED', 'REPORT_DATA could not be computed from the claim'),
    );
  }
  if (!selectionOk) {
    replaceCheck(
      qc,
      'tpm.pcr_selection',
      fail('tpm.pcr_selection', 'PCR_SELECTION_MALFORMED', 'pcr_selection.pcrs is not strictly ascending'),
    );
  }
  if (pcrValuesProblem)
    replaceCheck(qc, 'tpm.pcr_digest', fail('tpm.pcr_digest', 'PCR_VALUES_MALFORMED', pcrValuesProblem));
  checks.push(...qc);

  // expected PCR values (reference values)
  const pins = rv?.tpm?.pcrs;
  if (pins) checks.push(pcrPinsCheck(pins, pcrValues ?? [], checks));

  // AK anchor: the AK certificate chain (leaf first) to a pinned root
  const certs: Cert[] = [];
  let malformed: CheckResult | null = null;
  for (const [i, text] of tpm.ak_cert_chain.entries()) {
    const der = tryB64u(text);
    try {
      if (!der) throw new CertError('AK_CHAIN_MALFORMED', 'not base64url');
      certs.push(parseCert(der));
    } catch (err) {
      malformed = fail(
        HARDWARE_ANCHOR_CHECK,
        'AK_CHAIN_MALFORMED',
        `ak_cert_chain[${i}] is not a DER certificate (${err instanceof Error ? err.message.slice(0, 80) : 'error'})`,
      );
      break;
    }
  }
  if (malformed) checks.push(malformed);
  else {
    const a = verifyAkCertChain({
      certs,
      akKey: q.akPublic?.key,
      trustStore: opts.trustStore ?? EMPTY_TRUST_STORE,
      at: opts.now ?? new Date(),
    });
    checks.push(a.check);
    if (a.anchor) anchors.push(a.anchor);
  }
  const anchor = checks[checks.length - 1];
  if (anchor && anchor.status !== 'pass') {
    notes.push(
      `The AK is NOT anchored to a pinned root (${anchor.reason_code}): ${
        certs.length === 0
          ? 'the claim carries no AK certificate chain, so no chain was validated and hardware-attested is not reachable. '
          : 'its certificate chain does not end at a root pinned in the trust store. '
      }A valid quote then yields hardware-unanchored: it shows a TPM-format key signed the binding, not which TPM or platform holds that key.`,
    );
  }
}

/**
 * SEV-SNP / TDX evidence of a claim: the report / quote must carry exactly this claim's
 * REPORT_DATA (`evidence.binding`), and is verified like raw evidence (signature, certificate
 * chain to the pinned AMD ARK / Intel root, platform policy from the reference values).
 * Collateral is not carried in claims, so the TDX TCB status is reported as unknown.
 */
function verifyTeeEvidence(
  ev: ParsedClaim['evidence'],
  expectedReportData: Buffer | null,
  opts: VerifyClaimOptions,
  checks: CheckResult[],
  notes: string[],
  anchors: AnchorUsed[],
): void {
  checks.push(pass('evidence.status', `provider ${ev.provider} reports the binding bound`));
  const trustStore = opts.trustStore ?? EMPTY_TRUST_STORE;
  const at = opts.now ?? new Date();
  const common = {
    trustStore,
    at,
    expectedReportData: expectedReportData ?? Buffer.alloc(0),
    ...(opts.referenceValues ? { referenceValues: opts.referenceValues } : {}),
  };
  let result: { checks: CheckResult[]; anchors: AnchorUsed[]; notes?: string[] };
  if (ev.provider === 'sev-snp' && ev.sev_snp) {
    const report = tryB64u(ev.sev_snp.report);
    const certs = ev.sev_snp.certs.map((c) => tryB64u(c.der));
    result = verifySnpReport({
      ...common,
      report: report ?? Buffer.alloc(0),
      certs: certs.map((c) => c ?? Buffer.from('not base64url')),
    });
    if (!report)
      replaceCheck(
        result.checks,
        'snp.report_parse',
        fail('snp.report_parse', 'EVIDENCE_MALFORMED', 'report is not base64url'),
      );
  } else {
    const quote = tryB64u(ev.tdx?.quote ?? '');
    result = verifyTdxQuote({ ...common, quote: quote ?? Buffer.alloc(0) });
    if (!quote)
      replaceCheck(
        result.checks,
        'tdx.quote_parse',
        fail('tdx.quote_parse', 'EVIDENCE_MALFORMED', 'quote is not base64url'),
      );
  }
  if (!expectedReportData) {
    replaceCheck(
      result.checks,
      HARDWARE_BINDING_CHECK,
      fail(HARDWARE_BINDING_CHECK, 'DEPENDENCY_FAILED', 'REPORT_DATA could not be computed from the claim'),
    );
  }
  checks.push(...result.checks);
  anchors.push(...result.anchors);
  notes.push(...(result.notes ?? []));
  const anchor = checks.find((c) => c.id === HARDWARE_ANCHOR_CHECK);
  if (anchor && anchor.status !== 'pass') {
    notes.push(
      `The ${ev.provider} signing key is NOT anchored to a pinned root (${anchor.reason_code}): the verdict is hardware-unanchored at best.`,
    );
  }
}
