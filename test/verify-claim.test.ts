/**
 * End-to-end claim verification with real claims built from packages/verify/src/format: an Ed25519 gateway key,
 * a real hash chain, software 'absent' evidence, and software-made TPM-format quotes for the
 * 'bound' path (the lead's swtpm e2e test covers a live TPM).
 */
import { createHash, generateKeyPairSync, type KeyObject, randomUUID } from 'node:crypto';
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import type { VerificationReport } from '@cmcp/verify';
import { renderJson, renderText, verifyClaim } from '@cmcp/verify';
import { registerVerifyCommand, runVerify, VerifyInputError } from '@cmcp/verify/cli';
import {
  type AuditBundle,
  type AuditEntryBody,
  type BundleEntry,
  b64u,
  bindingDigest,
  type Claim,
  claimHash,
  fromB64u,
  hashEntryBody,
  jwkThumbprint,
  reportData,
  signClaim,
  tpmQualifyingData,
  type UnsignedClaim,
} from '@cmcp/verify/formats';
import { Command } from 'commander';
import { afterAll, describe, expect, it, vi } from 'vitest';
import { CmcpError, ERRORS } from '../src/errors/index.js';
import {
  bindSession,
  bundleOf,
  makeChain,
  type SoftTpm,
  softQuote,
  softTpm,
  softwareEvidence,
  tpmEvidence,
  unsignedClaim,
} from '../testing/evidence.js';
import { hasVectors, vectorPath } from './harness/vectors.js';

// ---------- TPM-format software quote ----------
const PCRS = [0, 1, 2, 7];
const pcrValue = (i: number) => createHash('sha256').update(`boot-${i}`).digest();

function quote(tpm: SoftTpm, extraData: Buffer): { attest: Buffer; signature: Buffer } {
  const pcrDigest = createHash('sha256')
    .update(Buffer.concat(PCRS.map(pcrValue)))
    .digest();
  return softQuote(tpm, { extraData, pcrs: PCRS, pcrDigest, clock: 4242n });
}

// ---------- claim ----------
interface Built {
  claim: Claim;
  bundle: AuditBundle;
  key: KeyObject;
  unsigned: UnsignedClaim;
  bodies: AuditEntryBody[];
  reportData: Buffer;
}

interface BuildOpts {
  length?: number;
  challenge?: string | null;
  tpm?: SoftTpm | 'absent';
  /** Replace the quote's extraData (e.g. another session's). */
  extraData?: (own: Buffer) => Buffer;
  mutateAttest?: (attest: Buffer) => Buffer;
  akCertChain?: string[];
  parentQualifiedName?: Buffer;
  claimSequence?: number;
  prevClaimHash?: string | null;
}

function build(opts: BuildOpts = {}): Built {
  const sessionId = randomUUID();
  const { entries, bodies } = makeChain(sessionId, opts.length ?? 6);
  const root = entries[0]?.entry_hash ?? '';
  const tip = entries[entries.length - 1]?.entry_hash ?? '';
  const session = bindSession({
    sessionId,
    chainRoot: root,
    gatewayMeasurement: 'sha256:aa',
    policyBundleHash: 'sha256:bb',
    catalogHash: 'sha256:cc',
    challenge: opts.challenge === undefined ? null : opts.challenge,
  });
  const rd = session.reportData;
  let evidence: Claim['evidence'];
  const tpm = opts.tpm ?? 'absent';
  if (tpm === 'absent') {
    evidence = softwareEvidence(rd);
  } else {
    const own = tpmQualifyingData(rd);
    const q = quote(tpm, opts.extraData ? opts.extraData(own) : own);
    const attest = opts.mutateAttest ? opts.mutateAttest(q.attest) : q.attest;
    evidence = tpmEvidence({
      reportData: rd,
      attest,
      signature: q.signature,
      akPublic: tpm.akPublic,
      pcrs: PCRS,
      pcrValue,
      ...(opts.parentQualifiedName ? { parentQualifiedName: opts.parentQualifiedName } : {}),
      ...(opts.akCertChain ? { akCertChain: opts.akCertChain } : {}),
    });
  }
  const transcript = bodies
    .filter((b) => b.entry_type === 'tool_call')
    .map((b) => ({
      sequence_number: b.sequence_number,
      tool_name: b.tool_name,
      policy_decision: b.policy_decision,
      disposition: b.disposition,
      error_code: b.error_code,
    }));
  const unsigned = unsignedClaim(session, {
    audit_chain: { chain_id: sessionId, root, tip, length: entries.length },
    transcript,
    counters: { tool_calls: transcript.length, allowed: transcript.length, refused: 0, faulted: 0 },
    evidence,
    claim_sequence: opts.claimSequence ?? 0,
    prev_claim_hash: opts.prevClaimHash ?? null,
  });
  return {
    claim: signClaim(unsigned, session.privateKey),
    bundle: bundleOf(sessionId, entries),
    key: session.privateKey,
    unsigned,
    bodies,
    reportData: rd,
  };
}

