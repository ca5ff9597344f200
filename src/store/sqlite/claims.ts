/**
 * Claims on SQLite: the claim chain's tip, a claim's insert, and its stored text. A claim's
 * text is claims.canonical; its claim_hash is the SHA-256 of that text.
 *
 * Version-1 claims of long sessions stored by earlier gateways may have their text in parts:
 * claims.canonical holds the first part and claim_parts the rest, in the order the
 * claim_part_links row names (docs/spec/claims.md#issuing-a-claim). Nothing writes parts any
 * more (a version-2 claim is a few KB); {@link storedClaimText} still joins them, so those
 * claims are served and verify as before.
 */
import type { Claim } from '@cmcp/verify/formats';
import type { ClaimTip, IssuedClaim } from '../port.js';
import type { Db } from './db.js';
import { prepared } from './statements.js';

/** The claim chain's tip: the claim with the largest claim_sequence, or undefined before the first. */
export function claimTip(db: Db): ClaimTip | undefined {
  return prepared<[], ClaimTip>(
    db,
    'SELECT claim_sequence, claim_hash FROM claims ORDER BY claim_sequence DESC LIMIT 1',
  ).get();
}

/**
 * Stores a signed claim (inside the caller's IMMEDIATE transaction), its canonical text bound
 * as bytes and stored as TEXT (`CAST(? AS TEXT)`: the UTF-8 bytes read as text).
 */
export function insertClaim(db: Db, sessionId: string, signed: IssuedClaim): void {
  prepared(
    db,
    'INSERT INTO claims (claim_sequence, session_id, claim_hash, canonical) VALUES (?,?,?,CAST(? AS TEXT))',
  ).run(signed.claim.claim_sequence, sessionId, signed.claimHash, signed.canonical);
}

/** The stored claim of a session, exactly as signed, or undefined. */
export function storedClaim(db: Db, sessionId: string): Claim | undefined {
  const text = storedClaimText(db, sessionId);
  return text ? (JSON.parse(text.toString('utf8')) as Claim) : undefined;
}

/**
 * The stored canonical text of a session's claim (UTF-8 JCS, what was signed and hashed), an
 * earlier gateway's parts joined after claims.canonical, or undefined.
 * @throws Error when a linked part is missing (a damaged database).
 */
export function storedClaimText(db: Db, sessionId: string): Buffer | undefined {
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
  if (row.text_id === null) return row.head;
  const read = prepared<[string, number], { bytes: Buffer }>(
    db,
    'SELECT bytes FROM claim_parts WHERE text_id = ? AND part = ?',
  );
  const pieces = [row.head];
  for (let part = 1; part <= (row.parts ?? 0); part++) {
    const found = read.get(row.text_id, part);
    if (!found) throw new Error(`claim text ${row.text_id} lacks part ${part}`);
    pieces.push(found.bytes);
  }
  return Buffer.concat(pieces, row.text_bytes ?? undefined);
}
