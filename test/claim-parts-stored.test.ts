/**
 * Version-1 claims of long sessions that earlier gateways stored in parts (claims.canonical the
 * first part, claim_parts the rest, claim_part_links tying them to the claim) are still read
 * whole, byte for byte, by the reads the routes use (src/store/sqlite/claims.ts): nothing
 * writes parts any more, but a stored claim is never lost. A linked part that is missing is a
 * damaged database and is an error, never a shorter text.
 */
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { sha256Hex } from '@cmcp/verify/formats';
import { afterAll, describe, expect, it } from 'vitest';
import { AuditChain } from '../src/store/sqlite/chain.js';
import { storedClaim, storedClaimText } from '../src/store/sqlite/claims.js';
import { type Db, openDatabase } from '../src/store/sqlite/db.js';
import { SqliteSessionStore } from '../src/store/sqlite/session-store.js';

const dir = mkdtempSync(join(tmpdir(), 'cmcp-claim-parts-'));
afterAll(() => rmSync(dir, { recursive: true, force: true }));

const PART = 128 * 1024;

/** Stores `text` as an earlier gateway did: its first PART bytes in the row, the rest in parts. */
function storeInParts(db: Db, claimSequence: number, sessionId: string, text: Buffer, textId: string): void {
  db.prepare(
    'INSERT INTO claims (claim_sequence, session_id, claim_hash, canonical) VALUES (?,?,?,CAST(? AS TEXT))',
  ).run(claimSequence, sessionId, sha256Hex(text), text.subarray(0, PART));
  let part = 0;
  for (let at = PART; at < text.length; at += PART)
    db.prepare('INSERT INTO claim_parts (text_id, part, owner, bytes) VALUES (?,?,?,?)').run(
      textId,
      ++part,
      'old-instance',
      text.subarray(at, at + PART),
    );
  db.prepare(
    'INSERT INTO claim_part_links (claim_sequence, text_id, parts, text_bytes) VALUES (?,?,?,?)',
  ).run(claimSequence, textId, part, text.length);
}

describe('a version-1 claim stored in parts by an earlier gateway', () => {
  it('is read whole, byte for byte, cut mid-character at the part boundaries, by the store and its reads', () => {
    const db = openDatabase(join(dir, 'parts.db'));
    // '€' is 3 UTF-8 bytes: the 128 KiB part boundaries fall inside characters.
    const text = Buffer.from(`{"claim_version":1,"pad":"${'x€'.repeat(90_000)}","session_id":"s-old"}`);
    expect(text.length).toBeGreaterThan(2 * PART);
    storeInParts(db, 1, 's-old', text, 'text-1');
    expect(storedClaimText(db, 's-old')?.equals(text)).toBe(true);
    expect(storedClaim(db, 's-old')).toEqual(JSON.parse(text.toString('utf8')));
    const store = new SqliteSessionStore(db, new AuditChain(db), 'new-instance');
    expect(store.claimCanonical('s-old')?.equals(text)).toBe(true);
    expect(store.claim('s-old')?.canonical.equals(text)).toBe(true);
    expect(sha256Hex(store.claimCanonical('s-old') as Buffer)).toBe(
      db.prepare<[], { h: string }>("SELECT claim_hash AS h FROM claims WHERE session_id = 's-old'").get()?.h,
    );
    db.close();
  });

  it('a linked part that is missing is an error, not a shorter text', () => {
    const db = openDatabase(join(dir, 'damaged.db'));
    const text = Buffer.from(`{"pad":"${'y'.repeat(3 * PART)}"}`);
    storeInParts(db, 1, 's-damaged', text, 'text-2');
    db.prepare("DELETE FROM claim_parts WHERE text_id = 'text-2' AND part = 2").run();
    expect(() => storedClaimText(db, 's-damaged')).toThrow(/lacks part 2/);
    db.close();
  });
});
