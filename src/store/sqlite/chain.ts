/**
 * Appending to and reading hash chains (docs/spec/audit-entries.md). Every append runs inside the caller's
 * `BEGIN IMMEDIATE` transaction (or opens one), reads the chain tip, and writes the next
 * entry with its exact canonical text; the UNIQUE constraints on (chain_id, sequence) and
 * (chain_id, prev_entry_hash) make a forked chain impossible even across processes.
 */
import type { AuditBundle, AuditEntry } from '@cmcp/verify/formats';
import { formatMicros, type MicroClock, systemMicroClock } from '../entries/clock.js';
import {
  type ClaimPageEntry,
  type ClaimPageRow,
  chainBundleOf,
  claimPageEntry,
  ENTRY_COLUMNS,
  entryRowValues,
  storedEntry,
} from '../entries/entry-row.js';
import { buildNextEntry, type ChainTip, type EntryInput, type PreparedEntry } from '../entries/next-entry.js';
import { type Db, immediate, immediateAsync, inImmediate } from './db.js';
import { appendToTree } from './tree.js';

export type { ClaimPageEntry, ClaimPageRow } from '../entries/entry-row.js';
export { claimPageEntry } from '../entries/entry-row.js';
export type { ChainTip, EntryInput, PreparedEntry } from '../entries/next-entry.js';

/** Chain reading and writing over one database connection. */
export class AuditChain {
  private readonly tipStmt;
  private readonly insertStmt;
  private readonly chainStmt;
  private readonly pageStmt;
  private readonly claimPageStmt;

  constructor(
    readonly db: Db,
    private readonly clock: MicroClock = systemMicroClock,
  ) {
    this.tipStmt = db.prepare<[string], ChainTip>(
      'SELECT sequence_number, entry_hash, timestamp_utc FROM audit_entries WHERE chain_id = ? ORDER BY sequence_number DESC LIMIT 1',
    );
    this.insertStmt = db.prepare(
      `INSERT INTO audit_entries (${ENTRY_COLUMNS}) VALUES (?,?,?,?,?,?,?,?,?,?,?)`,
    );
    this.chainStmt = db.prepare<[string], { canonical: string; entry_hash: string }>(
      'SELECT canonical, entry_hash FROM audit_entries WHERE chain_id = ? ORDER BY sequence_number',
    );
    // One page of the bundle's entries as one JSON text, made by SQLite (json_object escapes
    // the stored canonical text as a JSON string): one string per page rather than a row
    // object and a JSON.stringify per entry, less garbage for the scavenges that fall inside an
    // export. The separator before the page (',' or '') is SQLite's too: a
    // `,${text}` made in JS is a cons string, which the socket's write then flattens, a copy of
    // the whole page into new memory (1–8 ms of one turn).
    this.pageStmt = db.prepare<
      [string, string, number, number, number],
      { last: number | null; entries: number; text: string | null }
    >(
      `SELECT max(sequence_number) AS last, count(*) AS entries,
         ? || group_concat(json_object('canonical', canonical, 'entry_hash', entry_hash), ',' ORDER BY sequence_number) AS text
       FROM (SELECT sequence_number, canonical, entry_hash FROM audit_entries
             WHERE chain_id = ? AND sequence_number > ? AND sequence_number <= ? ORDER BY sequence_number LIMIT ?)`,
    );
    this.claimPageStmt = db.prepare<[string, number, number], ClaimPageRow>(
      `SELECT sequence_number, entry_type, entry_hash, timestamp_utc,
         CASE WHEN instr(canonical, '\\u') > 0 THEN canonical END AS escaped,
         json_extract(canonical, '$.tool_name') AS tool_name,
         json_extract(canonical, '$.policy_decision') AS policy_decision,
         json_extract(canonical, '$.policy_rule_matched') AS rules,
         json_extract(canonical, '$.disposition') AS disposition,
         json_extract(canonical, '$.error_code') AS error_code
       FROM audit_entries WHERE chain_id = ? AND sequence_number > ? ORDER BY sequence_number LIMIT ?`,
    );
  }

