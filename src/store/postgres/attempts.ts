/**
 * The attempt log on PostgreSQL (docs/spec/execution.md#attempts, store/sqlite/attempts.ts): a
 * `call_attempts` row committed before the upstream is invoked, deleted in the transaction of
 * the call's terminal entry; what is left when its replica's lease expired is sealed by another
 * replica (./sealing.ts).
 */
import type pg from 'pg';
import { ATTEMPT_COLUMNS, attemptRowValues } from '../attempt-row.js';
import type { AttemptRow, AttemptStart } from '../port.js';

/**
 * Records an attempt owned by `owner`, inside the caller's fenced transaction.
 * @throws pg errors (a duplicate call_id is 23505).
 */
export async function beginAttempt(client: pg.ClientBase, a: AttemptStart, owner: string): Promise<void> {
  await client.query(
    `INSERT INTO call_attempts (${ATTEMPT_COLUMNS}) VALUES ($1,$2,$3,$4,$5,$6,$7,$8,$9,$10,$11)`,
    attemptRowValues(a, owner, new Date().toISOString()),
  );
}

/**
 * Ends an attempt inside the transaction that appends its terminal entry.
 * @throws when no attempt with this call_id is open (already sealed): the entry must not commit.
 */
export async function endAttempt(client: pg.ClientBase, callId: string): Promise<void> {
  const r = await client.query('DELETE FROM call_attempts WHERE call_id = $1', [callId]);
  if (r.rowCount !== 1)
    throw new Error(`no open attempt for call ${callId}: its terminal entry is already recorded`);
}

/** `owner`'s open attempts, oldest first. Reads only. */
export async function openAttempts(db: pg.Pool | pg.ClientBase, owner: string): Promise<AttemptRow[]> {
  const r = await db.query<AttemptRow>(
    'SELECT * FROM call_attempts WHERE owner = $1 ORDER BY started_at, call_id',
    [owner],
  );
  return r.rows;
}
