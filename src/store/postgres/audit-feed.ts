/**
 * The audit export feed on PostgreSQL (store/port.ts AuditFeed). Replicas append concurrently,
 * so no serial is commit order; each entry carries its writing transaction's id (`feed_xid`,
 * migrations/postgres.ts version 7) and a serial. A read returns only entries of transactions
 * older than the oldest still running (`pg_snapshot_xmin`, PostgreSQL 13+ docs §9.27.10): every
 * such transaction has ended, so no entry can later commit at or below a position read. A long
 * transaction anywhere on the server delays the feed; it never makes it skip. The cursor's
 * position is `p.<feed_xid>.<feed_serial>`.
 */
import type pg from 'pg';
import { formatFeedCursor, parseFeedCursor, unknownCursor } from '../entries/feed-cursor.js';
import type { AuditFeed, FeedEntry } from '../port.js';

interface FeedRow {
  xid: string;
  serial: string;
  chain_id: string;
  sequence_number: string;
  entry_hash: string;
  canonical: string;
}

/** The feed over `db` (a replica's pool, or the client of `cmcp audit export`). */
export function postgresAuditFeed(db: pg.Pool | pg.ClientBase): AuditFeed {
  return {
    async after(cursor: string | null, limit: number): Promise<FeedEntry[]> {
      let xid = '0';
      let serial = '0';
      if (cursor !== null) {
        const c = parseFeedCursor(cursor, /^p\.[0-9]{1,20}\.[0-9]{1,19}$/);
        [, xid = '0', serial = '0'] = c.position.split('.');
        const at = await db.query<{ entry_hash: string }>(
          'SELECT entry_hash FROM audit_entries WHERE feed_xid = $1::xid8 AND feed_serial = $2::bigint',
          [xid, serial],
        );
        if (at.rows[0]?.entry_hash !== c.entryHash) throw unknownCursor();
      }
      const r = await db.query<FeedRow>(
        `SELECT feed_xid::text AS xid, feed_serial::text AS serial, chain_id, sequence_number::text,
           entry_hash, canonical
         FROM audit_entries
         WHERE (feed_xid, feed_serial) > ($1::xid8, $2::bigint)
           AND feed_xid < pg_snapshot_xmin(pg_current_snapshot())
         ORDER BY feed_xid, feed_serial LIMIT $3`,
        [xid, serial, limit],
      );
      return r.rows.map((row) => ({
        cursor: formatFeedCursor(`p.${row.xid}.${row.serial}`, row.entry_hash),
        chain_id: row.chain_id,
        sequence_number: Number(row.sequence_number),
        entry_hash: row.entry_hash,
        canonical: row.canonical,
      }));
    },
  };
}
