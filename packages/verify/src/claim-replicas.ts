/**
 * The checks of a `/2` claim's writers (docs/spec/claims.md#replicas): every listed replica's
 * start-up binding and evidence (`replicas.binding`, `replicas.evidence`), the claim's signer
 * among them (`replicas.signer`), the session binding's key among them (for
 * `binding.key_thumbprint`), and with a bundle every entry written and signed by a listed
 * replica (`audit.writers`). A `/1` claim has none of these checks.
 *
 * Imports only `packages/verify/src/format/*`, sibling verifier modules and npm libraries.
 */

import type { VerifiedEntry } from './bundle-schema.js';
import type { ParsedClaim, ParsedReplica } from './claim-schema.js';
import { tryB64u } from './common/kind.js';
import { type Ed25519Jwk, jwkThumbprint, reportData } from './format/binding.js';
import { b64u } from './format/canonical.js';
import type { Claim } from './format/claim.js';
import { type ReplicaBindingPreimage, replicaBindingDigest, verifyEntryWriter } from './format/replica.js';
import { evidenceKind } from './kinds.js';
import {
  type AnchorUsed,
  type CheckResult,
  check,
  computeVerdict,
  fail,
  pass,
  quoteUntrusted,
  type Verdict,
} from './result.js';
import { EMPTY_TRUST_STORE, type ReferenceValues, type TrustStore } from './trust.js';

/** What the replicas' evidence checks need of the relying party. */
export interface ReplicaCheckOptions {
  trustStore?: TrustStore;
  referenceValues?: ReferenceValues;
  now?: Date;
}

const VERDICT_RANK: Record<Verdict, number> = {
  invalid: 0,
  'signed-only': 1,
  'hardware-unanchored': 2,
  'hardware-attested': 3,
};

/** The weaker of two verdicts (a claim is as strong as its weakest writer). */
export function weakerVerdict(a: Verdict, b: Verdict): Verdict {
  return VERDICT_RANK[a] <= VERDICT_RANK[b] ? a : b;
}

const thumbOf = (jwk: Ed25519Jwk): string | null => {
  try {
    return b64u(jwkThumbprint(jwk));
  } catch {
    return null;
  }
};

/**
 * The listed replica whose key the session binding names (the replica that opened the
 * session): its `cnf.jwk` takes the claim's `cnf.jwk` place in `binding.key_thumbprint` and
 * REPORT_DATA. Undefined when none is listed.
 */
export function bindingReplicaJwk(c: ParsedClaim): Ed25519Jwk | undefined {
  const want = c.binding.preimage.key_thumbprint;
  return c.replicas?.find((m) => thumbOf(m.cnf.jwk) === want)?.cnf.jwk;
}

/** One member's binding: its REPORT_DATA, or why it is not the member's own binding. */
function memberBinding(m: ParsedReplica, raw: unknown): { rd: Buffer } | { why: string } {
  const pre = m.binding.preimage;
  const thumb = thumbOf(m.cnf.jwk);
  const who = `replica ${quoteUntrusted(m.replica_id, 64)}`;
  if (!thumb) return { why: `${who}: cnf.jwk is not a usable Ed25519 key` };
  if (pre.domain !== 'cmcp.replica-binding' || pre.version !== 1)
    return { why: `${who}: preimage domain/version is not cmcp.replica-binding/1` };
  if (pre.replica_id !== m.replica_id || pre.lease_token !== m.lease_token)
    return {
      why: `${who}: preimage names replica ${quoteUntrusted(pre.replica_id, 64)} token ${pre.lease_token}`,
    };
  if (pre.key_thumbprint !== thumb)
    return { why: `${who}: preimage key_thumbprint is not the RFC 7638 thumbprint of its cnf.jwk` };
  let digest: Buffer;
  try {
    digest = replicaBindingDigest(
      (raw as { binding: { preimage: ReplicaBindingPreimage } }).binding.preimage,
    );
  } catch {
    return { why: `${who}: preimage is not canonicalisable` };
  }
  const rd = reportData(jwkThumbprint(m.cnf.jwk), digest);
  if (!tryB64u(m.evidence.report_data)?.equals(rd))
    return { why: `${who}: evidence.report_data is not key_thumbprint ‖ SHA-256(JCS(preimage))` };
  return { rd };
}

/** One member's evidence verdict, or the failed check that refutes it. */
function memberEvidence(
  m: ParsedReplica,
  rd: Buffer,
  opts: ReplicaCheckOptions,
  anchors: AnchorUsed[],
): { verdict: Verdict } | { failed: CheckResult } {
  const ev = m.evidence;
  if (ev.status === 'absent') return { verdict: 'signed-only' };
  const kind = evidenceKind(ev.provider);
  if (!kind?.inClaim(ev))
    return {
      failed: fail('evidence.status', 'EVIDENCE_INCOMPLETE', 'status "bound" without checkable evidence'),
    };
  const r = kind.fromClaim(ev, rd, {
    trustStore: opts.trustStore ?? EMPTY_TRUST_STORE,
    at: opts.now ?? new Date(),
    ...(opts.referenceValues ? { referenceValues: opts.referenceValues } : {}),
  });
  const failed = r.checks.find((x) => x.status === 'fail');
  if (failed) return { failed };
  anchors.push(...r.anchors);
  return { verdict: computeVerdict(r.checks) };
}

/**
 * `replicas.binding`, `replicas.evidence`, `replicas.signer` for a `/2` claim.
 * @returns the weakest listed replica's verdict (`invalid` when one fails).
 */
