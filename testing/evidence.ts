/**
 * Test-side builders for claims and their evidence, shared by the verify-* tests: TPM wire
 * encoders, a software "TPM" (a P-256 AK with its TPMT_PUBLIC, Name and qualified name), a
 * TPMS_ATTEST quote and its ECDSA TPMT_SIGNATURE, a real audit hash chain and bundle, and an
 * Ed25519-signed claim around a session binding. Everything here is written from the specs
 * (TPM 2.0 Part 1/2, docs/attestation.md), independent of the parsers under test.
 */
import { createHash, generateKeyPairSync, type KeyObject, randomUUID, sign } from 'node:crypto';
import {
  type AuditBundle,
  type AuditEntryBody,
  type BundleEntry,
  b64u,
  bindingDigest,
  CLAIM_PROFILE,
  type Claim,
  ed25519PublicJwk,
  hashEntryBody,
  jwkThumbprint,
  reportData,
  type SessionBindingPreimage,
  signClaim,
  type UnsignedClaim,
} from '@cmcp/verify/formats';

// ---------- TPM wire encoders ----------

/** A big-endian UINT16. */
export const u16 = (n: number): Buffer => {
  const b = Buffer.alloc(2);
  b.writeUInt16BE(n);
  return b;
};

/** A big-endian UINT32 (`n` taken modulo 2^32). */
export const u32 = (n: number): Buffer => {
  const b = Buffer.alloc(4);
  b.writeUInt32BE(n >>> 0);
  return b;
};

/** A TPM2B: UINT16 size followed by the bytes. */
export const tpm2b = (b: Uint8Array): Buffer => Buffer.concat([u16(b.length), b]);

/** TPM_RH_ENDORSEMENT: the qualified name of the endorsement hierarchy (a primary AK's parent). */
export const ENDORSEMENT_QN = Buffer.from('4000000b', 'hex');

/** AK objectAttributes: fixedTPM|fixedParent|sensitiveDataOrigin|userWithAuth|restricted|sign. */
export const AK_ATTRS = 0x00050072;

/**
 * TPMT_PUBLIC of an ECC NIST P-256 signing key (nameAlg SHA-256, no authPolicy, symmetric NULL,
 * kdf NULL).
 * @param pub the P-256 public key
 * @param attrs objectAttributes (default {@link AK_ATTRS})
 * @param scheme signing scheme algorithm (default TPM_ALG_ECDSA 0x0018)
 * @param hash the scheme's hash algorithm (default TPM_ALG_SHA256 0x000b)
 */
export function eccAkPublic(pub: KeyObject, attrs = AK_ATTRS, scheme = 0x0018, hash = 0x000b): Buffer {
  const jwk = pub.export({ format: 'jwk' }) as { x: string; y: string };
  return Buffer.concat([
    u16(0x0023), // TPM_ALG_ECC
    u16(0x000b), // nameAlg sha256
    u32(attrs),
    tpm2b(Buffer.alloc(0)),
    u16(0x0010), // symmetric NULL
    u16(scheme),
    u16(hash),
    u16(0x0003), // NIST P-256
    u16(0x0010), // kdf NULL
    tpm2b(Buffer.from(jwk.x, 'base64url')),
    tpm2b(Buffer.from(jwk.y, 'base64url')),
  ]);
}

/**
 * The SHA-256 Name of a TPMT_PUBLIC and its qualified name under `parentQn`:
 * QN = nameAlg ‖ H(parentQN ‖ Name) (Part 1 §16).
 */
export function akNames(
  akPublic: Buffer,
  parentQn: Buffer = ENDORSEMENT_QN,
): { name: Buffer; qualifiedName: Buffer } {
  const name = Buffer.concat([u16(0x000b), createHash('sha256').update(akPublic).digest()]);
  const qualifiedName = Buffer.concat([
    u16(0x000b),
    createHash('sha256').update(parentQn).update(name).digest(),
  ]);
  return { name, qualifiedName };
}

/** A software AK: its private key, TPMT_PUBLIC, Name and qualified name. */
export interface SoftTpm {
  priv: KeyObject;
  akPublic: Buffer;
  name: Buffer;
  qualifiedName: Buffer;
}

/** A fresh P-256 AK as a primary key in the endorsement hierarchy. */
export function softTpm(): SoftTpm {
  const { privateKey, publicKey } = generateKeyPairSync('ec', { namedCurve: 'P-256' });
  const akPublic = eccAkPublic(publicKey);
  return { priv: privateKey, akPublic, ...akNames(akPublic) };
}

/** The 3-byte PCR select bitmap of `pcrs` (PCRs 0..23). */
export function selectBytes(pcrs: number[]): Buffer {
  const b = Buffer.alloc(3);
  for (const p of pcrs) b[p >> 3] = (b[p >> 3] ?? 0) | (1 << (p & 7));
  return b;
}

