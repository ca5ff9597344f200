/**
 * A replica binds its own gateway key and measurement into its own hardware evidence at start
 * (docs/replicas.md#replica-identity-in-entries, docs/spec/binding.md#replica-binding):
 * REPORT_DATA = key_thumbprint ‖ SHA-256(JCS(preimage)) for the `cmcp.replica-binding`
 * preimage (the session binding's construction, another domain), recorded with the store
 * (store/postgres/replica-evidence.ts). A `/2` claim lists this member for every entry the
 * replica writes. A failed bind is recorded as absent evidence with its reason, as a session's
 * is: the replica serves, and claims over its entries are signed-only.
 */

import type { EvidenceJson } from '@cmcp/verify/formats';
import {
  b64u,
  type ReplicaBindingPreimage,
  type ReplicaMember,
  replicaBindingDigest,
  reportData,
} from '@cmcp/verify/formats';
import type { Logger } from 'pino';
import { type AttestationProvider, BindingError } from '../tee/provider.js';
import { absentEvidence } from './binding-record.js';
import type { GatewayKey, SessionFacts } from './types.js';

/** A replica's lease as its start-up evidence names it. */
export interface ReplicaFence {
  replicaId: string;
  leaseToken: number;
}

/** The replica's start-up preimage under its fence (its lease token) and key. */
export function replicaPreimage(
  fence: ReplicaFence,
  key: GatewayKey,
  facts: SessionFacts,
): ReplicaBindingPreimage {
  return {
    domain: 'cmcp.replica-binding',
    version: 1,
    replica_id: fence.replicaId,
    lease_token: fence.leaseToken,
    key_thumbprint: b64u(key.thumbprint),
    gateway_measurement: facts.gatewayMeasurement,
    policy_bundle_hash: facts.policyBundleHash,
    catalog_hash: facts.catalogHash,
  };
}

/**
 * Binds the replica's key into `provider`'s evidence and records it (entry and row). Once per
 * start, after the lease is acquired and before the replica serves.
 * @param record stores the member (store/postgres/replica-evidence.ts recordReplicaStart under the fence).
 * @param fence the replica's fence, its writer the same `key`.
 * @returns (resolves) the recorded member.
 * @throws (rejects) LeaseLostError; pg errors; Error when the fence's writer is another key.
 *   A failed bind does not throw (absent evidence with the provider's reason).
 */
export async function attestReplica(
  record: (member: ReplicaMember) => Promise<unknown>,
  fence: ReplicaFence,
  key: GatewayKey,
  provider: AttestationProvider,
  facts: SessionFacts,
  log: Logger,
): Promise<ReplicaMember> {
  const preimage = replicaPreimage(fence, key, facts);
  const rd = reportData(key.thumbprint, replicaBindingDigest(preimage));
  let evidence: EvidenceJson;
  try {
    const bound = await provider.bind(rd);
    evidence = { provider: provider.name, status: 'bound', reason: null, report_data: b64u(rd), ...bound };
  } catch (e) {
    const reason = e instanceof BindingError ? e.reason : 'PROVIDER_FAULT';
    log.warn(
      { replica_id: fence.replicaId, provider: provider.name, reason, err: (e as Error).message },
      'replica attestation failed; its entries are signed-only',
    );
    evidence = absentEvidence(provider.name, reason, rd, provider.measurementEvidence?.() ?? null);
  }
  const member: ReplicaMember = {
    replica_id: fence.replicaId,
    lease_token: fence.leaseToken,
    cnf: { jwk: key.jwk },
    binding: { preimage },
    evidence,
  };
  await record(member);
  return member;
}
