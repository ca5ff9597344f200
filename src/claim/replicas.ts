/**
 * A claim over a chain that more than one replica wrote (docs/spec/claims.md#replicas): profile
 * `cmcp.trace-claim/2`, the session binding as the opening replica made it (its key, its
 * evidence, the verifier's challenge), and `replicas`, every writer's start-up evidence. A
 * chain with one writer (every single gateway's, on SQLite) keeps its `/1` claim unchanged.
 */
import type { UnsignedTreeHeadClaim } from '@cmcp/verify/formats';
import { CLAIM_PROFILE_REPLICAS, type ReplicaMember } from '@cmcp/verify/formats';
import type { SessionBindingRecord } from './build.js';

/**
 * The binding record the opening replica stored on the session row (`binding_json` of
 * session/types.ts `SessionRow`), or undefined (never completed).
 */
export function openingBinding(row: { binding_json: string }): SessionBindingRecord | undefined {
  const record = JSON.parse(row.binding_json) as Partial<SessionBindingRecord>;
  return record.preimage && record.evidence ? (record as SessionBindingRecord) : undefined;
}

/**
 * `base` (built with the opening binding) as a `/2` claim listing `members`.
 * @param members the writers' recorded members (store/postgres/replica-evidence.ts); a writer
 *   without one is not listed, and a verifier names its entries (ENTRY_WRITER_NOT_ATTESTED).
 */
export function replicasClaim(
  base: UnsignedTreeHeadClaim,
  members: readonly ReplicaMember[],
): UnsignedTreeHeadClaim {
  return { ...base, profile: CLAIM_PROFILE_REPLICAS, replicas: [...members] };
}