const fails = (r: VerificationReport) =>
  r.checks.filter((c) => c.status === 'fail').map((c) => c.reason_code);
const get = (r: VerificationReport, id: string) => {
  const c = r.checks.find((x) => x.id === id);
  if (!c) throw new Error(`no check ${id}`);
  return c;
};
/** Re-signs a modified unsigned claim with the same key (so only the modified part is wrong). */
const resign = (b: Built, unsigned: UnsignedClaim) => signClaim(unsigned, b.key);
const clone = <T>(v: T): T => JSON.parse(JSON.stringify(v)) as T;

// ---------- tests ----------
describe('signed-only claims (software provider, evidence absent)', () => {
  it('a genuine claim with its bundle is signed-only, with every check listed', () => {
    const b = build();
    const r = verifyClaim(clone(b.claim), { bundle: clone(b.bundle) });
    expect(fails(r)).toEqual([]);
    expect(r.verdict).toBe('signed-only');
    expect(get(r, 'claim.signature').status).toBe('pass');
    expect(get(r, 'evidence.status')).toMatchObject({ status: 'absent', reason_code: 'EVIDENCE_ABSENT' });
    expect(get(r, 'evidence.status').detail).toContain('SOFTWARE_PROVIDER');
    expect(get(r, 'evidence.signature').status).toBe('absent');
    for (const id of [
      'audit.entry_hashes',
      'audit.links',
      'audit.root',
      'audit.tip',
      'audit.length',
      'audit.transcript',
    ]) {
      expect(get(r, id).status).toBe('pass');
    }
    for (const c of r.checks) expect(['pass', 'fail', 'absent', 'not-applicable']).toContain(c.status);
  });

  it('without a bundle the audit check is absent and the verdict still signed-only', () => {
    const b = build();
    const r = verifyClaim(b.claim);
    expect(r.verdict).toBe('signed-only');
    expect(get(r, 'audit.bundle')).toMatchObject({ status: 'absent', reason_code: 'BUNDLE_NOT_PROVIDED' });
  });

  it('execution_id groups are reported as notes that do not claim one logical operation', () => {
    const b = build();
    const r = verifyClaim(b.claim, { bundle: b.bundle });
    expect(r.execution_id_groups).toEqual([
      expect.objectContaining({ execution_id: 'exec-1', sequence_numbers: [2, 4], agent_ids: ['agent-a'] }),
    ]);
    const note = r.notes.find((n) => n.includes('exec-1'));
    expect(note).toMatch(/2 tool_call entries share execution_id/);
    expect(note).toMatch(/does NOT establish that they were the same logical operation/);
    expect(JSON.stringify(b.claim)).not.toContain('exec-1');
  });

  it('a malformed claim fails CLAIM_MALFORMED (never skipped)', () => {
    const b = build();
    const bad = clone(b.claim) as unknown as Record<string, unknown>;
    delete bad.audit_chain;
    const r = verifyClaim(bad);
    expect(r.verdict).toBe('invalid');
    expect(get(r, 'claim.shape').reason_code).toBe('CLAIM_MALFORMED');
    expect(verifyClaim('not a claim').verdict).toBe('invalid');
    expect(verifyClaim(null).verdict).toBe('invalid');
  });

  it('expected challenge: match passes, mismatch fails CHALLENGE_MISMATCH, null requires none', () => {
    const b = build({ challenge: 'bm9uY2U' });
    expect(get(verifyClaim(b.claim, { expectedChallenge: 'bm9uY2U' }), 'binding.challenge').status).toBe(
      'pass',
    );
    expect(get(verifyClaim(b.claim, { expectedChallenge: 'b3RoZXI' }), 'binding.challenge').reason_code).toBe(
      'CHALLENGE_MISMATCH',
    );
    expect(get(verifyClaim(b.claim, { expectedChallenge: null }), 'binding.challenge').status).toBe('fail');
    expect(get(verifyClaim(b.claim), 'binding.challenge').status).toBe('not-applicable');
  });

  it('requiredPcrs with absent evidence: PCR policy cannot pass, verdict stays signed-only', () => {
    const b = build();
    const r = verifyClaim(b.claim, { requiredPcrs: [0, 1, 2, 7] });
    expect(r.verdict).toBe('signed-only');
    expect(get(r, 'tpm.pcr_policy')).toMatchObject({ status: 'absent', reason_code: 'EVIDENCE_ABSENT' });
  });
});