/** The fields of a TPM_ST_ATTEST_QUOTE over one SHA-256 PCR bank. */
export interface QuoteFields {
  qualifiedName: Buffer;
  extraData: Buffer;
  pcrs: number[];
  /** The quoted pcrDigest. */
  pcrDigest: Buffer;
  /** clockInfo.clock (default 0). */
  clock?: bigint;
  /** clockInfo.resetCount (default 2). */
  resetCount?: number;
  /** firmwareVersion, 8 bytes (default eight 0x01 bytes). */
  firmwareVersion?: Buffer;
}

/** A TPMS_ATTEST of type quote (magic TPM_GENERATED, restartCount 0, safe). */
export function quoteAttest(f: QuoteFields): Buffer {
  const clock = Buffer.alloc(8);
  clock.writeBigUInt64BE(f.clock ?? 0n);
  return Buffer.concat([
    u32(0xff544347), // TPM_GENERATED_VALUE
    u16(0x8018), // TPM_ST_ATTEST_QUOTE
    tpm2b(f.qualifiedName),
    tpm2b(f.extraData),
    clock,
    u32(f.resetCount ?? 2),
    u32(0),
    Buffer.from([1]),
    f.firmwareVersion ?? Buffer.alloc(8, 1),
    u32(1),
    u16(0x000b),
    Buffer.from([3]),
    selectBytes(f.pcrs),
    tpm2b(f.pcrDigest),
  ]);
}

/** The TPMT_SIGNATURE (ECDSA, SHA-256) of `attest` by `priv`. */
export function signQuote(attest: Buffer, priv: KeyObject): Buffer {
  const p1363 = sign('sha256', attest, { key: priv, dsaEncoding: 'ieee-p1363' });
  return Buffer.concat([u16(0x0018), u16(0x000b), tpm2b(p1363.subarray(0, 32)), tpm2b(p1363.subarray(32))]);
}

/** A quote by a software AK: {@link quoteAttest} with its qualified name, and its signature. */
export function softQuote(
  tpm: SoftTpm,
  f: Omit<QuoteFields, 'qualifiedName'>,
): { attest: Buffer; signature: Buffer } {
  const attest = quoteAttest({ ...f, qualifiedName: tpm.qualifiedName });
  return { attest, signature: signQuote(attest, tpm.priv) };
}

// ---------- claim evidence ----------

/** A claim's `evidence` when the software provider made no hardware binding (status absent). */
export function softwareEvidence(reportData: Buffer): Claim['evidence'] {
  return {
    provider: 'software',
    status: 'absent',
    reason: 'SOFTWARE_PROVIDER',
    report_data: b64u(reportData),
    tpm: null,
  };
}

/** The parts of a TPM quote a claim carries as `evidence.tpm`. */
export interface TpmEvidenceParts {
  reportData: Buffer;
  /** The TPMS_ATTEST bytes the AK signed. */
  attest: Buffer;
  /** The TPMT_SIGNATURE. */
  signature: Buffer;
  /** The AK's TPMT_PUBLIC. */
  akPublic: Buffer;
  /** The quoted sha256-bank PCRs, ascending. */
  pcrs: number[];
  /** The value the claim lists for PCR `pcr`. */
  pcrValue: (pcr: number) => Buffer;
  /** Qualified Name of the AK's parent (default {@link ENDORSEMENT_QN}). */
  parentQualifiedName?: Buffer;
  /** base64url DER certificates, leaf first (default none). */
  akCertChain?: string[];
}

/** A claim's `evidence` bound by a TPM quote (provider tpm, status bound), byte strings base64url. */
export function tpmEvidence(p: TpmEvidenceParts): Claim['evidence'] {
  return {
    provider: 'tpm',
    status: 'bound',
    reason: null,
    report_data: b64u(p.reportData),
    tpm: {
      attest: b64u(p.attest),
      signature: b64u(p.signature),
      ak_public: b64u(p.akPublic),
      pcr_selection: { hash: 'sha256', pcrs: p.pcrs },
      pcr_values: Object.fromEntries(p.pcrs.map((i) => [String(i), b64u(p.pcrValue(i))])),
      ak_parent_qualified_name: b64u(p.parentQualifiedName ?? ENDORSEMENT_QN),
      ak_cert_chain: p.akCertChain ?? [],
    },
  };
}

// ---------- audit chain ----------

/**
 * An audit entry body at `seq` of session `sessionId`: `session_open` at 0, an allowed,
 * completed `echo` tool call after.
 */
