/**
 * What the write commands need of a session on PostgreSQL: where its call's entry goes (its own
 * chain while open, else the gateway chain) and its call count. The session row is locked
 * FOR NO KEY UPDATE before its chain's tip (the lock order of every session write), so a close
 * committed by another replica cannot slip between the status read and the append, and two
 * terminals of one session queue on the row instead of deadlocking on a shared lock's upgrade.
 */
import { GATEWAY_CHAIN_ID } from '@cmcp/verify/formats';
import type pg from 'pg';

/**
 * The chain a session's call is recorded in, holding the session row's lock when it exists.
 * @returns `sessionId` while the session is open; the gateway chain when it is closed or unknown.
 */
export async function lockLiveChain(client: pg.ClientBase, sessionId: string): Promise<string> {
  const r = await client.query<{ status: string }>(
    'SELECT status FROM sessions WHERE session_id = $1 FOR NO KEY UPDATE',
    [sessionId],
  );
  return r.rows[0]?.status === 'open' ? sessionId : GATEWAY_CHAIN_ID;
}

/** Counts one call against the session, inside the caller's transaction. */
export async function countCall(client: pg.ClientBase, sessionId: string): Promise<void> {
  await client.query('UPDATE sessions SET call_count = call_count + 1 WHERE session_id = $1', [sessionId]);
}