describe('faults each fail with a distinct reason', () => {
  it('wrong claim signature → CLAIM_SIGNATURE_INVALID', () => {
    const b = build();
    const c = clone(b.claim);
    c.counters.allowed += 1; // changed after signing
    const r = verifyClaim(c, { bundle: b.bundle });
    expect(r.verdict).toBe('invalid');
    expect(fails(r)).toEqual(['CLAIM_SIGNATURE_INVALID']);
    // a signature by another key
    const other = generateKeyPairSync('ed25519').privateKey;
    const r2 = verifyClaim(signClaim(b.unsigned, other), { bundle: b.bundle });
    expect(fails(r2)).toContain('CLAIM_SIGNATURE_INVALID');
  });

  it('a claim with an undeclared member added after signing fails the signature', () => {
    const b = build();
    const c = { ...clone(b.claim), extra: 1 };
    expect(fails(verifyClaim(c))).toEqual(['CLAIM_SIGNATURE_INVALID']);
  });

  it('thumbprint mismatch → KEY_THUMBPRINT_MISMATCH', () => {
    const b = build();
    const u = clone(b.unsigned);
    u.binding.preimage.key_thumbprint = b64u(Buffer.alloc(32, 9));
    // report_data recomputed honestly over the altered preimage, so only the thumbprint is wrong
    const thumb = jwkThumbprint(u.cnf.jwk);
    u.evidence.report_data = b64u(reportData(thumb, bindingDigest(u.binding.preimage)));
    const r = verifyClaim(resign(b, u), { bundle: b.bundle });
    expect(fails(r)).toEqual(['KEY_THUMBPRINT_MISMATCH']);
  });

  it('report_data not derived from the preimage → REPORT_DATA_MISMATCH', () => {
    const b = build();
    const u = clone(b.unsigned);
    u.evidence.report_data = b64u(Buffer.alloc(64, 1));
    expect(fails(verifyClaim(resign(b, u)))).toEqual(['REPORT_DATA_MISMATCH']);
  });

  it('preimage chain_root / session not the claim’s → PREIMAGE_CHAIN_ROOT_MISMATCH / PREIMAGE_SESSION_MISMATCH', () => {
    const b = build();
    const u = clone(b.unsigned);
    u.binding.preimage.chain_root = 'f'.repeat(64);
    u.evidence.report_data = b64u(reportData(jwkThumbprint(u.cnf.jwk), bindingDigest(u.binding.preimage)));
    expect(fails(verifyClaim(resign(b, u)))).toEqual(['PREIMAGE_CHAIN_ROOT_MISMATCH']);
    const u2 = clone(b.unsigned);
    u2.binding.preimage.session_id = 'other';
    u2.evidence.report_data = b64u(reportData(jwkThumbprint(u2.cnf.jwk), bindingDigest(u2.binding.preimage)));
    expect(fails(verifyClaim(resign(b, u2)))).toEqual(['PREIMAGE_SESSION_MISMATCH']);
  });

  it('edited audit entry → ENTRY_HASH_MISMATCH (content tampering)', () => {
    const b = build();
    const bundle = clone(b.bundle);
    const e = bundle.entries[3];
    if (!e) throw new Error('no entry');
    e.canonical = e.canonical.replace('"latency_us":1203', '"latency_us":9999');
    const r = verifyClaim(b.claim, { bundle });
    expect(r.verdict).toBe('invalid');
    expect(fails(r)).toEqual(['ENTRY_HASH_MISMATCH']);
  });

  it('edited entry with its hash recomputed → LINK_BROKEN at the successor', () => {
    const b = build();
    const bundle = clone(b.bundle);
    const body = { ...(b.bodies[3] as AuditEntryBody), latency_us: 1 };
    const { canonical, entry_hash } = hashEntryBody(body);
    bundle.entries[3] = { canonical, entry_hash };
    expect(fails(verifyClaim(b.claim, { bundle }))).toEqual(['LINK_BROKEN']);
  });

  it('reordered entries → SEQUENCE_OUT_OF_ORDER', () => {
    const b = build();
    const bundle = clone(b.bundle);
    const [x, y] = [bundle.entries[2], bundle.entries[3]] as [BundleEntry, BundleEntry];
    bundle.entries[2] = y;
    bundle.entries[3] = x;
    expect(fails(verifyClaim(b.claim, { bundle }))).toEqual(['SEQUENCE_OUT_OF_ORDER']);
  });

  it('reordered with sequence numbers rewritten and hashes recomputed → LINK_BROKEN', () => {
    const b = build();
    const bodies = b.bodies.map((x) => ({ ...x }));
    const [p, q] = [bodies[2], bodies[3]] as [AuditEntryBody, AuditEntryBody];
    // swap the two entries' content, keeping positions' sequence numbers and original links
    const swapped = [
      ...bodies.slice(0, 2),
      { ...q, sequence_number: 2, prev_entry_hash: p.prev_entry_hash },
      { ...p, sequence_number: 3, prev_entry_hash: q.prev_entry_hash },
      ...bodies.slice(4),
    ];
    const bundle = bundleOf(
      b.claim.session_id,
      swapped.map((x) => hashEntryBody(x)),
    );
    expect(fails(verifyClaim(b.claim, { bundle }))).toContain('LINK_BROKEN');
  });
});

