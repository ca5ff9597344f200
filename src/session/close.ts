/**
 * A session's close with its claim's heavy work before the closing transaction.
 * The claim depends on three things only the closing transaction can be sure of: the
 * session chain's tip (which `session_close` follows), the claim chain's tip (claim_sequence,
 * prev_claim_hash) and the session row. They are read first and everything is built after
 * them — the `session_close` entry with its hash, the claim, its Ed25519 signature (on the
 * thread pool) and the stored text's SHA-256 (in slices; claim/sign.ts), and a long text's parts after the
 * first written in small transactions of their own (claim/parts.ts) — and the one IMMEDIATE
 * transaction then checks that none of the three moved and writes `session_close`, the
 * session's status and the claim (its first part, and the link to the rest) together
 * (docs/spec/claims.md#issuing-a-claim). If one moved (an entry appended by a call still in
 * flight, a claim issued by another process), nothing is written, the parts are removed and
 * the claim is built again; closes in this process take turns, so they never make each other
 * build again.
 */

import { setTimeout } from 'node:timers/promises';
import type { Claim } from '@cmcp/verify/format/claim';
import type { AuditChain } from '../audit/chain.js';
import { type ChainSummary, type ClaimInputs, claimTip, insertClaim, unsignedClaim } from '../claim/build.js';
import {
  claimPartsStored,
  discardClaimParts,
  linkClaimParts,
  PART_BYTES,
  writeClaimParts,
} from '../claim/parts.js';
import { signClaimOffLoop } from '../claim/sign.js';
import { type Db, immediateAsync } from '../store/db.js';
import { catchUp } from './paged.js';
import type { SessionRow } from './types.js';

/** Tries with the work before the transaction before the close signs inside it (as the blocking close does). */
const TRIES = 3;

/** What a close needs from the session service. */
export interface CloseDeps {
  db: Db;
  chain: AuditChain;
  sessionId: string;
  agentId: string;
  reason: string;
  /** This gateway's instance_id (the owner of the claim text's parts it writes). */
  owner: string;
  /** The session row as stored now. */
  row(): SessionRow | undefined;
  /**
   * The stored claim when the row says the session is already closed, null when it is open
   * and this instance may close it. @throws CmcpError UNKNOWN_SESSION otherwise.
   */
  closedClaim(row: SessionRow | undefined): Claim | null;
  /** The claim's inputs for the row (binding section, key, enforcement mode). */
  inputs(row: SessionRow): ClaimInputs;
  /** The close done inside one transaction, signing on the event loop (the fallback). */
  closeInTransaction(summary: ChainSummary): Claim;
}

/** The stored canonical text of each claim a close here issued (so its answer needs no read). */
const texts = new WeakMap<Claim, Buffer>();

/** The canonical text (UTF-8 JCS) stored for `claim` if this process's close issued it, else undefined. */
export function issuedText(claim: Claim): Buffer | undefined {
  return texts.get(claim);
}

/** Keeps `canonical` as the stored text of `claim`, issued by this process (a replica's close). */
export function rememberIssuedText(claim: Claim, canonical: Buffer): void {
  texts.set(claim, canonical);
}

/** One close at a time per connection: each builds after the claim the one before it stored. */
const turns = new WeakMap<Db, Promise<unknown>>();

function inTurn<T>(db: Db, fn: () => Promise<T>): Promise<T> {
  const run = (turns.get(db) ?? Promise.resolve()).then(fn, fn);
  turns.set(
    db,
    run.catch(() => undefined),
  );
  return run;
}

/**
 * Closes the session of `d` whose chain `summary` covers (read in pages beforehand; caught up
 * here), returning its claim.
 * @throws CmcpError UNKNOWN_SESSION; SQLITE_BUSY once the busy timeout has passed.
 */
export async function closeOffLoop(d: CloseDeps, summary: ChainSummary): Promise<Claim> {
  for (let i = 0; i < TRIES; i++) {
    const claim = await inTurn(d.db, () => tryClose(d, summary));
    if (claim) return claim;
  }
  return immediateAsync(d.db, () => d.closeInTransaction(summary));
}

/** One try: the claim, or null when the chain, the claim chain or the row moved meanwhile. */
async function tryClose(d: CloseDeps, summary: ChainSummary): Promise<Claim | null> {
  await setTimeout(0); // not in the turn of the loop that read the last page
  const row = d.row();
  const closed = d.closedClaim(row);
  if (closed || !row) return closed;
  catchUp(d.chain, d.sessionId, summary);
  const inputs = d.inputs(row);
  const prev = claimTip(d.db);
  const close = d.chain.prepareNext(
    d.sessionId,
    {
      entry_type: 'session_close',
      session_id: d.sessionId,
      agent_id: d.agentId,
      detail: { reason: d.reason, calls: row.call_count },
    },
    summary.chainTip(),
  );
  const unsigned = unsignedClaim(summary, inputs, prev, { ...close.body, entry_hash: close.entry_hash });
  const signed = await signClaimOffLoop(unsigned, summary.transcriptBytes(), inputs.key);
  const parts = await writeClaimParts(d.db, d.owner, signed.canonical);
  let claim: Claim | null = null;
  try {
    claim = await immediateAsync(d.db, () => {
      const now = d.row();
      const closedNow = d.closedClaim(now);
      if (closedNow || !now) return closedNow;
      if (now.call_count !== row.call_count || now.binding_json !== row.binding_json) return null;
      if (claimTip(d.db)?.claim_hash !== prev?.claim_hash) return null;
      if (parts && !claimPartsStored(d.db, parts)) return null;
      if (!d.chain.appendPrepared(close)) return null;
      d.db
        .prepare("UPDATE sessions SET status = 'closed', closed_at = ? WHERE session_id = ?")
        .run(new Date().toISOString(), d.sessionId);
      insertClaim(d.db, d.sessionId, signed, parts ? PART_BYTES : signed.canonical.length);
      if (parts) linkClaimParts(d.db, signed.claim.claim_sequence, parts);
      texts.set(signed.claim, signed.canonical);
      return signed.claim;
    });
  } finally {
    // Parts the closing transaction did not link (it found something moved, or failed); if
    // even this fails, the next start removes them.
    if (parts && claim !== signed.claim) await discardClaimParts(d.db, parts).catch(() => undefined);
  }
  return claim;
}