  /**
   * Appends one entry to `chainId`. Must run inside an IMMEDIATE transaction when combined
   * with other writes; called alone it opens its own.
   * @returns the stored entry (with `entry_hash`).
   * @throws CanonicalJsonError if a field holds a value JCS cannot carry; SQLite errors.
   */
  /**
   * {@link append} in its own IMMEDIATE transaction, for request paths: a write lock held by
   * another process is waited for by awaiting (store/sqlite/db.ts immediateAsync).
   * @throws (rejects) as {@link append}; SQLITE_BUSY once the busy timeout has passed.
   */
  appendAwaited(chainId: string, input: EntryInput): Promise<AuditEntry> {
    return immediateAsync(this.db, () => this.append(chainId, input));
  }

  append(chainId: string, input: EntryInput): AuditEntry {
    if (!this.db.inTransaction) return immediate(this.db, () => this.append(chainId, input));
    // Never upgrade a deferred transaction whose reads may already be stale (C-SQL-1).
    if (!inImmediate(this.db))
      throw new Error('audit append inside a transaction that is not BEGIN IMMEDIATE');
    return this.write(this.prepareNext(chainId, input, this.tip(chainId)));
  }

  /** The chain's tip (its last entry's sequence number, hash and timestamp), or undefined when empty. */
  tip(chainId: string): ChainTip | undefined {
    return this.tipStmt.get(chainId);
  }

  /**
   * The entry {@link append} would write after `tip`, built (canonical text and hash) but not
   * written: a caller that must do heavy work over it before its transaction (a session's
   * claim) builds it first and writes it with {@link appendPrepared}.
   * @throws CanonicalJsonError if a field holds a value JCS cannot carry.
   */
  prepareNext(chainId: string, input: EntryInput, tip: ChainTip | undefined): PreparedEntry {
    return buildNextEntry(chainId, input, tip, formatMicros(this.clock()));
  }

  /**
   * Writes an entry built by {@link prepareNext} if the chain's tip is still the one it was
   * built after; otherwise writes nothing. Must run inside an IMMEDIATE transaction.
   * @returns the stored entry, or null when the chain has moved on (build it again).
   */
  appendPrepared(entry: PreparedEntry): AuditEntry | null {
    if (!inImmediate(this.db)) throw new Error('audit append outside a BEGIN IMMEDIATE transaction');
    const tip = this.tip(entry.body.chain_id);
    if ((tip ? tip.sequence_number + 1 : 0) !== entry.body.sequence_number) return null;
    if ((tip?.entry_hash ?? 'genesis') !== entry.body.prev_entry_hash) return null;
    return this.write(entry);
  }

  private write(entry: PreparedEntry): AuditEntry {
    this.insertStmt.run(...entryRowValues(entry));
    appendToTree(
      this.db,
      entry.body.chain_id,
      entry.body.sequence_number,
      entry.entry_hash,
      entry.body.timestamp_utc,
    );
    return { ...entry.body, entry_hash: entry.entry_hash };
  }

  /** All entries of a chain in sequence order, parsed from their stored canonical text. */
  entries(chainId: string): AuditEntry[] {
    return this.chainStmt.all(chainId).map(storedEntry);
  }

  /**
   * Up to `limit` entries of a chain after sequence number `after`, in sequence order (one short
   * read), with only what a claim reads of each entry (src/claim/build.ts ChainSummary):
   * the fields are taken out of the stored text by SQLite (json_extract), so a 10,000-entry
   * close does not parse and drop ~1 KB of JavaScript objects per entry (the garbage whose
   * young-generation collections held the event loop). An entry whose text holds a `\u` escape
   * is parsed whole (as {@link entries} parses every entry), so every value is the one JSON.parse gives.
   */
  claimPage(chainId: string, after: number, limit: number): ClaimPageEntry[] {
    return this.claimPageStmt.all(chainId, after, limit).map(claimPageEntry);
  }

  /** A chain's entries of the given types, in sequence order (e.g. the gateway chain's blocks). */
  entriesOfTypes(chainId: string, types: readonly string[]): AuditEntry[] {
    if (types.length === 0) return [];
    return this.db
      .prepare<string[], { canonical: string; entry_hash: string }>(
        `SELECT canonical, entry_hash FROM audit_entries WHERE chain_id = ? AND entry_type IN (${types.map(() => '?').join(',')}) ORDER BY sequence_number`,
      )
      .all(chainId, ...types)
      .map(storedEntry);
  }