describe('C-CHAIN-3 rebuilt or truncated chain', () => {
  it('a different but self-consistent chain of the same length → CHAIN_SUBSTITUTED', () => {
    const b = build();
    const { entries } = makeChain(b.claim.session_id, b.claim.audit_chain.length, 'rebuilt');
    const r = verifyClaim(b.claim, { bundle: bundleOf(b.claim.session_id, entries) });
    expect(r.verdict).toBe('invalid');
    expect(get(r, 'audit.root').reason_code).toBe('CHAIN_SUBSTITUTED');
    expect(fails(r)).not.toContain('ENTRY_HASH_MISMATCH');
    expect(fails(r)).not.toContain('BUNDLE_TRUNCATED');
    expect(fails(r)).not.toContain('LINK_BROKEN');
  });

  it('dropping the last entry of an exported bundle → BUNDLE_TRUNCATED', () => {
    const b = build();
    const bundle = clone(b.bundle);
    bundle.entries.pop();
    const r = verifyClaim(b.claim, { bundle });
    expect(r.verdict).toBe('invalid');
    expect(get(r, 'audit.length').reason_code).toBe('BUNDLE_TRUNCATED');
    expect(new Set(fails(r))).toEqual(new Set(['BUNDLE_TRUNCATED']));
  });

  it('claim k presented in place of claim k+1 → BUNDLE_EXTENDS_CLAIM and CLAIM_NOT_SUCCESSOR', () => {
    // claim k covered the first 4 entries; the session continued and claim k+1 covers 6.
    const b = build({ length: 6, claimSequence: 7 });
    const entriesK = b.bundle.entries.slice(0, 4);
    const uk = clone(b.unsigned);
    uk.audit_chain = { ...uk.audit_chain, tip: entriesK[3]?.entry_hash ?? '', length: 4 };
    uk.transcript = uk.transcript.filter((t) => t.sequence_number < 4);
    uk.claim_sequence = 6;
    const claimK = resign(b, uk);
    const uk1 = clone(b.unsigned);
    uk1.prev_claim_hash = claimHash(claimK);
    const claimK1 = resign(b, uk1);
    // the honest pair verifies
    const ok = verifyClaim(claimK1, { bundle: b.bundle, previousClaim: claimK });
    expect(fails(ok)).toEqual([]);
    // claim k against the later bundle
    const r = verifyClaim(claimK, { bundle: b.bundle });
    expect(get(r, 'audit.length').reason_code).toBe('BUNDLE_EXTENDS_CLAIM');
    expect(fails(r)).toEqual(['BUNDLE_EXTENDS_CLAIM']);
    // claim k where k+1's successor link is expected
    const r2 = verifyClaim(claimK, { bundle: b.bundle, previousClaim: claimK });
    expect(fails(r2)).toContain('CLAIM_NOT_SUCCESSOR');
  });

  it('a bundle of another session → BUNDLE_SESSION_MISMATCH', () => {
    const a = build();
    const other = build();
    const r = verifyClaim(a.claim, { bundle: other.bundle });
    expect(fails(r)).toContain('BUNDLE_SESSION_MISMATCH');
    expect(fails(r)).not.toContain('ENTRY_HASH_MISMATCH');
  });

  it('a malformed bundle fails every audit check with BUNDLE_MALFORMED', () => {
    const b = build();
    const r = verifyClaim(b.claim, { bundle: { entries: 'nope' } });
    expect(r.verdict).toBe('invalid');
    const audit = r.checks.filter((c) => c.id.startsWith('audit.'));
    expect(audit.length).toBeGreaterThan(5);
    for (const c of audit) expect(c).toMatchObject({ status: 'fail', reason_code: 'BUNDLE_MALFORMED' });
  });
});

