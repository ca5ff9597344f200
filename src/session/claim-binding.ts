/**
 * The binding section a session's claim carries (docs/spec/binding.md), from the record stored
 * at the session's creation and the key that signs the claim now.
 */
import { b64u, bindingDigest, reportData, type SessionBindingPreimage } from '@cmcp/verify/formats';
import type { ClaimInputs, SessionBindingRecord } from '../claim/build.js';
import type { GatewayKey, SessionFacts, SessionRow } from './types.js';

/**
 * The binding section for a session's claim. A session opened under an earlier process's
 * key cannot be claimed as bound by this key: its evidence is reported absent
 * (`GATEWAY_KEY_ROTATED`) with a preimage naming the current key, so the claim verifies
 * as signed-only rather than pretending to a binding.
 * @param thumbprint the JWK thumbprint (RFC 7638) of the gateway key that signs the claim, raw bytes.
 * @param providerName the attestation provider named when the record has none.
 */
export function claimBinding(
  row: SessionRow,
  thumbprint: Uint8Array,
  facts: SessionFacts,
  providerName: string,
): SessionBindingRecord {
  const record = JSON.parse(row.binding_json) as Partial<SessionBindingRecord>;
  const thumb = b64u(thumbprint);
  if (record.preimage && record.evidence && record.preimage.key_thumbprint === thumb) {
    return record as SessionBindingRecord;
  }
  // Keep what the session was opened under (challenge, measurement, policy and catalog
  // hashes); only the key that signs the claim is this process's.
  const preimage: SessionBindingPreimage = record.preimage
    ? { ...record.preimage, key_thumbprint: thumb }
    : {
        domain: 'cmcp.session-binding',
        version: 1,
        session_id: row.session_id,
        chain_root: row.chain_root,
        key_thumbprint: thumb,
        gateway_measurement: facts.gatewayMeasurement,
        policy_bundle_hash: facts.policyBundleHash,
        catalog_hash: facts.catalogHash,
        challenge: null,
      };
  const rd = reportData(thumbprint, bindingDigest(preimage));
  const measurement = (record.evidence as { measurement?: unknown } | undefined)?.measurement;
  return {
    preimage,
    evidence: {
      provider: record.evidence?.provider ?? providerName,
      status: 'absent',
      reason: record.preimage ? 'GATEWAY_KEY_ROTATED' : 'BINDING_NOT_COMPLETED',
      report_data: b64u(rd),
      tpm: null,
      ...(measurement ? { measurement } : {}),
    } as SessionBindingRecord['evidence'],
  };
}

/**
 * What a session's claim is issued from (claim/build.ts ClaimInputs): its {@link claimBinding}
 * and the key that signs it now, for the session service's closes on either engine (./service.ts).
 * @param providerName as {@link claimBinding}'s.
 */
export function claimInputsFor(
  row: SessionRow,
  sessionId: string,
  agentId: string,
  key: GatewayKey,
  facts: SessionFacts,
  providerName: string,
): ClaimInputs {
  return {
    sessionId,
    agentId,
    binding: claimBinding(row, key.thumbprint, facts, providerName),
    key: key.privateKey,
    jwk: key.jwk,
    enforcementMode: facts.enforcementMode,
  };
}
