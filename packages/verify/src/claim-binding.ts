/**
 * The binding checks of a claim (docs/spec/binding.md): the preimage's key thumbprint (RFC 7638), session,
 * chain root and hashed fields, the challenge, and REPORT_DATA = thumbprint ‖ SHA-256(JCS(preimage)).
 */
import type { ParsedClaim } from './claim-schema.js';
import { tryB64u } from './common/kind.js';
import { bindingDigest, jwkThumbprint, reportData } from './format/binding.js';
import { b64u } from './format/canonical.js';
import type { Claim } from './format/claim.js';
import { type CheckResult, check, fail, pass, quoteUntrusted } from './result.js';

/** `binding.key_thumbprint`; returns the thumbprint of cnf.jwk, or null when it cannot be computed. */
export function keyThumbprintCheck(c: ParsedClaim, checks: CheckResult[]): Buffer | null {
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
  return thumb;
}

/**
 * `binding.session`, `binding.chain_root`, `binding.preimage`; returns SHA-256(JCS(preimage))
 * of the preimage as given (`raw`), or null when it is not canonicalisable.
 */
export function preimageChecks(c: ParsedClaim, raw: Claim, checks: CheckResult[]): Buffer | null {
  const pre = c.binding.preimage;
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
  return digest;
}

/** `binding.challenge`: the bound challenge against the verifier's nonce (null: none bound). */
export function challengeCheck(
  c: ParsedClaim,
  expectedChallenge: string | null | undefined,
  checks: CheckResult[],
): void {
  const pre = c.binding.preimage;
  if (expectedChallenge === undefined) {
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
  } else if (pre.challenge !== expectedChallenge) {
    checks.push(
      fail(
        'binding.challenge',
        'CHALLENGE_MISMATCH',
        `bound challenge ${quoteUntrusted(pre.challenge, 48)} ≠ expected ${quoteUntrusted(expectedChallenge, 48)}`,
      ),
    );
  } else {
    checks.push(pass('binding.challenge', 'the binding carries the expected challenge'));
  }
}

/** `binding.report_data`; returns the REPORT_DATA this claim must bind, or null. */
export function reportDataCheck(
  c: ParsedClaim,
  thumb: Buffer | null,
  digest: Buffer | null,
  checks: CheckResult[],
): Buffer | null {
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
  return expectedReportData;
}
