/**
 * Claims on SQLite: the claim chain's tip, a claim's insert, and its stored text, in parts
 * when long. A claim's stored text in parts (docs/spec/claims.md#issuing-a-claim): the
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
import type { Claim } from '@cmcp/verify/formats';
import type { ClaimTextPieces, ClaimTip, IssuedClaim } from '../port.js';
import { type Db, immediateAsync } from './db.js';
import { prepared } from './statements.js';

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

/** The claim chain's tip: the claim with the largest claim_sequence, or undefined before the first. */
export function claimTip(db: Db): ClaimTip | undefined {
  return prepared<[], ClaimTip>(
    db,
    'SELECT claim_sequence, claim_hash FROM claims ORDER BY claim_sequence DESC LIMIT 1',
  ).get();
}

/**
 * Stores a signed claim (inside the caller's IMMEDIATE transaction): its whole canonical text,
 * or only its first `headBytes` when the rest is in parts written beforehand (linked by the
 * caller in the same transaction). The text is bound as bytes and stored as TEXT
 * (`CAST(? AS TEXT)`: the UTF-8 bytes read as text), so a large claim is never turned into one
 * JavaScript string to be encoded again.
 */
export function insertClaim(
  db: Db,
  sessionId: string,
  signed: IssuedClaim,
  headBytes = signed.canonical.length,
): void {
  prepared(
    db,
    'INSERT INTO claims (claim_sequence, session_id, claim_hash, canonical) VALUES (?,?,?,CAST(? AS TEXT))',
  ).run(signed.claim.claim_sequence, sessionId, signed.claimHash, signed.canonical.subarray(0, headBytes));
}

/** The stored claim of a session, exactly as signed, or undefined. */
export function storedClaim(db: Db, sessionId: string): Claim | undefined {
  const text = storedClaimText(db, sessionId);
  return text ? (JSON.parse(text.toString('utf8')) as Claim) : undefined;
}

/**
 * The stored canonical text of a session's claim (UTF-8 JCS, what was signed and hashed), in
 * one piece (its parts joined), or undefined.
 */
export function storedClaimText(db: Db, sessionId: string): Buffer | undefined {
  const layout = storedClaimLayout(db, sessionId);
  if (!layout) return undefined;
  return layout.textId ? Buffer.concat([...claimTextPieces(db, layout)], layout.textBytes) : layout.head;
}
