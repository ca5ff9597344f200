/**
 * The claim of a session closed through a replica (docs/spec/claims.md#replicas): built from the
 * chain's summary and signed off the loop (./sign.ts), for the PostgreSQL adapter's close to
 * store (store/port.ts ClaimIssuer). `/2` with every writer's member when more than one replica
 * wrote the chain, else `/1` as a single gateway's.
 */
import { jwkThumbprint } from '@cmcp/verify/format/binding';
import type { UnsignedClaim } from '@cmcp/verify/format/claim';
import type { ReplicaMember } from '@cmcp/verify/format/replica';
import type { ChainPageEntry, ClaimIssuer, ClaimTip, IssuedClaim, SessionRow } from '../store/port.js';
import { ChainSummary, type ClaimInputs, unsignedClaim } from './build.js';
import { openingBinding, replicasClaim } from './replicas.js';
import { signClaimOffLoop } from './sign.js';

/** The closing replica: its id and the key thumbprint its entries are written under. */
export interface ClosingReplica {
  replicaId: string;
  /** base64url thumbprint of the replica's writer key; absent when its entries name no writer. */
  writer?: { keyThumbprint: string } | undefined;
}

/**
 * The issuer of one close's claim.
 * @param inputs the claim's inputs for the locked row (binding section, this replica's key).
 */
export function replicaClaimIssuer(
  inputs: (row: SessionRow) => ClaimInputs,
  closing: ClosingReplica,
): ClaimIssuer {
  const summary = new ChainSummary();
  const writers = new Set<string>();
  return {
    get lastSequence() {
      return summary.lastSequence;
    },
    add(page: readonly ChainPageEntry[]) {
      summary.add(page);
      for (const e of page) if (e.writer !== null) writers.add(e.writer);
    },
    async issue(row, prev, members): Promise<IssuedClaim> {
      const inp = inputs(row);
      const unsigned = await unsignedOf(row, [...writers], summary, inp, prev, closing, members);
      // Ed25519 over the claim's JCS, as @cmcp/verify/format/claim signClaim signs (docs/spec/claims.md).
      return signClaimOffLoop(unsigned, summary.transcriptBytes(), inp.key);
    },
  };
}

/**
 * The close's unsigned claim (module doc).
 * @throws Error when the signing key is not this replica's writer key (`/2`) or not the key the
 *   binding names (`/1`): such a claim would not verify, so nothing is written.
 */
async function unsignedOf(
  row: SessionRow,
  /** The key thumbprints of the chain's writers (its entries' `replica`). */
  writers: readonly string[],
  summary: ChainSummary,
  inp: ClaimInputs,
  prev: ClaimTip | undefined,
  closing: ClosingReplica,
  members: (writers: readonly string[]) => Promise<ReplicaMember[]>,
): Promise<UnsignedClaim> {
  const sessionId = row.session_id;
  const signer = jwkThumbprint(inp.jwk).toString('base64url');
  if (writers.length > 1) {
    if (closing.writer?.keyThumbprint !== signer)
      throw new Error(
        `session ${sessionId}: the closing key ${signer} is not replica ${closing.replicaId}'s writer key`,
      );
    const binding = openingBinding(row) ?? inp.binding;
    return replicasClaim(unsignedClaim(summary, { ...inp, binding }, prev), await members(writers));
  }
  // A /1 claim whose binding names another key than the one signing it would not verify
  // (binding.key_thumbprint); session/claim-binding.ts gives such a session's claim its absent
  // binding under the closing key (docs/replicas.md#sessions-across-replicas).
  if (inp.binding.preimage.key_thumbprint !== signer)
    throw new Error(
      `session ${sessionId}: its binding names key ${inp.binding.preimage.key_thumbprint}, the closing key is ${signer}`,
    );
  return unsignedClaim(summary, inp, prev);
}