export function replicaChecks(
  c: ParsedClaim,
  raw: Claim,
  opts: ReplicaCheckOptions,
  checks: CheckResult[],
  anchors: AnchorUsed[],
): Verdict {
  const members = c.replicas ?? [];
  const rawMembers = (raw as { replicas?: unknown[] }).replicas ?? [];
  let weakest: Verdict = 'hardware-attested';
  const bindingFails: string[] = [];
  const evidenceFails: string[] = [];
  const absent: string[] = [];
  members.forEach((m, i) => {
    const b = memberBinding(m, rawMembers[i]);
    if ('why' in b) {
      bindingFails.push(b.why);
      weakest = 'invalid';
      return;
    }
    const e = memberEvidence(m, b.rd, opts, anchors);
    if ('failed' in e) {
      evidenceFails.push(
        `replica ${quoteUntrusted(m.replica_id, 64)}: ${e.failed.id} ${e.failed.reason_code} (${e.failed.detail.slice(0, 120)})`,
      );
      weakest = 'invalid';
      return;
    }
    if (e.verdict === 'signed-only') absent.push(m.replica_id);
    weakest = weakerVerdict(weakest, e.verdict);
  });
  checks.push(
    bindingFails.length
      ? fail('replicas.binding', 'REPLICA_BINDING_INVALID', bindingFails.join('; ').slice(0, 400))
      : pass(
          'replicas.binding',
          `${members.length} replicas: each evidence binds its key and start-up preimage`,
        ),
  );
  if (evidenceFails.length)
    checks.push(
      fail('replicas.evidence', 'REPLICA_EVIDENCE_INVALID', evidenceFails.join('; ').slice(0, 400)),
    );
  else if (absent.length)
    checks.push(
      check(
        'replicas.evidence',
        'absent',
        'EVIDENCE_ABSENT',
        `no hardware evidence for replica(s) ${absent.map((a) => quoteUntrusted(a, 64)).join(', ')}: the claim is signed-only at best`,
      ),
    );
  else checks.push(pass('replicas.evidence', `the evidence of every listed replica verifies`));
  const accepted = opts.referenceValues?.gateway?.measurements;
  if (accepted) {
    // Each replica bound its measurement in its preimage: the relying party's reference values hold for every writer.
    const off = members.filter(
      (m) =>
        m.binding.preimage.gateway_measurement === null ||
        !accepted.includes(m.binding.preimage.gateway_measurement),
    );
    checks.push(
      off.length
        ? fail(
            'replicas.measurement',
            'MEASUREMENT_NOT_ALLOWED',
            `replica(s) ${off.map((m) => quoteUntrusted(m.replica_id, 64)).join(', ')} bound a gateway_measurement that is not a reference value`,
          )
        : pass('replicas.measurement', 'every listed replica bound a reference gateway_measurement'),
    );
  }
  const signer = thumbOf(c.cnf.jwk);
  const listed = members.find((m) => thumbOf(m.cnf.jwk) === signer);
  checks.push(
    listed
      ? pass(
          'replicas.signer',
          `the claim is signed by listed replica ${quoteUntrusted(listed.replica_id, 64)}`,
        )
      : fail('replicas.signer', 'CLAIM_SIGNER_NOT_LISTED', 'cnf.jwk is not the key of any listed replica'),
  );
  return weakest;
}

/**
 * `audit.writers`: every entry of the bundle names a listed replica (`replica`, hashed) and
 * carries that replica's writer signature over its entry_hash (format/replica.ts).
 * @param entries the bundle's entries as {@link verifyBundle} parsed them.
 * @param bundle the bundle as given (its entries' `writer_signature`).
 */
export function writersCheck(
  c: ParsedClaim,
  entries: readonly VerifiedEntry[],
  bundle: unknown,
): CheckResult {
  const members = new Map((c.replicas ?? []).map((m) => [thumbOf(m.cnf.jwk), m] as const));
  const rawEntries = (bundle as { entries?: { writer_signature?: unknown }[] } | null)?.entries ?? [];
  const counts = new Map<string, number>();
  for (const e of entries) {
    const body = e.body as (VerifiedEntry['body'] & { replica?: unknown }) | undefined;
    if (!body) continue; // audit.entry_format fails for it
    const seq = body.sequence_number;
    const rep = body.replica as { replica_id?: unknown; key_thumbprint?: unknown } | undefined;
    if (!rep || typeof rep.replica_id !== 'string' || typeof rep.key_thumbprint !== 'string')
      return fail('audit.writers', 'ENTRY_WRITER_NOT_ATTESTED', `entry ${seq} names no writing replica`);
    const m = members.get(rep.key_thumbprint);
    if (!m || m.replica_id !== rep.replica_id)
      return fail(
        'audit.writers',
        'ENTRY_WRITER_NOT_ATTESTED',
        `entry ${seq} was written by replica ${quoteUntrusted(rep.replica_id, 64)} (key ${quoteUntrusted(rep.key_thumbprint, 48)}), which the claim does not list with evidence`,
      );
    const sig = rawEntries[e.index]?.writer_signature;
    if (typeof sig !== 'string' || !verifyEntryWriter(e.computed_hash, sig, m.cnf.jwk))
      return fail(
        'audit.writers',
        'ENTRY_WRITER_SIGNATURE_INVALID',
        `entry ${seq}: ${typeof sig === 'string' ? 'the writer signature does not verify' : 'no writer signature'} under replica ${quoteUntrusted(rep.replica_id, 64)}'s key`,
      );
    counts.set(m.replica_id, (counts.get(m.replica_id) ?? 0) + 1);
  }
  const by = [...counts].map(([id, n]) => `${quoteUntrusted(id, 64)} ${n}`).join(', ');
  return pass('audit.writers', `every entry is written and signed by a listed replica (${by})`);
}
