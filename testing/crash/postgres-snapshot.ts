/**
 * The crash test's snapshot (./snapshot.ts) of a replicas' PostgreSQL database, read in one
 * REPEATABLE READ transaction (one consistent view, PostgreSQL 15 docs §13.2.2). A claim's text
 * is `claims.canonical` whole (the PostgreSQL close stores it so, docs/replicas.md#sessions-across-replicas);
 * one that names parts (`claim_part_links`) is its first part (`claims.canonical`) and then parts
1…n, as src/store/sqlite/claim-text.ts reads them on SQLite.
 */
import pg from 'pg';
import type { CrashSnapshot, SnapshotEntry, SnapshotExecution } from './snapshot.js';

/** Reads the snapshot of the database at `url` (a libpq URI). @throws pg errors. */
export async function readPostgresSnapshot(url: string): Promise<CrashSnapshot> {
  const client = new pg.Client({ connectionString: url });
  client.on('error', () => undefined);
  await client.connect();
  try {
    await client.query('BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY');
    const entries = await client.query<SnapshotEntry & { sequence_number: string }>(
      `SELECT a.chain_id, a.sequence_number::text AS sequence_number, a.entry_hash, a.canonical, w.writer_signature
         FROM audit_entries a LEFT JOIN entry_writers w ON w.entry_hash = a.entry_hash
        ORDER BY a.chain_id, a.sequence_number`,
    );
    const sessions = await client.query<{ session_id: string }>('SELECT session_id FROM sessions');
    const claims = await client.query<{ session_id: string; text: string }>(
      `SELECT c.session_id,
              CASE WHEN l.text_id IS NULL THEN c.canonical
                   ELSE convert_from(convert_to(c.canonical, 'UTF8') ||
                          (SELECT string_agg(p.bytes, ''::bytea ORDER BY p.part) FROM claim_parts p
                            WHERE p.text_id = l.text_id AND p.part >= 1), 'UTF8') END AS text
         FROM claims c LEFT JOIN claim_part_links l ON l.claim_sequence = c.claim_sequence`,
    );
    const left = await client.query<{ a: string; x: string; s: string }>(
      `SELECT (SELECT COUNT(*) FROM call_attempts)::text AS a,
              (SELECT COUNT(*) FROM executions WHERE state = 'in_flight')::text AS x,
              (SELECT COUNT(*) FROM sessions WHERE status = 'open')::text AS s`,
    );
    const executions = await client.query<SnapshotExecution>(
      'SELECT agent_id, execution_id, state, terminal_entry_hash FROM executions',
    );
    const leases = await client.query<{ replica_id: string; state: string }>(
      'SELECT replica_id, state FROM replica_leases ORDER BY replica_id',
    );
    await client.query('COMMIT');
    const l = left.rows[0] as { a: string; x: string; s: string };
    return {
      entries: entries.rows.map((r) => ({ ...r, sequence_number: Number(r.sequence_number) })),
      claims: claims.rows,
      sessionIds: sessions.rows.map((r) => r.session_id),
      left: { attempts: Number(l.a), inFlight: Number(l.x), openSessions: Number(l.s) },
      executions: executions.rows,
      leases: leases.rows,
      openSessionsStay: true,
    };
  } finally {
    await client.end();
  }
}
