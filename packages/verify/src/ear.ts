/**
 * A verification report as an EAT Attestation Result (EAR) claims-set: one appraisal (submodule)
 * per concern of a cmcp claim — `platform`, `gateway`, `audit`, `policy` — each with an AR4SI
 * trustworthiness vector computed from the report's checks, and `ear.status` the worst tier of
 * its vector. Pure mapping: signing is ear-jwt.ts, reading files is the CLI's.
 *
 * Sources: draft-ietf-rats-ear-03 §3 (claims-set, `cddl/ear.cddl`, `cddl/ear-appraisal.cddl`),
 * draft-ietf-rats-ar4si (`cddl/ar4si.cddl` of the EAR draft: claim names, values -128..127,
 * tiers), and the profile Veraison's `ear` library and Trustee accept
 * (`tag:github.com,2023:veraison/ear`, dotted claim names). The mapping table is documented in
 * docs/verification.md ("EAR output").
 */
import { b64u } from './format/canonical.js';
import type { CheckResult, VerificationReport } from './result.js';

/** AR4SI trustworthiness tiers (draft-ietf-rats-ar4si, "Enumeration Encoding"; EAR `ear.status`). */
export type TrustTier = 'none' | 'affirming' | 'warning' | 'contraindicated';

/** The eight AR4SI trustworthiness claims (draft-ietf-rats-ar4si, "Specific Claims"; `ar4si.cddl`). */
export const TRUST_CLAIMS = [
  'instance-identity',
  'configuration',
  'executables',
  'file-system',
  'hardware',
  'runtime-opaque',
  'storage-opaque',
  'sourced-data',
] as const;
/** One AR4SI trustworthiness claim name. */
export type TrustClaimName = (typeof TRUST_CLAIMS)[number];

/**
 * The claim values this mapping emits (draft-ietf-rats-ar4si, "Specific Claims"; each of the eight
 * claims defines 0, 2, 96 and 99 with these meanings): 0 no assertion, 2 affirming (approved /
 * genuine / recognized), 96 contraindicated, 99 "cryptographic validation of the Evidence has
 * failed". For "part of what this claim needs was not supplied" AR4SI enumerates a value only for
 * `configuration` (36: "elements of the configuration relevant to security are unavailable");
 * elsewhere the draft's non-standard warning band (-33..-96) carries it, as -33 ("Assigning a
 * Trustworthiness Claim value": a standard value only where one applies).
 */
export const TRUST_VALUE = {
  NONE: 0,
  AFFIRMING: 2,
  CONFIG_UNAVAILABLE: 36,
  UNCHECKED: -33,
  CONTRAINDICATED: 96,
  CRYPTO_FAILED: 99,
} as const;

/** The submodules of a cmcp EAR (the labelling scheme the draft asks a verifier to document). */
export const EAR_SUBMODS = ['platform', 'gateway', 'audit', 'policy'] as const;
/** One submodule label. */
export type EarSubmod = (typeof EAR_SUBMODS)[number];

/**
 * The tier of a trustworthiness claim value (draft-ietf-rats-ar4si, "Enumeration Encoding"): none
 * -1..1, affirming 2..31 and -2..-32, warning 32..95 and -33..-96, contraindicated 96..127 and
 * -97..-128.
 */
export function tierOf(value: number): TrustTier {
  const a = Math.abs(value);
  if (a <= 1) return 'none';
  if (value >= 2 ? a <= 31 : a <= 32) return 'affirming';
  if (value >= 2 ? a <= 95 : a <= 96) return 'warning';
  return 'contraindicated';
}

/** Where a check's outcome lands: a submodule and one of its trustworthiness claims. */
export interface EarTarget {
  submod: EarSubmod;
  claim: TrustClaimName;
}

/**
 * Check id → (submodule, claim), first match wins; a pattern ending in `.` matches the prefix.
 * Every check lands somewhere: the last rule takes any id no other rule names.
 */
export const EAR_MAPPING: readonly (EarTarget & { ids: readonly string[] })[] = [
  // platform: the TEE / TPM evidence itself
  { submod: 'platform', claim: 'instance-identity', ids: ['evidence.binding'] },
  {
    submod: 'platform',
    claim: 'configuration',
    ids: ['policy.tee_type', 'snp.debug', 'snp.vmpl', 'snp.host_data', 'tdx.debug', 'tpm.pcr_policy'],
  },
  {
    submod: 'platform',
    claim: 'executables',
    ids: ['tpm.pcr_values', 'snp.measurement', 'tdx.rtmr', 'eventlog.'],
  },
  {
    submod: 'platform',
    claim: 'hardware',
    ids: ['evidence.', 'tpm.', 'snp.', 'tdx.', 'azure.'],
  },
  // gateway: the signed claim, its key's binding, and the gateway measurement
  { submod: 'gateway', claim: 'executables', ids: ['measurement.'] },
  // audit: the hardware-bound audit chain and the bundle of its entries
  { submod: 'audit', claim: 'file-system', ids: ['audit.', 'claim.sequence'] },
  // policy: the relying party's pins on the policy bundle and catalog
  { submod: 'policy', claim: 'configuration', ids: ['claim.policy_hash', 'claim.catalog_hash'] },
  // gateway: the claim itself (claim.signature, claim.shape, binding.*, replicas.*) and any check
  // no rule above names, so that no failure goes unreported
  { submod: 'gateway', claim: 'instance-identity', ids: [''] },
];

