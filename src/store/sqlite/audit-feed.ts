/**
 * The audit export feed on SQLite (store/port.ts AuditFeed): entries in rowid order. One writer
 * at a time appends and audit rows are never deleted, so a rowid is never reused and every
 * later commit has a higher one; a read sees one snapshot, so nothing below the last rowid read
 * can still appear. The cursor's position is `s.<rowid>`.
 */
import type { Db } from '../db.js';
import { formatFeedCursor, parseFeedCursor, unknownCursor } from '../entries/feed-cursor.js';
import type { AuditFeed, FeedEntry } from '../port.js';

interface FeedRow {
  pos: number;
  chain_id: string;
  sequence_number: number;
  entry_hash: string;
  canonical: string;
}

/** The feed over `db` (the gateway's connection, or a read-only one of `cmcp audit export`). */
export function sqliteAuditFeed(db: Db): AuditFeed {
  const hashAt = db.prepare<[number], { entry_hash: string }>(
    'SELECT entry_hash FROM audit_entries WHERE rowid = ?',
  );
  const page = db.prepare<[number, number], FeedRow>(
    `SELECT rowid AS pos, chain_id, sequence_number, entry_hash, canonical FROM audit_entries
     WHERE rowid > ? ORDER BY rowid LIMIT ?`,
  );
  return {
    async after(cursor: string | null, limit: number): Promise<FeedEntry[]> {
      let from = 0;
      if (cursor !== null) {
        const c = parseFeedCursor(cursor, /^s\.[1-9][0-9]{0,15}$/);
        from = Number(c.position.slice(2));
        if (hashAt.get(from)?.entry_hash !== c.entryHash) throw unknownCursor();
      }
      return page.all(from, limit).map((r) => ({
        cursor: formatFeedCursor(`s.${r.pos}`, r.entry_hash),
        chain_id: r.chain_id,
        sequence_number: r.sequence_number,
        entry_hash: r.entry_hash,
        canonical: r.canonical,
      }));
    },
  };
}