describe('bound TPM claims (software-made TPM-format quote)', () => {
  it('a valid quote bound to the claim → hardware-unanchored; AK not anchored is stated', () => {
    const b = build({ tpm: softTpm() });
    const r = verifyClaim(clone(b.claim), { bundle: b.bundle, requiredPcrs: [0, 1, 2, 7] });
    expect(fails(r)).toEqual([]);
    expect(r.verdict).toBe('hardware-unanchored');
    for (const id of [
      'evidence.status',
      'tpm.attest_parse',
      'tpm.signature_parse',
      'tpm.ak_public',
      'tpm.ak_attributes',
      'tpm.signature_scheme',
      'evidence.signature',
      'evidence.binding',
      'tpm.qualified_signer',
      'tpm.pcr_selection',
      'tpm.pcr_policy',
      'tpm.pcr_digest',
    ]) {
      expect(get(r, id).status, id).toBe('pass');
    }
    expect(get(r, 'evidence.anchor')).toMatchObject({ status: 'absent', reason_code: 'AK_NOT_ENROLLED' });
    expect(r.anchors_used).toEqual([]);
    expect(r.notes.join(' ')).toMatch(/NOT anchored to a pinned root/);
    const text = renderText(r);
    expect(text).toMatch(/^Verdict: HARDWARE-UNANCHORED/);
    expect(text).toMatch(/NOT anchored to a pinned root/);
    expect(JSON.parse(renderJson(r))).toEqual(r);
  });

  it('a flipped quote byte → QUOTE_SIGNATURE_INVALID', () => {
    const b = build({
      tpm: softTpm(),
      mutateAttest: (a) => {
        const x = Buffer.from(a);
        x[80] = (x[80] ?? 0) ^ 0x01; // inside clockInfo
        return x;
      },
    });
    const r = verifyClaim(b.claim, { bundle: b.bundle });
    expect(r.verdict).toBe('invalid');
    expect(fails(r)).toEqual(['QUOTE_SIGNATURE_INVALID']);
  });

  it('every single-byte flip of the claim’s attest is rejected', () => {
    const tpm = softTpm();
    const b = build({ tpm });
    const attest = fromB64u(b.claim.evidence.tpm?.attest ?? '');
    for (let i = 0; i < attest.length; i++) {
      const u = clone(b.unsigned);
      const x = Buffer.from(attest);
      x[i] = (x[i] ?? 0) ^ 0xff;
      if (u.evidence.tpm) u.evidence.tpm.attest = b64u(x);
      const r = verifyClaim(resign(b, u));
      expect(r.verdict, `byte ${i}`).toBe('invalid');
      expect(get(r, 'evidence.signature').status, `byte ${i}`).toBe('fail');
    }
  });

  it('a quote for another session → QUOTE_NONCE_MISMATCH', () => {
    const other = build();
    const b = build({ tpm: softTpm(), extraData: () => tpmQualifyingData(other.reportData) });
    const r = verifyClaim(b.claim, { bundle: b.bundle });
    expect(r.verdict).toBe('invalid');
    expect(fails(r)).toEqual(['QUOTE_NONCE_MISMATCH']);
    expect(get(r, 'evidence.signature').status).toBe('pass');
  });

  it('qualifiedSigner must be the AK qualified name under the declared parent', () => {
    const b = build({ tpm: softTpm(), parentQualifiedName: Buffer.from('40000001', 'hex') });
    const r = verifyClaim(b.claim, { bundle: b.bundle });
    expect(r.verdict).toBe('invalid');
    expect(fails(r)).toEqual(['QUALIFIED_SIGNER_MISMATCH']);
  });

  it('the four required faults have pairwise distinct reasons', () => {
    const edited = (() => {
      const b = build();
      const bundle = clone(b.bundle);
      const e = bundle.entries[1] as BundleEntry;
      e.canonical = e.canonical.replace('"echo"', '"rm"');
      return fails(verifyClaim(b.claim, { bundle }));
    })();
    const flipped = (() => {
      const b = build({ tpm: softTpm(), mutateAttest: (a) => Buffer.from(a).fill(0x55, 90, 91) });
      return fails(verifyClaim(b.claim, { bundle: b.bundle }));
    })();
    const otherSession = (() => {
      const o = build();
      const b = build({ tpm: softTpm(), extraData: () => tpmQualifyingData(o.reportData) });
      return fails(verifyClaim(b.claim, { bundle: b.bundle }));
    })();
    const truncated = (() => {
      const b = build();
      const bundle = clone(b.bundle);
      bundle.entries.pop();
      return fails(verifyClaim(b.claim, { bundle }));
    })();
    expect(edited).toContain('ENTRY_HASH_MISMATCH');
    expect(flipped).toContain('QUOTE_SIGNATURE_INVALID');
    expect(otherSession).toContain('QUOTE_NONCE_MISMATCH');
    expect(truncated).toContain('BUNDLE_TRUNCATED');
    const sets = [edited, flipped, otherSession, truncated];
    const keys = [
      'ENTRY_HASH_MISMATCH',
      'QUOTE_SIGNATURE_INVALID',
      'QUOTE_NONCE_MISMATCH',
      'BUNDLE_TRUNCATED',
    ];
    sets.forEach((s, i) => {
      keys.forEach((k, j) => {
        if (i !== j) expect(s, `${keys[i]} scenario`).not.toContain(k);
      });
    });
  });

  it('another AK public area in the claim → QUOTE_SIGNATURE_INVALID and QUALIFIED_SIGNER_MISMATCH', () => {
    const b = build({ tpm: softTpm() });
    const u = clone(b.unsigned);
    if (u.evidence.tpm) u.evidence.tpm.ak_public = b64u(softTpm().akPublic);
    const f = fails(verifyClaim(resign(b, u)));
    expect(f).toContain('QUOTE_SIGNATURE_INVALID');
    expect(f).toContain('QUALIFIED_SIGNER_MISMATCH');
  });

  it('PCR values: altered PCR 7 → PCR_DIGEST_MISMATCH; declared selection differs → PCR_SELECTION_MISMATCH', () => {
    const b = build({ tpm: softTpm() });
    const u = clone(b.unsigned);
    if (u.evidence.tpm) u.evidence.tpm.pcr_values['7'] = b64u(Buffer.alloc(32, 7));
    expect(fails(verifyClaim(resign(b, u)))).toEqual(['PCR_DIGEST_MISMATCH']);
    const u2 = clone(b.unsigned);
    if (u2.evidence.tpm) {
      u2.evidence.tpm.pcr_selection.pcrs = [0, 1, 2];
      delete u2.evidence.tpm.pcr_values['7'];
    }
    expect(fails(verifyClaim(resign(b, u2)))).toContain('PCR_SELECTION_MISMATCH');
    // the same values listed in another key order verify
    const u3 = clone(b.unsigned);
    if (u3.evidence.tpm) {
      const v = u3.evidence.tpm.pcr_values;
      u3.evidence.tpm.pcr_values = {
        '7': v['7'] ?? '',
        '2': v['2'] ?? '',
        '0': v['0'] ?? '',
        '1': v['1'] ?? '',
      };
    }
    expect(fails(verifyClaim(resign(b, u3)))).toEqual([]);
  });

  it('required PCR policy not met → PCR_POLICY_MISMATCH', () => {
    const b = build({ tpm: softTpm() });
    expect(fails(verifyClaim(b.claim, { requiredPcrs: [0, 1, 2, 3, 7] }))).toEqual(['PCR_POLICY_MISMATCH']);
  });

  it('evidence fields that do not parse are failures, never skipped', () => {
    const b = build({ tpm: softTpm() });
    const u = clone(b.unsigned);
    if (u.evidence.tpm) u.evidence.tpm.attest = b64u(Buffer.from([1, 2, 3]));
    const r = verifyClaim(resign(b, u));
    expect(get(r, 'tpm.attest_parse').status).toBe('fail');
    expect(get(r, 'evidence.binding').status).toBe('fail');
    const u2 = clone(b.unsigned);
    if (u2.evidence.tpm) u2.evidence.tpm.ak_public = b64u(Buffer.from([0, 0x23]));
    const r2 = verifyClaim(resign(b, u2));
    expect(get(r2, 'tpm.ak_public').reason_code).toBe('AK_PUBLIC_MALFORMED');
    expect(get(r2, 'evidence.signature').status).toBe('fail');
  });

  it('status "bound" without TPM evidence → EVIDENCE_INCOMPLETE', () => {
    const b = build();
    const u = clone(b.unsigned);
    u.evidence = { ...u.evidence, provider: 'sev-snp', status: 'bound', reason: null };
    const r = verifyClaim(resign(b, u));
    expect(get(r, 'evidence.status').reason_code).toBe('EVIDENCE_INCOMPLETE');
    expect(r.verdict).toBe('invalid');
  });

  it.skipIf(!hasVectors())(
    'an AK certificate for a different key (Azure akcert) → AK_CERT_KEY_MISMATCH',
    () => {
      const der = readFileSync(vectorPath('tpm', 'azure-vtpm-2026-07-27', 'akcert_0x01C101D0.der'));
      const b = build({ tpm: softTpm(), akCertChain: [b64u(der)] });
      const r = verifyClaim(b.claim);
      expect(get(r, 'evidence.anchor').reason_code).toBe('AK_CERT_KEY_MISMATCH');
      expect(r.verdict).toBe('invalid');
    },
  );

  it('an AK certificate chain that is not DER → AK_CHAIN_MALFORMED', () => {
    const b = build({ tpm: softTpm(), akCertChain: [b64u(Buffer.from('not a cert'))] });
    expect(get(verifyClaim(b.claim), 'evidence.anchor').reason_code).toBe('AK_CHAIN_MALFORMED');
  });
});