/** The check that states whose key signed the claim (not mapped to a vector claim). */
const SIGNER_CHECK_ID = 'claim.signer';

/** The submodule and claim a check id maps to (see {@link EAR_MAPPING}). */
export function earTargetOf(checkId: string): EarTarget {
  for (const rule of EAR_MAPPING) {
    if (rule.ids.some((p) => (p === '' || p.endsWith('.') ? checkId.startsWith(p) : checkId === p))) {
      return { submod: rule.submod, claim: rule.claim };
    }
  }
  /* c8 ignore next */
  return { submod: 'gateway', claim: 'instance-identity' };
}

/** The claims each submodule always carries (value 0 when no check informed it). */
const SUBMOD_CLAIMS: Record<EarSubmod, readonly TrustClaimName[]> = {
  platform: ['instance-identity', 'configuration', 'executables', 'hardware'],
  gateway: ['instance-identity', 'executables'],
  audit: ['file-system'],
  policy: ['configuration'],
};

/** A signature that does not verify: AR4SI's "cryptographic validation failed" (99). */
function cryptoFailure(c: CheckResult): boolean {
  return /SIGNATURE_INVALID$/.test(c.reason_code);
}

/**
 * A check that failed only because an input it needs failed an earlier check: the earlier check's
 * claim is contraindicated; this one's loses its affirmation (it counts as unchecked), so the
 * blame lands where the fault is.
 */
function dependencyOnly(c: CheckResult): boolean {
  return c.status === 'fail' && c.reason_code === 'DEPENDENCY_FAILED';
}

/**
 * The value of trustworthiness claim `claim` from the checks that map to it:
 * any `fail` (other than `DEPENDENCY_FAILED`) → 99 (a signature that does not verify) or 96;
 * else `pass` with `absent` or `DEPENDENCY_FAILED` → warning, 36 for `configuration` and -33
 * elsewhere (part of what this claim needs went unchecked); else any `pass` → 2; else 0 (no
 * claim: only `absent` or `not-applicable` checks, or none at all).
 */
export function claimValue(claim: TrustClaimName, checks: readonly CheckResult[]): number {
  const failed = checks.filter((c) => c.status === 'fail' && !dependencyOnly(c));
  if (failed.length > 0) {
    return failed.some(cryptoFailure) ? TRUST_VALUE.CRYPTO_FAILED : TRUST_VALUE.CONTRAINDICATED;
  }
  const passed = checks.some((c) => c.status === 'pass');
  const absent = checks.some((c) => c.status === 'absent' || dependencyOnly(c));
  if (passed && absent) {
    return claim === 'configuration' ? TRUST_VALUE.CONFIG_UNAVAILABLE : TRUST_VALUE.UNCHECKED;
  }
  if (passed) return TRUST_VALUE.AFFIRMING;
  return TRUST_VALUE.NONE;
}

const TIER_ORDER: readonly TrustTier[] = ['affirming', 'warning', 'contraindicated'];

/**
 * `ear.status` of a vector: its worst tier, where a `none` claim ("no claim being made") does not
 * lower it; `none` when every claim is `none` (draft-ietf-rats-ear-03 §3.1: no higher trust than
 * the worst trustworthiness claim).
 */
export function statusOf(values: Iterable<number>): TrustTier {
  let worst = -1;
  for (const v of values) worst = Math.max(worst, TIER_ORDER.indexOf(tierOf(v)));
  return worst < 0 ? 'none' : (TIER_ORDER[worst] as TrustTier);
}

/** One submodule's appraisal, before serialisation. */
export interface EarAppraisal {
  status: TrustTier;
  vector: Partial<Record<TrustClaimName, number>>;
  /** `id:REASON` of each check that kept a claim below affirming (fail or absent), in report order. */
  reasons: string[];
}

/** Appraises every submodule from the report's checks (see {@link EAR_MAPPING}). */
export function earAppraisals(report: Pick<VerificationReport, 'checks'>): Record<EarSubmod, EarAppraisal> {
  const byTarget = new Map<string, CheckResult[]>();
  for (const c of report.checks) {
    // The relying party's acceptance of the signer is a decision over the other checks and its
    // own pinned keys, not evidence about a component: it travels as `cmcp.signer`.
    if (c.id === SIGNER_CHECK_ID) continue;
    const t = earTargetOf(c.id);
    const key = `${t.submod}/${t.claim}`;
    byTarget.set(key, [...(byTarget.get(key) ?? []), c]);
  }
  const out = {} as Record<EarSubmod, EarAppraisal>;
  for (const submod of EAR_SUBMODS) {
    const vector: Partial<Record<TrustClaimName, number>> = {};
    const reasons: string[] = [];
    for (const claim of SUBMOD_CLAIMS[submod]) {
      const checks = byTarget.get(`${submod}/${claim}`) ?? [];
      vector[claim] = claimValue(claim, checks);
      for (const c of checks) {
        if (c.status === 'fail' || c.status === 'absent') reasons.push(`${c.id}:${c.reason_code}`);
      }
    }
    out[submod] = { status: statusOf(Object.values(vector)), vector, reasons };
  }
  return out;
}

