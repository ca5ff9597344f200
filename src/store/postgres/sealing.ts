/**
 * Sealing a replica's unfinished work (docs/replicas.md#leases-and-fencing-tokens, as start-up
 * recovery does on one host, store/sqlite/recovery.ts and docs/spec/execution.md#recovery): each open
 * attempt of the replica gets exactly one terminal `tool_call` entry, `outcome_unknown` with
 * CALL_INTERRUPTED, in the session chain it ran in (the gateway chain, naming the session, when
 * the session was closed), with its registry row moved and its attempt ended in the same
 * transaction; then every in-flight execution row of the replica that no attempt covered.
 *
 * Another replica's work is sealed only after its lease was taken over in a committed
 * transaction (./leases.ts takeExpiredLease): a live replica's lease is renewed, never expired,
 * so it is never selected; and every sealing transaction checks both the sealer's own fence and
 * that the sealed lease still carries the sealing token.
 */
import type pg from 'pg';
import type { MicroClock } from '../entries/clock.js';
import type { EntryInput } from '../entries/next-entry.js';
import { interruptedAttemptEntry, interruptedExecutionEntry, reservedByAttempt } from '../interrupted.js';
import type { AttemptRow, ExecutionRow } from '../port.js';
import { endAttempt, openAttempts } from './attempts.js';
import { appendEntry } from './chain.js';
import { finishExecution, getExecution, inFlightExecutions } from './executions.js';
import { type Fence, LeaseLostError, markSealed, takeExpiredLease } from './leases.js';
import { countCall, lockLiveChain } from './sessions.js';
import { fencedTransaction } from './transaction.js';

/** The `detail.reason` of entries sealed because their replica's lease expired. */
export const LEASE_EXPIRED_REASON = 'replica_lease_expired';

/** What one sealing ended. */
export interface Sealed {
  /** The replica whose work was sealed. */
  replicaId: string;
  attempts: number;
  executions: number;
}

/** Whose work is sealed, by whom, and the fence each transaction must pass besides the sealer's. */
interface SealScope {
  owner: string;
  sealer: Fence;
  reason: string;
  /** The sealed lease's sealing token (another replica's work), or null (the sealer's own). */
  sealingToken: number | null;
  clock?: MicroClock;
}

/**
 * One sweep: takes over one expired lease of another replica and seals its work.
 * @param sealer the sweeping replica's live fence.
 * @param ttlMs how long the sealing holds the row before another sweep may take it again.
 * @returns what was sealed, or null when no lease is expired.
 * @throws LeaseLostError when the sealer's lease is lost (what was sealed stays sealed); pg errors.
 */
export async function sealExpiredReplica(
  pool: pg.Pool,
  sealer: Fence,
  ttlMs: number,
  clock?: MicroClock,
): Promise<Sealed | null> {
  const taken = await takeExpiredLease(pool, sealer, ttlMs);
  if (!taken) return null;
  const sealed = await sealWork(pool, {
    owner: taken.replicaId,
    sealer,
    reason: LEASE_EXPIRED_REASON,
    sealingToken: taken.sealingToken,
    clock,
  });
  await markSealed(pool, taken.replicaId, taken.sealingToken);
  return sealed;
}

/**
 * A replica's recovery of its own previous lease's work, once it acquired its lease again
 * (`previous: 'expired'`), before it serves: the same entries as start-up recovery on SQLite.
 * @throws LeaseLostError; pg errors.
 */
export function recoverOwnWork(
  pool: pg.Pool,
  fence: Fence,
  reason: string,
  clock?: MicroClock,
): Promise<Sealed> {
  return sealWork(pool, { owner: fence.replicaId, sealer: fence, reason, sealingToken: null, clock });
}

async function sealWork(pool: pg.Pool, scope: SealScope): Promise<Sealed> {
  let attempts = 0;
  for (const a of await openAttempts(pool, scope.owner)) {
    await fencedTransaction(pool, scope.sealer, async (client) => {
      await checkSealing(client, scope);
      await sealAttempt(client, a, scope);
    });
    attempts++;
  }
  const legacy = await inFlightExecutions(pool, scope.owner);
  for (const row of legacy)
    await fencedTransaction(pool, scope.sealer, async (client) => {
      await checkSealing(client, scope);
      await sealExecution(client, row, scope);
    });
  return { replicaId: scope.owner, attempts, executions: legacy.length };
}

/** The sealed lease still carries this sealing's token (FOR KEY SHARE, as the fence). */
async function checkSealing(client: pg.ClientBase, scope: SealScope): Promise<void> {
  if (scope.sealingToken === null) return;
  const r = await client.query(
    `SELECT 1 FROM replica_leases WHERE replica_id = $1 AND lease_token = $2 AND state = 'sealing' FOR KEY SHARE`,
    [scope.owner, scope.sealingToken],
  );
  if (r.rowCount !== 1) throw new LeaseLostError({ replicaId: scope.owner, leaseToken: scope.sealingToken });
}

/** The sealing's `detail` beyond store/interrupted.ts's: who sealed whose work, when not its own. */
function sealedBy(scope: SealScope): Record<string, string> {
  return scope.owner === scope.sealer.replicaId
    ? {}
    : { sealed_replica: scope.owner, sealed_by: scope.sealer.replicaId };
}

async function sealAttempt(client: pg.ClientBase, a: AttemptRow, scope: SealScope): Promise<void> {
  const hash = await append(
    client,
    a.session_id,
    scope,
    interruptedAttemptEntry(a, scope.reason, sealedBy(scope)),
  );
  if (a.execution_id !== null) {
    const x = await getExecution(client, a.agent_id, a.execution_id);
    if (reservedByAttempt(x, a))
      await finishExecution(
        client,
        { agentId: a.agent_id, executionId: a.execution_id, callId: a.call_id },
        'outcome_unknown',
        hash,
      );
  }
  await endAttempt(client, a.call_id);
}

async function sealExecution(client: pg.ClientBase, row: ExecutionRow, scope: SealScope): Promise<void> {
  const hash = await append(
    client,
    row.session_id,
    scope,
    interruptedExecutionEntry(row, scope.reason, sealedBy(scope)),
  );
  await finishExecution(
    client,
    { agentId: row.agent_id, executionId: row.execution_id, callId: row.call_id },
    'outcome_unknown',
    hash,
  );
}

/** Appends to the session's chain while it is open (and counts the call), else the gateway chain. */
async function append(
  client: pg.ClientBase,
  sessionId: string,
  scope: SealScope,
  input: EntryInput,
): Promise<string> {
  const chainId = await lockLiveChain(client, sessionId);
  const e = await appendEntry(client, chainId, input, scope.clock, scope.sealer.writer);
  if (chainId === sessionId) await countCall(client, sessionId);
  return e.entry_hash;
}
