/**
 * The audit export feed on PostgreSQL (store/port.ts AuditFeed). Replicas append concurrently,
 * so no serial is commit order; each entry carries its era, its writing transaction's id and a
 * serial (migrations/postgres.ts version 7). A read returns the current era's entries only from
 * transactions older than the oldest still running (`pg_snapshot_xmin`, PostgreSQL docs §9.27):
 * each of those has ended, so no entry can later commit at or below a position read. A long
 * transaction anywhere on the server delays the feed; it never makes it skip. Entries of an
 * earlier era (restored) have all committed. A cursor (an entry_hash) is found by its unique index.
 */
import type pg from 'pg';
import { parseFeedCursor, unknownCursor } from '../entries/feed-cursor.js';
import type { AuditFeed, FeedEntry } from '../port.js';

interface FeedRow {
  chain_id: string;
  sequence_number: string;
  entry_hash: string;
  canonical: string;
}

/** The feed over `db` (a replica's pool, or the client of `cmcp audit export`). */
export function postgresAuditFeed(db: pg.Pool | pg.ClientBase): AuditFeed {
  return {
    async after(cursor: string | null, limit: number): Promise<FeedEntry[]> {
      let position: [string, string, string] = ['-1', '0', '0'];
      if (cursor !== null) {
        const at = await db.query<{ era: string; xid: string; serial: string }>(
          `SELECT feed_era::text AS era, feed_xid::text AS xid, feed_serial::text AS serial
           FROM audit_entries WHERE entry_hash = $1`,
          [parseFeedCursor(cursor)],
        );
        const row = at.rows[0];
        if (!row) throw unknownCursor();
        position = [row.era, row.xid, row.serial];
      }
      const r = await db.query<FeedRow>(
        `SELECT chain_id, sequence_number::text, entry_hash, canonical FROM audit_entries
         WHERE (feed_era, feed_xid, feed_serial) > ($1::bigint, $2::xid8, $3::bigint)
           AND (feed_era < (SELECT era FROM audit_feed_era)
                OR feed_xid < pg_snapshot_xmin(pg_current_snapshot()))
         ORDER BY feed_era, feed_xid, feed_serial LIMIT $4`,
        [...position, limit],
      );
      return r.rows.map((row) => ({
        cursor: row.entry_hash,
        chain_id: row.chain_id,
        sequence_number: Number(row.sequence_number),
        entry_hash: row.entry_hash,
        canonical: row.canonical,
      }));
    },
  };
}
