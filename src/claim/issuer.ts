/**
 * The one way a session's claim is built and signed (docs/spec/claims.md), for either engine's
 * close to store (store/port.ts ClaimIssuer): the adapter feeds it the chain a page at a time,
 * then asks for the signed claim after the claim chain's tip. A chain one writer wrote (every
 * single gateway's) gets a `/1` claim; a chain several replicas wrote gets the same claim with
 * the opening binding and every writer's member, `/2` (docs/spec/claims.md#replicas).
 */
import type { ReplicaMember, UnsignedTreeHeadClaim } from '@cmcp/verify/formats';
import { jwkThumbprint } from '@cmcp/verify/formats';
import type {
  ChainPageEntry,
  ClaimIssuer,
  ClaimTip,
  ClosingEntry,
  IssuedClaim,
  SessionRow,
} from '../store/port.js';
import { ChainSummary, type ClaimInputs, signedClaim, unsignedClaim } from './build.js';
import { openingBinding, replicasClaim } from './replicas.js';

/** The closing writer: its id and the key thumbprint its entries are written under. */
export interface ClosingReplica {
  replicaId: string;
  /** base64url thumbprint of the writer key; absent when its entries name no writer. */
  writer?: { keyThumbprint: string } | undefined;
}

/**
 * The issuer of one close's claim.
 * @param inputs the claim's inputs for the locked row (binding section, the closing key).
 * @param closing who closes (the store's fence).
 */
export function claimIssuer(inputs: (row: SessionRow) => ClaimInputs, closing: ClosingReplica): ClaimIssuer {
  const summary = new ChainSummary();
  const writers = new Set<string>();
  return {
    get lastSequence() {
      return summary.lastSequence;
    },
    tip: () => summary.chainTip(),
    add(page: readonly ChainPageEntry[]) {
      summary.add(page);
      for (const e of page) if (e.writer) writers.add(e.writer);
    },
    async issue(row, prev, members, closingEntry): Promise<IssuedClaim> {
      const inp = inputs(row);
      const unsigned =
        writers.size > 1
          ? replicasClaim(
              unsignedClaim(
                summary,
                { ...inp, binding: multiWriterBinding(row, inp, closing) },
                prev,
                closingEntry,
              ),
              await members([...writers]),
            )
          : singleWriterClaim(row, summary, inp, prev, closingEntry);
      return signedClaim(unsigned, inp.key);
    },
    issueNow(row, prev): IssuedClaim {
      if (writers.size > 1)
        throw new Error(`session ${row.session_id}: a claim of several writers is issued by issue()`);
      const inp = inputs(row);
      return signedClaim(singleWriterClaim(row, summary, inp, prev, undefined), inp.key);
    },
  };
}

/**
 * The opening binding of a chain several replicas wrote.
 * @throws Error when the signing key is not the closing replica's writer key: such a claim
 *   would not verify, so nothing is written.
 */
function multiWriterBinding(row: SessionRow, inp: ClaimInputs, closing: ClosingReplica) {
  const signer = jwkThumbprint(inp.jwk).toString('base64url');
  if (closing.writer?.keyThumbprint !== signer)
    throw new Error(
      `session ${row.session_id}: the closing key ${signer} is not replica ${closing.replicaId}'s writer key`,
    );
  return openingBinding(row) ?? inp.binding;
}

/**
 * The `/1` claim of a chain one writer wrote.
 * @throws Error when the binding names another key than the one signing (binding.key_thumbprint):
 *   such a claim would not verify. session/claim-binding.ts gives such a session's claim its
 *   absent binding under the closing key (docs/replicas.md#sessions-across-replicas).
 */
function singleWriterClaim(
  row: SessionRow,
  summary: ChainSummary,
  inp: ClaimInputs,
  prev: ClaimTip | undefined,
  closingEntry: ClosingEntry | undefined,
): UnsignedTreeHeadClaim {
  const signer = jwkThumbprint(inp.jwk).toString('base64url');
  if (inp.binding.preimage.key_thumbprint !== signer)
    throw new Error(
      `session ${row.session_id}: its binding names key ${inp.binding.preimage.key_thumbprint}, the closing key is ${signer}`,
    );
  return unsignedClaim(summary, inp, prev, closingEntry);
}

/** The members of a chain's writers, for an engine whose chains have one writer (SQLite). */
export const noMembers = async (): Promise<ReplicaMember[]> => [];
