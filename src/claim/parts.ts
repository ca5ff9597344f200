/**
 * A claim's stored text in parts (docs/spec/claims.md#issuing-a-claim): the
 * ~1.5 MB text of a 10,000-entry session's claim, inserted and committed inside the closing
 * transaction, held the event loop ~4–5 ms. So the text after its first {@link PART_BYTES} is
 * written before that transaction, one part per small transaction ({@link writeClaimParts}),
 * and the closing transaction checks they are all there ({@link claimPartsStored}), stores the
 * first part in claims.canonical and links the rest ({@link linkClaimParts}: one short row). A text no longer than one part has no parts.
 *
 * The text of a claim is claims.canonical ‖ its claim_parts in part order; the claim's
 * claim_hash is the SHA-256 of that whole text. Parts no link names are a close that did not
 * commit: a rebuilt claim removes its own ({@link discardClaimParts}), start-up removes those
 * its instance left ({@link removeUnlinkedClaimParts}: a crash between the parts and the
 * closing transaction).
 */
import { randomUUID } from 'node:crypto';
import { setTimeout } from 'node:timers/promises';
import { type Db, immediateAsync } from '../store/db.js';
import type { ClaimTextPieces } from '../store/port.js';
import { prepared } from '../store/statements.js';

/** Bytes per stored part of a claim's text (claims.canonical holds the first). */
export const PART_BYTES = 128 * 1024;

/** The parts of one claim text written before its closing transaction. */
export interface WrittenParts {
  textId: string;
  /** Parts after the first (claim_parts rows). */
  parts: number;
  /** The whole text's length, bytes. */
  textBytes: number;
}

/**
 * Writes the parts of `text` after the first {@link PART_BYTES}, each in its own transaction
 * (the loop runs between them), owned by instance `owner`; null when the text fits in one part.
 * @throws (rejects) SqliteError SQLITE_BUSY once the busy timeout has passed.
 */
export async function writeClaimParts(db: Db, owner: string, text: Buffer): Promise<WrittenParts | null> {
  if (text.length <= PART_BYTES) return null;
  const written: WrittenParts = { textId: randomUUID(), parts: 0, textBytes: text.length };
  const insert = prepared(db, 'INSERT INTO claim_parts (text_id, part, owner, bytes) VALUES (?,?,?,?)');
  for (let at = PART_BYTES; at < text.length; at += PART_BYTES) {
    const part = ++written.parts;
    const bytes = text.subarray(at, at + PART_BYTES);
    // Each commit in a turn of its own (a timer: the caller may be in an I/O callback), not
    // after the work before it — the first commit after a checkpoint costs ~1–2 ms of CPU.
    await setTimeout(0);
    await immediateAsync(db, () => insert.run(written.textId, part, owner, bytes));
  }
  return written;
}

/** True when every part of `written` is still stored (checked inside the closing transaction). */
export function claimPartsStored(db: Db, written: WrittenParts): boolean {
  const found = prepared<[string], { n: number }>(
    db,
    'SELECT count(*) AS n FROM claim_parts WHERE text_id = ?',
  ).get(written.textId);
  return found?.n === written.parts;
}

/** Links `written` to claim `claimSequence` (inside the closing transaction: one short row). */
export function linkClaimParts(db: Db, claimSequence: number, written: WrittenParts): void {
  prepared(
    db,
    'INSERT INTO claim_part_links (claim_sequence, text_id, parts, text_bytes) VALUES (?,?,?,?)',
  ).run(claimSequence, written.textId, written.parts, written.textBytes);
}

/** Removes the parts of a claim text whose closing transaction did not link them. */
export function discardClaimParts(db: Db, written: WrittenParts): Promise<unknown> {
  return immediateAsync(db, () =>
    prepared(
      db,
      'DELETE FROM claim_parts WHERE text_id = ? AND text_id NOT IN (SELECT text_id FROM claim_part_links)',
    ).run(written.textId),
  );
}

/**
 * Start-up: removes the parts instance `owner` wrote that no claim links (a close that stopped
 * between its parts and its closing transaction; its session is closed again with a new claim).
 * Runs in the caller's transaction or its own. @returns the number of parts removed.
 */
export function removeUnlinkedClaimParts(db: Db, owner: string): number {
  return db
    .prepare(
      'DELETE FROM claim_parts WHERE owner = ? AND text_id NOT IN (SELECT text_id FROM claim_part_links)',
    )
    .run(owner).changes;
}

/** How a session's stored claim text is laid out: its first part and where the rest is. */
export interface StoredClaimText {
  /** claims.canonical: the whole text, or its first part. */
  head: Buffer;
  /** The whole text's length, bytes. */
  textBytes: number;
  /** The link to the rest, or undefined when the head is the whole text. */
  textId?: string;
  parts: number;
}

/** The layout of a session's stored claim text, or undefined when it has no claim. */
export function storedClaimLayout(db: Db, sessionId: string): StoredClaimText | undefined {
  const row = prepared<
    [string],
    { head: Buffer; text_id: string | null; parts: number | null; text_bytes: number | null }
  >(
    db,
    `SELECT CAST(c.canonical AS BLOB) AS head, l.text_id, l.parts, l.text_bytes
     FROM claims c LEFT JOIN claim_part_links l ON l.claim_sequence = c.claim_sequence
     WHERE c.session_id = ?`,
  ).get(sessionId);
  if (!row) return undefined;
  if (row.text_id === null) return { head: row.head, textBytes: row.head.length, parts: 0 };
  return { head: row.head, textBytes: row.text_bytes ?? 0, textId: row.text_id, parts: row.parts ?? 0 };
}

/**
 * The stored text's pieces in order, each part read when it is asked for (one short read per
 * part, so a route can send them with the loop free between them).
 * @throws Error when a linked part is missing (a damaged database).
 */
export function* claimTextPieces(db: Db, layout: StoredClaimText): Generator<Buffer> {
  yield layout.head;
  if (!layout.textId) return;
  const read = prepared<[string, number], { bytes: Buffer }>(
    db,
    'SELECT bytes FROM claim_parts WHERE text_id = ? AND part = ?',
  );
  for (let part = 1; part <= layout.parts; part++) {
    const row = read.get(layout.textId, part);
    if (!row) throw new Error(`claim text ${layout.textId} lacks part ${part}`);
    yield row.bytes;
  }
}

/** A claim's stored text as a route sends it (store/port.ts). */
export type { ClaimTextPieces };

/** A claim's text in one Buffer (a copy when it came in pieces): for callers that need the bytes whole. */
export function claimTextBytes(text: Buffer | ClaimTextPieces): Buffer {
  return Buffer.isBuffer(text) ? text : Buffer.concat([...text.pieces]);
}

/** The stored claim text of a session as pieces ({@link claimTextPieces}), or undefined when it has no claim. */
export function storedClaimPieces(db: Db, sessionId: string): ClaimTextPieces | undefined {
  const layout = storedClaimLayout(db, sessionId);
  return (
    layout && {
      textBytes: layout.textBytes,
      pieces: { [Symbol.iterator]: () => claimTextPieces(db, layout) },
    }
  );
}
