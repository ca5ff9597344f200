/**
 * The storage port's audit export feed (store/port.ts re-exports it): what `cmcp audit export`,
 * `GET /operator/audit` and `cmcp db verify` read, implemented by both engines.
 */
/** One stored audit entry as the export feed reads it (docs/audit-export.md). */
export interface FeedEntry {
  /** Where the feed resumes after this entry ({@link AuditFeed.after}): its entry_hash. */
  cursor: string;
  chain_id: string;
  sequence_number: number;
  entry_hash: string;
  /** The entry's stored canonical text (UTF-8 JCS), the text its entry_hash covers. */
  canonical: string;
}

/**
 * The audit export feed: every committed entry of every chain exactly once, in an order no later
 * commit can fall behind (SQLite: the rowid of the one writer's appends; PostgreSQL: the writing
 * transaction, read only once every older transaction has ended), so a reader that resumes from
 * the cursor of the last entry it kept sees neither a gap nor a duplicate.
 * SQLite: store/sqlite/audit-feed.ts; PostgreSQL: store/postgres/audit-feed.ts.
 */
export interface AuditFeed {
  /**
   * Up to `limit` entries after `cursor` (null: from the first entry), oldest first; empty when
   * none is committed yet.
   * @throws (rejects) CmcpError AUDIT_CURSOR_UNKNOWN when `cursor` is not an entry_hash of
   *   this database.
   */
  after(cursor: string | null, limit: number): Promise<FeedEntry[]>;
}
