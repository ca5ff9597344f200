/**
 * The reads a replica serves on PostgreSQL beside its sessions' (session-store.ts): an agent's
 * open sessions, its newest open default session, and the counts the metrics scrape. Reads
 * only, on committed state (docs/replicas.md#the-storage-contract: no read later upgraded to a
 * write), from the primary.
 */
import type pg from 'pg';

/** How many sessions of `agentId` are open now, whichever replica opened them. */
export async function openSessionCount(db: pg.Pool, agentId: string): Promise<number> {
  const r = await db.query<{ n: string }>(
    "SELECT count(*) AS n FROM sessions WHERE agent_id = $1 AND status = 'open'",
    [agentId],
  );
  return Number(r.rows[0]?.n ?? 0);
}

/** The session_id of the agent's newest open default session, whichever replica opened it, or undefined. */
export async function openDefaultSession(db: pg.Pool, agentId: string): Promise<string | undefined> {
  const r = await db.query<{ session_id: string }>(
    `SELECT session_id FROM sessions WHERE agent_id = $1 AND is_default = 1 AND status = 'open'
     ORDER BY created_ms DESC LIMIT 1`,
    [agentId],
  );
  return r.rows[0]?.session_id;
}

/** Sessions open now, all agents (the `cmcp_open_sessions` gauge). */
export async function openSessionsTotal(db: pg.Pool): Promise<number> {
  const r = await db.query<{ n: string }>("SELECT count(*) AS n FROM sessions WHERE status = 'open'");
  return Number(r.rows[0]?.n ?? 0);
}

/** Execution registry rows by state (the `cmcp_executions` gauge). */
export async function executionStates(db: pg.Pool): Promise<{ state: string; n: number }[]> {
  const r = await db.query<{ state: string; n: string }>(
    'SELECT state, count(*) AS n FROM executions GROUP BY state',
  );
  return r.rows.map((x) => ({ state: x.state, n: Number(x.n) }));
}
