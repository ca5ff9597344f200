/**
 * A replica's readiness write probe on PostgreSQL (`GET /readyz` database check): its own row
 * of `readiness_probe` upserted in one autocommitted statement.
 */
import type pg from 'pg';

/** The probe: its writer's row, written and committed (each replica its own row: no lock between them). */
const PROBE_UPSERT =
  'INSERT INTO readiness_probe (writer, probed_at) VALUES ($1, $2) ' +
  'ON CONFLICT (writer) DO UPDATE SET probed_at = excluded.probed_at';

/** The client's cut of one probe, ms: under readiness's own 3 s deadline per check. */
export const PROBE_TIMEOUT_MS = 2500;

/**
 * The write probe over `pool`, cut by the client after `timeoutMs` (node-postgres
 * `query_timeout`; the pool drops a connection whose query failed). Null once the write
 * committed, else the SQLSTATE, `timeout` or `unreachable`.
 * @param writer the replica's instance_id.
 */
export function postgresWriteProbe(
  pool: pg.Pool,
  writer: string,
  timeoutMs = PROBE_TIMEOUT_MS,
): () => Promise<string | null> {
  return () =>
    pool
      .query({
        text: PROBE_UPSERT,
        values: [writer, new Date().toISOString()],
        query_timeout: timeoutMs,
      } as pg.QueryConfig)
      .then(
        () => null,
        (e) => {
          const { code, message } = e as { code?: string; message?: string };
          if (code) return code;
          return /timeout/i.test(message ?? '') ? 'timeout' : 'unreachable';
        },
      );
}