  /**
   * A chain's refused entries (`disposition = 'refused'`) stamped at or after `sinceUtc`
   * (RFC 3339, the chain's own timestamp format, so the comparison is lexical), in sequence order.
   */
  refusedSince(chainId: string, sinceUtc: string): AuditEntry[] {
    return this.db
      .prepare<[string, string], { canonical: string; entry_hash: string }>(
        "SELECT canonical, entry_hash FROM audit_entries WHERE chain_id = ? AND timestamp_utc >= ? AND json_extract(canonical, '$.disposition') = 'refused' ORDER BY sequence_number",
      )
      .all(chainId, sinceUtc)
      .map(storedEntry);
  }

  /**
   * Refused entries of every chain (the gateway chain's and each session's, where policy
   * denials are recorded) stamped at or after `sinceUtc`, newest first; at most `limit` (the
   * newest). Not indexed by time: a scan of the audit table (console pages only).
   */
  refusedInAnyChainSince(sinceUtc: string, limit: number): AuditEntry[] {
    return this.db
      .prepare<[string, number], { canonical: string; entry_hash: string }>(
        "SELECT canonical, entry_hash FROM audit_entries WHERE timestamp_utc >= ? AND json_extract(canonical, '$.disposition') = 'refused' ORDER BY timestamp_utc DESC LIMIT ?",
      )
      .all(sinceUtc, limit)
      .map(storedEntry);
  }

  /**
   * Entries of every chain matching each given field (null: any), newest first, at most
   * `limit`. Times are RFC 3339 in the chain's own format (compared lexically); `from` is
   * inclusive, `to` exclusive. Not indexed: a full scan bounded by `limit` matches (console).
   */
  search(
    f: {
      agentId: string | null;
      tool: string | null;
      disposition: string | null;
      from: string | null;
      to: string | null;
    },
    limit: number,
  ): AuditEntry[] {
    return this.db
      .prepare<Record<string, string | number | null>, { canonical: string; entry_hash: string }>(
        `SELECT canonical, entry_hash FROM audit_entries
         WHERE (@agent IS NULL OR agent_id = @agent)
           AND (@tool IS NULL OR json_extract(canonical, '$.tool_name') = @tool)
           AND (@disposition IS NULL OR json_extract(canonical, '$.disposition') = @disposition)
           AND (@from IS NULL OR timestamp_utc >= @from) AND (@to IS NULL OR timestamp_utc < @to)
         ORDER BY timestamp_utc DESC, sequence_number DESC LIMIT @limit`,
      )
      .all({ agent: f.agentId, tool: f.tool, disposition: f.disposition, from: f.from, to: f.to, limit })
      .map(storedEntry);
  }

  /**
   * The JSON text of {@link bundle}, in pieces: the chain is read in pages of `pageSize`
   * entries, each page its own short read (so no reader holds the WAL back), and the event
   * loop is free between pages (no single read, no single serialisation of a whole chain).
   * The chain is append-only: the export is the chain up to its tip when it began. A page of
   * 25 ~1 KB entries is ~0.5 ms of the loop (read, escape, encode for the socket).
   */
  async *bundleJson(chainId: string, sessionId: string | null, pageSize = 25): AsyncGenerator<string> {
    const tip = this.tipStmt.get(chainId)?.sequence_number ?? -1;
    yield `{"bundle_version":1,"chain_id":${JSON.stringify(chainId)},"session_id":${JSON.stringify(sessionId)},"exported_at":${JSON.stringify(new Date().toISOString())},"entries":[`;
    // Not in the turn that handled the request (routing, authentication, the reply's start): a
    // timer, since from that I/O callback an immediate would run before the loop's timers.
    await new Promise((resolve) => setTimeout(resolve, 0));
    let after = -1;
    while (after < tip) {
      const page = this.pageStmt.get(after === -1 ? '' : ',', chainId, after, tip, pageSize);
      if (!page || page.entries === 0 || page.last === null || page.text === null) break;
      yield page.text;
      after = page.last;
      // Async generators resume on microtasks: yield to I/O and timers between pages.
      await new Promise((resolve) => setImmediate(resolve));
    }
    yield ']}';
  }

  /** Exports a chain as a bundle of stored canonical texts (what a verifier re-hashes). */
  bundle(chainId: string, sessionId: string | null): AuditBundle {
    return chainBundleOf(chainId, sessionId, this.chainStmt.all(chainId));
  }
}
