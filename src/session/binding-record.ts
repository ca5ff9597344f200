/**
 * A session's binding as it is recorded (docs/spec/binding.md): the preimage over the chain root,
 * the bind through the batcher, the evidence (bound, or absent with the reason — a failed bind is
 * logged and the session serves signed-only unless a tier is required), and the chain entry that
 * records the outcome, as the session service (./service.ts) records it on either engine.
 */

import type { EvidenceJson } from '@cmcp/verify/formats';
import { b64u, bindingDigest, type SessionBindingPreimage } from '@cmcp/verify/formats';
import type { Logger } from 'pino';
import type { SessionBindingRecord } from '../claim/build.js';
import { CmcpError } from '../errors/index.js';
import type { EntryInput } from '../store/entries/next-entry.js';
import { type AttestationProvider, type AttestationTier, BindingError } from '../tee/provider.js';
import type { BindingBatcher } from './binding-batcher.js';
import type { SessionFacts } from './types.js';

/**
 * The binding preimage of a session's chain root under the key with `keyThumbprint` (base64url).
 * `openedAfterClaim`: the newest claim's claim_sequence, read before the session is quoted (null:
 * none, or not read), so a verifier knows which earlier claims' quotes precede this one.
 */
export function sessionPreimage(
  sessionId: string,
  chainRoot: string,
  keyThumbprint: string,
  facts: SessionFacts,
  challenge: string | null,
  openedAfterClaim: number | null = null,
): SessionBindingPreimage {
  return {
    domain: 'cmcp.session-binding',
    version: 1,
    session_id: sessionId,
    chain_root: chainRoot,
    key_thumbprint: keyThumbprint,
    gateway_measurement: facts.gatewayMeasurement,
    policy_bundle_hash: facts.policyBundleHash,
    catalog_hash: facts.catalogHash,
    challenge,
    opened_after_claim: openedAfterClaim,
  };
}

/**
 * Binds `preimage` through `binder` (one quote or report shared by the sessions waiting) and
 * builds the record the session row stores. A failed bind is logged and recorded as absent
 * evidence with its reason (BindingError's, else PROVIDER_FAULT). Never throws for a failed bind.
 */
export async function bindSession(
  binder: BindingBatcher,
  provider: AttestationProvider,
  preimage: SessionBindingPreimage,
  log: Logger,
): Promise<SessionBindingRecord> {
  // Taken with the preimage, so a reload during the bind cannot pair a newer measurement
  // with this preimage's digest.
  const measurementAtBind = provider.measurementEvidence?.() ?? null;
  const share = await binder.bind(bindingDigest(preimage), preimage.gateway_measurement);
  const rd = share.reportData;
  let evidence: EvidenceJson;
  if (share.ok) {
    evidence = {
      provider: provider.name,
      status: 'bound',
      reason: null,
      report_data: b64u(rd),
      ...share.evidence,
    };
  } else {
    const e = share.error;
    const reason = e instanceof BindingError ? e.reason : 'PROVIDER_FAULT';
    const message = (e as Error).message;
    log.warn(
      { session_id: preimage.session_id, provider: provider.name, reason, err: message },
      'attestation binding failed; session continues without hardware binding',
    );
    evidence = absentEvidence(provider.name, reason, rd, measurementAtBind);
  }
  return { preimage, batch: share.batch, evidence };
}

/**
 * The evidence of a binding that failed (docs/spec/binding.md): status `absent`, the
 * provider's reason, the REPORT_DATA that was asked for, and the gateway measurement's evidence
 * when the provider has one.
 */
export function absentEvidence(
  provider: string,
  reason: string,
  reportData: Uint8Array,
  measurement: EvidenceJson['measurement'] | null,
): EvidenceJson {
  return {
    provider,
    status: 'absent',
    reason,
    report_data: b64u(reportData),
    tpm: null,
    ...(measurement ? { measurement } : {}),
  };
}

/** The session chain's entry recording a binding's outcome. */
export function bindingEntry(sessionId: string, agentId: string, evidence: EvidenceJson): EntryInput {
  return {
    entry_type: evidence.status === 'bound' ? 'attestation_bound' : 'attestation_binding_failed',
    session_id: sessionId,
    agent_id: agentId,
    detail:
      evidence.status === 'bound'
        ? { provider: evidence.provider, report_data: evidence.report_data }
        : { provider: evidence.provider, reason: evidence.reason, report_data: evidence.report_data },
  };
}

/**
 * The refusal of a session that could not be bound under `minimum_tier` (docs/spec/refinements.md),
 * after it was closed with reason `binding_required`; for both engines' session services.
 * @returns CmcpError SESSION_BINDING_REQUIRED naming the provider, the reason and the tier.
 */
export function bindingRequiredError(
  sessionId: string,
  provider: string,
  reason: string | null,
  tier: AttestationTier | null,
): CmcpError {
  return new CmcpError(
    'SESSION_BINDING_REQUIRED',
    `session refused: attestation provider ${provider} could not bind it (${reason ?? 'unknown'}); ` +
      `minimum_tier ${tier} requires a hardware binding`,
    { session_id: sessionId, provider, reason, minimum_tier: tier },
  );
}