export function entryBody(
  sessionId: string,
  seq: number,
  prev: string,
  over: Partial<AuditEntryBody> = {},
): AuditEntryBody {
  return {
    entry_version: 1,
    entry_id: randomUUID(),
    chain_id: sessionId,
    sequence_number: seq,
    timestamp_utc: `2026-11-30T12:00:${String(seq).padStart(2, '0')}.000001Z`,
    entry_type: seq === 0 ? 'session_open' : 'tool_call',
    session_id: sessionId,
    call_id: seq === 0 ? null : randomUUID(),
    agent_id: 'agent-a',
    workflow_id: null,
    execution_id: null,
    tool_name: seq === 0 ? null : 'echo',
    server_identity: seq === 0 ? null : 'everything',
    policy_decision: seq === 0 ? null : 'allow',
    policy_rule_matched: null,
    disposition: seq === 0 ? null : 'completed',
    error_code: null,
    latency_us: seq === 0 ? null : 1200 + seq,
    request_payload_hash: null,
    response_payload_hash: null,
    detail: null,
    prev_entry_hash: prev,
    ...over,
  };
}

/**
 * A real chain of `n` entries; entries 2 and 4 share execution_id "exec-1".
 * @param salt when set, put in every entry's `detail` (another chain of the same shape)
 */
export function makeChain(
  sessionId: string,
  n: number,
  salt = '',
): { entries: BundleEntry[]; bodies: AuditEntryBody[] } {
  const entries: BundleEntry[] = [];
  const bodies: AuditEntryBody[] = [];
  let prev = 'genesis';
  for (let seq = 0; seq < n; seq++) {
    const over: Partial<AuditEntryBody> = {};
    if (seq === 2 || seq === 4) over.execution_id = 'exec-1';
    if (salt) over.detail = { salt };
    const body = entryBody(sessionId, seq, prev, over);
    const { canonical, entry_hash } = hashEntryBody(body);
    entries.push({ canonical, entry_hash });
    bodies.push(body);
    prev = entry_hash;
  }
  return { entries, bodies };
}

/** An audit bundle of `entries` for session `sessionId`. */
export function bundleOf(sessionId: string, entries: BundleEntry[]): AuditBundle {
  return {
    bundle_version: 1,
    chain_id: sessionId,
    session_id: sessionId,
    exported_at: '2026-11-30T13:00:00Z',
    entries,
  };
}

// ---------- session binding and claim ----------

/** A gateway's Ed25519 key for one session, its binding preimage and REPORT_DATA. */
export interface BoundSession {
  privateKey: KeyObject;
  jwk: ReturnType<typeof ed25519PublicJwk>;
  thumb: Buffer;
  preimage: SessionBindingPreimage;
  reportData: Buffer;
}

/**
 * Generates an Ed25519 gateway key and binds session `sessionId` (chain root `chainRoot`) to it:
 * the preimage names the key's thumbprint and the given hashes and challenge.
 */
export function bindSession(o: {
  sessionId: string;
  chainRoot: string;
  gatewayMeasurement: string | null;
  policyBundleHash: string | null;
  catalogHash: string | null;
  challenge: string | null;
}): BoundSession {
  const { privateKey } = generateKeyPairSync('ed25519');
  const jwk = ed25519PublicJwk(privateKey);
  const thumb = jwkThumbprint(jwk);
  const preimage: SessionBindingPreimage = {
    domain: 'cmcp.session-binding',
    version: 1,
    session_id: o.sessionId,
    chain_root: o.chainRoot,
    key_thumbprint: b64u(thumb),
    gateway_measurement: o.gatewayMeasurement,
    policy_bundle_hash: o.policyBundleHash,
    catalog_hash: o.catalogHash,
    challenge: o.challenge,
  };
  return { privateKey, jwk, thumb, preimage, reportData: reportData(thumb, bindingDigest(preimage)) };
}

/**
 * An unsigned claim of session `s` (agent-a, enforce, issued 2026-11-30T13:00:00Z, first claim,
 * empty transcript, zero counters) whose hashes are those of the binding preimage.
 * @param over the claim's audit_chain and evidence, and any field to replace
 */
export function unsignedClaim(
  s: BoundSession,
  over: Pick<UnsignedClaim, 'audit_chain' | 'evidence'> & Partial<UnsignedClaim>,
): UnsignedClaim {
  const { audit_chain, evidence, ...rest } = over;
  return {
    claim_version: 1,
    profile: CLAIM_PROFILE,
    issued_at: '2026-11-30T13:00:00Z',
    session_id: s.preimage.session_id,
    agent_id: 'agent-a',
    gateway_measurement: s.preimage.gateway_measurement,
    policy_bundle_hash: s.preimage.policy_bundle_hash,
    enforcement_mode: 'enforce',
    catalog_hash: s.preimage.catalog_hash,
    cnf: { jwk: s.jwk },
    audit_chain,
    transcript: [],
    counters: { tool_calls: 0, allowed: 0, refused: 0, faulted: 0 },
    binding: { preimage: s.preimage },
    evidence,
    claim_sequence: 0,
    prev_claim_hash: null,
    ...rest,
  };
}

/** {@link unsignedClaim} signed with the session's Ed25519 key. */
export function signedClaim(
  s: BoundSession,
  over: Pick<UnsignedClaim, 'audit_chain' | 'evidence'> & Partial<UnsignedClaim>,
): Claim {
  return signClaim(unsignedClaim(s, over), s.privateKey);
}