/**
 * The two serialisations a cmcp EAR can take:
 * - `veraison`: `eat_profile` `tag:github.com,2023:veraison/ear` with dotted claim names
 *   (`ear.status`, `ear.trustworthiness-vector`, `ear.verifier-id`, `ear.appraisal-policy-id`) —
 *   what Veraison's `ear` libraries (Go, Rust, C) and Trustee parse today;
 * - `ietf-03`: draft-ietf-rats-ear-03, `eat_profile` `tag:ietf.org,2026:rats/ear#03` with
 *   underscore names (`ear_status`, `ear_trustworthiness_vector`, `ear_verifier_id`,
 *   `ear_appraisal_policy_ids` as a list) and a top-level `ear_status`.
 */
export type EarProfile = 'veraison' | 'ietf-03';
/** The `eat_profile` value of each {@link EarProfile}. */
export const EAR_PROFILE_URI: Record<EarProfile, string> = {
  veraison: 'tag:github.com,2023:veraison/ear',
  'ietf-03': 'tag:ietf.org,2026:rats/ear#03',
};

/** Identifier of the mapping above, sent as each appraisal's policy id. */
export const EAR_APPRAISAL_POLICY_ID = 'cmcp-verify:ear-mapping/1';

/** Options of {@link earClaimsSet}. */
export interface EarClaimsOptions {
  profile?: EarProfile;
  /** `ear.verifier-id` (draft-ietf-rats-ar4si verifier-id): who built the verifier and which build it is. */
  verifierId: { developer: string; build: string };
  /** Issue time (`iat`, whole seconds since the epoch); default now. */
  issuedAt?: number;
  /**
   * SHA-256 digests of the inputs appraised (e.g. `claim`, `audit-bundle`), sent as the extension
   * claim `cmcp.raw-evidence-digest` — not as `ear.raw-evidence`, which the draft defines as the
   * unabridged evidence itself.
   */
  evidenceDigests?: Record<string, Uint8Array>;
}

/**
 * The EAR claims-set of a verification report (draft-ietf-rats-ear-03 §3, in the chosen profile's
 * claim names), with extension claims (§4, collision-resistant names): `cmcp.verdict` (the
 * report's verdict), `cmcp.signer` and `cmcp.accepted` (whose key signed the claim and whether the
 * relying party's policy accepted it) and `cmcp.raw-evidence-digest`; each appraisal carries
 * `cmcp.reasons`.
 */
export function earClaimsSet(report: VerificationReport, opts: EarClaimsOptions): Record<string, unknown> {
  const profile = opts.profile ?? 'veraison';
  const ietf = profile === 'ietf-03';
  const name = (dotted: string) => (ietf ? dotted.replace(/[.-]/g, '_') : dotted);
  const appraisals = earAppraisals(report);
  const submods: Record<string, unknown> = {};
  for (const s of EAR_SUBMODS) {
    const a = appraisals[s];
    submods[s] = {
      [name('ear.status')]: a.status,
      [name('ear.trustworthiness-vector')]: a.vector,
      ...(ietf
        ? { ear_appraisal_policy_ids: [EAR_APPRAISAL_POLICY_ID] }
        : { 'ear.appraisal-policy-id': EAR_APPRAISAL_POLICY_ID }),
      'cmcp.reasons': a.reasons,
    };
  }
  const claims: Record<string, unknown> = {
    eat_profile: EAR_PROFILE_URI[profile],
    iat: opts.issuedAt ?? Math.floor(Date.now() / 1000),
    [name('ear.verifier-id')]: { developer: opts.verifierId.developer, build: opts.verifierId.build },
    submods,
    'cmcp.verdict': report.verdict,
    ...(report.signer !== undefined ? { 'cmcp.signer': report.signer } : {}),
    ...(report.accepted !== undefined ? { 'cmcp.accepted': report.accepted } : {}),
  };
  if (ietf) claims.ear_status = overallStatus(EAR_SUBMODS.map((s) => appraisals[s].status));
  if (opts.evidenceDigests && Object.keys(opts.evidenceDigests).length > 0) {
    const d: Record<string, string> = { alg: 'sha-256' };
    for (const [k, v] of Object.entries(opts.evidenceDigests)) d[k] = b64u(v);
    claims['cmcp.raw-evidence-digest'] = d;
  }
  return claims;
}

/**
 * The top-level status (draft-ietf-rats-ear-03 §3: no higher trust than the worst submodule):
 * contraindicated, else warning, else `none` when any submodule made no claim, else affirming.
 * Stricter than a submodule's status: an EAR with an unappraised concern is not affirming overall.
 */
export function overallStatus(statuses: readonly TrustTier[]): TrustTier {
  for (const t of ['contraindicated', 'warning', 'none'] as const) if (statuses.includes(t)) return t;
  return 'affirming';
}
