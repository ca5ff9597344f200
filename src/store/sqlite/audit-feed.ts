/**
 * The audit export feed on SQLite (store/port.ts AuditFeed): entries in rowid order. One writer
 * at a time appends and audit rows are never deleted, so every later commit has a higher rowid;
 * a read sees one snapshot, so nothing below the last rowid read can still appear. A cursor (an
 * entry_hash) is found by the unique index on entry_hash, so its rowid is never trusted from
 * outside.
 */

import { parseFeedCursor, unknownCursor } from '../entries/feed-cursor.js';
import type { AuditFeed, FeedEntry } from '../port.js';
import type { Db } from './db.js';

/** The feed over `db` (the gateway's connection, or a read-only one of `cmcp audit export`). */
export function sqliteAuditFeed(db: Db): AuditFeed {
  const positionOf = db.prepare<[string], { pos: number }>(
    'SELECT rowid AS pos FROM audit_entries WHERE entry_hash = ?',
  );
  const page = db.prepare<[number, number], Omit<FeedEntry, 'cursor'>>(
    `SELECT chain_id, sequence_number, entry_hash, canonical FROM audit_entries
     WHERE rowid > ? ORDER BY rowid LIMIT ?`,
  );
  return {
    async after(cursor: string | null, limit: number): Promise<FeedEntry[]> {
      let from = 0;
      if (cursor !== null) {
        const at = positionOf.get(parseFeedCursor(cursor));
        if (!at) throw unknownCursor();
        from = at.pos;
      }
      return page.all(from, limit).map((r) => ({ ...r, cursor: r.entry_hash }));
    },
  };
}
