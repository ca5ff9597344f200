/**
 * The claim shapes as the verifier reads them (zod; packages/verify/src/format/claim.ts `Claim`
 * and `TreeHeadClaim` are the producer's types): version 1 in its two profiles, `/1`
 * ({@link claimSchema}, exactly what verifiers before replicas accept) and `/2`
 * ({@link replicasClaimSchema}: the same members and `replicas`, docs/spec/claims.md#replicas),
 * and version 2 (tree head instead of transcript, docs/spec/claims.md#claim-version-2) in the
 * same two profiles. Extra members are tolerated but signed.
 */
import { z } from 'zod';
import { CLAIM_PROFILE, CLAIM_VERSION_TREE_HEAD } from './format/claim.js';
import { CLAIM_PROFILE_REPLICAS } from './format/replica.js';

const b64url = z.string().regex(/^[A-Za-z0-9_-]*$/, 'not unpadded base64url');
const hex64 = z.string().regex(/^[0-9a-f]{64}$/, 'not 64 lowercase hex');
const int0 = z.number().int().min(0);

const ed25519Jwk = z.object({ kty: z.literal('OKP'), crv: z.literal('Ed25519'), x: b64url });

/** The members of both profiles; `profile` is narrowed by {@link claimSchema} and {@link replicasClaimSchema}. */
const claimBodySchema = z.object({
  claim_version: z.literal(1),
  profile: z.enum([CLAIM_PROFILE, CLAIM_PROFILE_REPLICAS]),
  issued_at: z.string(),
  session_id: z.string(),
  agent_id: z.string(),
  gateway_measurement: z.string().nullable(),
  policy_bundle_hash: z.string().nullable(),
  enforcement_mode: z.string(),
  catalog_hash: z.string().nullable(),
  cnf: z.object({ jwk: ed25519Jwk }),
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
  /** Absent in claims issued before entry counts (docs/spec/claims.md#entry-counts). */
  entry_counts: z.record(z.string(), int0).optional(),
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
      /** Absent in preimages made before it (docs/spec/binding.md#binding-preimage). */
      opened_after_claim: int0.nullable().optional(),
    }),
    /**
     * A batched binding (docs/spec/binding.md#batched-bindings); absent in single-binding claims.
     * Index and size are range-checked by binding.inclusion (their own reasons), not here.
     */
    batch: z
      .object({
        leaf_index: z.number(),
        tree_size: z.number(),
        root: hex64,
        audit_path: z.array(hex64).max(64),
      })
      .optional(),
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
    /** Azure CVM (provider `azure-cvm`): the HCL report and its hardware evidence; the quote is `tpm`. */
    azure_hcl: z
      .object({
        report: b64url,
        certs: z.array(z.object({ kind: z.string(), der: b64url })),
        td_quote: b64url.optional(),
        source: z.string(),
      })
      .optional(),
    /** Checked by {@link verifyMeasurement} (a malformed one fails there, not in claim.shape). */
    measurement: z.unknown().optional(),
  }),
  claim_sequence: int0,
  prev_claim_hash: hex64.nullable(),
  signature: b64url,
});

/** zod schema of a claim v1 `/1` (packages/verify/src/format/claim.ts `Claim`). Extra members are tolerated but signed. */
export const claimSchema = claimBodySchema.extend({ profile: z.literal(CLAIM_PROFILE) });

/** One `replicas[]` member of a `/2` claim (format/replica.ts ReplicaMember). */
export const replicaMemberSchema = z.object({
  replica_id: z.string(),
  lease_token: int0,
  cnf: z.object({ jwk: ed25519Jwk }),
  binding: z.object({
    preimage: z.object({
      domain: z.string(),
      version: z.number(),
      replica_id: z.string(),
      lease_token: z.number(),
      key_thumbprint: b64url,
      gateway_measurement: z.string().nullable(),
      policy_bundle_hash: z.string().nullable(),
      catalog_hash: z.string().nullable(),
    }),
  }),
  evidence: claimBodySchema.shape.evidence,
});

/** zod schema of a claim `/2`: every `/1` member and the chain's writers (docs/spec/claims.md#replicas). */
export const replicasClaimSchema = claimBodySchema.extend({
  profile: z.literal(CLAIM_PROFILE_REPLICAS),
  replicas: z.array(replicaMemberSchema).min(1).max(256),
});

/**
 * The members of a claim version 2 (docs/spec/claims.md#claim-version-2): no transcript, the
 * session chain's final tree head, entry counts required.
 */
const treeHeadBodySchema = claimBodySchema.omit({ transcript: true }).extend({
  claim_version: z.literal(CLAIM_VERSION_TREE_HEAD),
  tree_head: z.object({ size: z.number().int().min(1), root: hex64 }),
  entry_counts: z.record(z.string(), int0),
});

/** zod schema of a claim version 2, profile `/1`. */
export const treeHeadClaimSchema = treeHeadBodySchema.extend({ profile: z.literal(CLAIM_PROFILE) });

/** zod schema of a claim version 2, profile `/2` (replicas). */
export const treeHeadReplicasClaimSchema = treeHeadBodySchema.extend({
  profile: z.literal(CLAIM_PROFILE_REPLICAS),
  replicas: replicasClaimSchema.shape.replicas,
});

/** A claim of either version and profile ({@link anyClaimSchema}). */
export const anyClaimSchema = z.union([
  claimSchema,
  replicasClaimSchema,
  treeHeadClaimSchema,
  treeHeadReplicasClaimSchema,
]);

/**
 * The schema a claim is read with, chosen by its `claim_version` and `profile` (so a parse error
 * names the member that is wrong for that version, not a union's first miss).
 */
export function claimSchemaFor(claim: unknown): z.ZodType<ParsedClaim> {
  const c = claim as { claim_version?: unknown; profile?: unknown } | null;
  const replicas = c?.profile === CLAIM_PROFILE_REPLICAS;
  if (c?.claim_version === CLAIM_VERSION_TREE_HEAD)
    return (replicas ? treeHeadReplicasClaimSchema : treeHeadClaimSchema) as z.ZodType<ParsedClaim>;
  return (replicas ? replicasClaimSchema : claimSchema) as z.ZodType<ParsedClaim>;
}

/**
 * A claim that passed one of the schemas: version 1 carries `transcript`, version 2 `tree_head`
 * (docs/spec/claims.md#claim-version-2).
 */
export type ParsedClaim = Omit<z.infer<typeof claimBodySchema>, 'claim_version' | 'transcript'> & {
  claim_version: 1 | typeof CLAIM_VERSION_TREE_HEAD;
  transcript?: z.infer<typeof claimBodySchema>['transcript'];
  tree_head?: { size: number; root: string };
  replicas?: ParsedReplica[];
};
/** A `replicas[]` member that passed {@link replicaMemberSchema}. */
export type ParsedReplica = z.infer<typeof replicaMemberSchema>;
/** The `evidence` member of a parsed claim. */
export type ClaimEvidence = ParsedClaim['evidence'];
/** zod schema of a claim's `evidence` section (also the evidence of a TLS binding). */
export const claimEvidenceSchema = claimBodySchema.shape.evidence;