describe('cmcp verify CLI', () => {
  const dir = mkdtempSync(join(tmpdir(), 'cmcp-verify-'));
  afterAll(() => rmSync(dir, { recursive: true, force: true }));
  const write = (name: string, value: unknown) => {
    const p = join(dir, name);
    writeFileSync(p, typeof value === 'string' ? value : JSON.stringify(value));
    return p;
  };
  const run = async (claimPath: string, opts: Parameters<typeof runVerify>[1] = {}) => {
    let out = '';
    let err = '';
    const code = await runVerify(claimPath, opts, { stdout: (t) => (out += t), stderr: (t) => (err += t) });
    return { code, out, err };
  };

  it('signed-only claim with bundle → exit 0, text report', async () => {
    const b = build();
    const r = await run(write('c1.json', b.claim), {
      audit: write('b1.json', b.bundle),
      require: 'signed-only',
    });
    expect(r.code).toBe(0);
    expect(r.out).toMatch(/^Verdict: SIGNED-ONLY/);
    expect(r.out).toContain('Signer: SELF-ASSERTED');
    // the default asks for hardware-attested or a pinned key
    expect((await run(write('c1.json', b.claim), { audit: write('b1.json', b.bundle) })).code).toBe(1);
    expect(r.out).toContain('claim.signature');
  });

  it('--json prints the report as JSON', async () => {
    const b = build({ tpm: softTpm() });
    const r = await run(write('c2.json', b.claim), {
      json: true,
      pcrs: '7,0,1,2',
      require: 'hardware-unanchored',
    });
    expect(r.code).toBe(0);
    expect(JSON.parse(r.out).verdict).toBe('hardware-unanchored');
  });

  it('invalid verdict → exit 1', async () => {
    const b = build();
    const bundle = clone(b.bundle);
    bundle.entries.pop();
    const r = await run(write('c3.json', b.claim), { audit: write('b3.json', bundle) });
    expect(r.code).toBe(1);
    expect(r.out).toContain('BUNDLE_TRUNCATED');
  });

  it('C-TPM-4: an unmarshal error (trailing attest byte) fails verification with a non-zero exit', async () => {
    const b = build({ tpm: softTpm(), mutateAttest: (a) => Buffer.concat([a, Buffer.from([0])]) });
    const r = await run(write('c4.json', b.claim));
    expect(r.code).toBe(1);
    expect(r.out).toContain('TPM_ATTEST_TRAILING_BYTES');
  });

  it('unreadable input and usage errors → exit 2 with one clean line', async () => {
    const b = build();
    const claimPath = write('c5.json', b.claim);
    for (const r of [
      await run(join(dir, 'missing.json')),
      await run(write('notjson.json', '{nope')),
      await run(claimPath, { audit: join(dir, 'missing-bundle.json') }),
      await run(claimPath, { pcrs: '0,1,x' }),
      await run(claimPath, { pcrs: '0,0' }),
      await run(claimPath, { challenge: 'a+b/' }),
    ]) {
      expect(r.code).toBe(2);
      expect(r.err).toMatch(/^cmcp-verify claim: [^\n]+\n$/);
      expect(r.err).not.toMatch(/\n\s+at /);
      expect(r.out).toBe('');
    }
  });

  it('input errors are CmcpErrors with the registered code VERIFY_INPUT_INVALID', () => {
    const e = new VerifyInputError('--pcrs: bad');
    expect(e).toBeInstanceOf(CmcpError);
    expect(e.code).toBe('VERIFY_INPUT_INVALID');
    expect(ERRORS[e.code].summary).toMatch(/exit code 2/);
  });

  it('registerVerifyCommand: runs through commander; a missing argument exits 2', async () => {
    const b = build();
    const claimPath = write('c6.json', b.claim);
    const program = new Command().name('cmcp');
    registerVerifyCommand(program, 'verify');
    const stdout = vi.spyOn(process.stdout, 'write').mockImplementation(() => true);
    const prevExit = process.exitCode;
    try {
      await program.parseAsync(['node', 'cmcp', 'verify', claimPath, '--require', 'signed-only', '--json']);
      expect(process.exitCode).toBe(0);
      const printed = stdout.mock.calls.map((c) => String(c[0])).join('');
      expect(JSON.parse(printed).verdict).toBe('signed-only');
    } finally {
      stdout.mockRestore();
      process.exitCode = prevExit;
    }
    const exit = vi.spyOn(process, 'exit').mockImplementation(((code?: number) => {
      throw new Error(`exit ${code}`);
    }) as typeof process.exit);
    const stderr = vi.spyOn(process.stderr, 'write').mockImplementation(() => true);
    try {
      const p2 = new Command().name('cmcp');
      registerVerifyCommand(p2, 'verify');
      await expect(p2.parseAsync(['node', 'cmcp', 'verify'])).rejects.toThrow('exit 2');
    } finally {
      exit.mockRestore();
      stderr.mockRestore();
    }
  });
});
