/**
 * Hash chains on PostgreSQL (docs/replicas.md#per-chain-serialisation-on-postgresql): an append
 * locks the chain's `chain_tips` row FOR UPDATE, which serialises every writer of that chain
 * across replicas (under READ COMMITTED a lock that waited reads the row's newest committed
 * version, PostgreSQL 15 docs §13.2.1), builds the entry with the one shared builder
 * (store/entries/next-entry.ts), writes it and moves the tip in the same transaction. Appends to
 * different chains run in parallel. The schema's unique keys (chain_id, sequence_number),
 * (chain_id, prev_entry_hash) and entry_hash stay the last line: a bug here fails the
 * transaction (23505), it never forks the chain.
 */
import type { AuditBundle, AuditEntry, AuditEntryBody } from '@cmcp/verify/formats';
import { signEntryWriter } from '@cmcp/verify/formats';
import type pg from 'pg';
import { formatMicros, type MicroClock, systemMicroClock } from '../entries/clock.js';
import {
  type ClaimPageRow,
  chainBundleOf,
  claimPageEntry,
  ENTRY_COLUMNS,
  entryRowValues,
  storedEntry,
} from '../entries/entry-row.js';
import { buildNextEntry, type ChainTip, type EntryInput, type EntryWriter } from '../entries/next-entry.js';
import type { ChainPageEntry } from '../port.js';
import { copyTextOut, VERBATIM_CSV } from './copy-text.js';

/**
 * Locks `chainId`'s tip row (made for an empty chain: sequence -1, `genesis`) and returns the
 * tip, undefined for an empty chain. Inside the caller's transaction; the lock holds to its end.
 */
export async function lockChainTip(client: pg.ClientBase, chainId: string): Promise<ChainTip | undefined> {
  // A first append to a new chain inserts the row; a concurrent one waits on that insert.
  await client.query(
    `INSERT INTO chain_tips (chain_id, tip_sequence, tip_hash, tip_timestamp) VALUES ($1, -1, 'genesis', '')
     ON CONFLICT (chain_id) DO NOTHING`,
    [chainId],
  );
  const r = await client.query<{ tip_sequence: string; tip_hash: string; tip_timestamp: string }>(
    'SELECT tip_sequence::text, tip_hash, tip_timestamp FROM chain_tips WHERE chain_id = $1 FOR UPDATE',
    [chainId],
  );
  const row = r.rows[0];
  if (!row) throw new Error(`chain ${chainId}: tip row missing`);
  const seq = Number(row.tip_sequence);
  return seq < 0
    ? undefined
    : { sequence_number: seq, entry_hash: row.tip_hash, timestamp_utc: row.tip_timestamp };
}

/**
 * Appends one entry to `chainId` inside the caller's (fenced) transaction.
 * @param writer the writing replica (its fence's): the entry names it (`replica`, hashed) and
 *   its writer signature over the entry_hash is stored beside it (an `entry_writers` row,
 *   docs/spec/audit-entries.md#writers).
 * @returns the stored entry (with `entry_hash`).
 * @throws CanonicalJsonError if a field holds a value JCS cannot carry; pg errors.
 */
export async function appendEntry(
  client: pg.ClientBase,
  chainId: string,
  input: EntryInput,
  clock: MicroClock = systemMicroClock,
  writer?: EntryWriter,
): Promise<AuditEntry> {
  const tip = await lockChainTip(client, chainId);
  const replica = writer ? { replica_id: writer.replicaId, key_thumbprint: writer.keyThumbprint } : undefined;
  const entry = buildNextEntry(chainId, input, tip, formatMicros(clock()), replica);
  const { body, entry_hash } = entry;
  const insert = `INSERT INTO audit_entries (${ENTRY_COLUMNS}) VALUES ($1,$2,$3,$4,$5,$6,$7,$8,$9,$10)`;
  if (writer)
    // The entry and its writer's signature in one statement (a writable CTE): no extra round trip.
    await client.query(
      `WITH e AS (${insert} RETURNING entry_hash)
       INSERT INTO entry_writers (entry_hash, replica_id, writer_signature) SELECT entry_hash, $11, $12 FROM e`,
      [...entryRowValues(entry), writer.replicaId, signEntryWriter(entry_hash, writer.key)],
    );
  else await client.query(insert, entryRowValues(entry));
  await client.query(
    'UPDATE chain_tips SET tip_sequence = $2, tip_hash = $3, tip_timestamp = $4 WHERE chain_id = $1',
    [chainId, body.sequence_number, entry_hash, body.timestamp_utc],
  );
  return { ...body, entry_hash };
}

/** All entries of a chain in sequence order, parsed from their stored canonical text. Reads only. */
export async function chainEntries(db: pg.Pool | pg.ClientBase, chainId: string): Promise<AuditEntry[]> {
  const r = await db.query<{ canonical: string; entry_hash: string }>(
    'SELECT canonical, entry_hash FROM audit_entries WHERE chain_id = $1 ORDER BY sequence_number',
    [chainId],
  );
  return r.rows.map(storedEntry);
}

/**
 * Up to `limit` entries of a chain after sequence number `after`, in sequence order (one short
 * read), with only what a claim reads of each (store/sqlite/chain.ts AuditChain.claimPage, the same on
 * SQLite): PostgreSQL takes the fields out of the stored text (jsonb), so ~0.2 KB per entry
 * crosses the socket rather than its ~1 KB text — bytes read are external memory, whose growth
 * brings on mark-compacts of the whole heap. An entry whose text holds a
 * `\u` escape is read whole and parsed here, so every value is the one JSON.parse gives (jsonb
 * refuses `\u0000`). Reads only.
 */
export async function claimPage(
  db: pg.Pool | pg.ClientBase,
  chainId: string,
  after: number,
  limit: number,
): Promise<ChainPageEntry[]> {
  const r = await db.query<
    Omit<ClaimPageRow, 'sequence_number'> & { sequence_number: string; writer: string | null }
  >(
    `SELECT sequence_number::text AS sequence_number, entry_type, entry_hash, timestamp_utc, escaped,
       j->>'tool_name' AS tool_name, j->>'policy_decision' AS policy_decision,
       (j->'policy_rule_matched')::text AS rules, j->>'disposition' AS disposition,
       j->>'error_code' AS error_code, j->'replica'->>'key_thumbprint' AS writer
     FROM (SELECT sequence_number, entry_type, entry_hash, timestamp_utc,
             CASE WHEN strpos(canonical, chr(92) || 'u') > 0 THEN canonical END AS escaped,
             CASE WHEN strpos(canonical, chr(92) || 'u') = 0 THEN canonical::jsonb END AS j
           FROM audit_entries WHERE chain_id = $1 AND sequence_number > $2
           ORDER BY sequence_number LIMIT $3) page
     ORDER BY page.sequence_number`,
    [chainId, after, limit],
  );
  return r.rows.map((row) => {
    const entry = claimPageEntry({ ...row, sequence_number: Number(row.sequence_number) });
    // A parsed text carries the entry's `replica`; otherwise PostgreSQL extracted its writer.
    const writer =
      row.escaped !== null
        ? ((entry as Partial<AuditEntryBody>).replica?.key_thumbprint ?? null)
        : row.writer;
    return { ...entry, writer };
  });
}

/**
 * A chain as a bundle of stored canonical texts (what a verifier re-hashes), each entry with
 * its writer signature when it has one. Reads only.
 */
export async function chainBundle(
  db: pg.Pool | pg.ClientBase,
  chainId: string,
  sessionId: string | null,
): Promise<AuditBundle> {
  const r = await db.query<{ canonical: string; entry_hash: string; writer_signature: string | null }>(
    `SELECT a.canonical, a.entry_hash, w.writer_signature FROM audit_entries a
     LEFT JOIN entry_writers w ON w.entry_hash = a.entry_hash WHERE a.chain_id = $1 ORDER BY a.sequence_number`,
    [chainId],
  );
  return chainBundleOf(chainId, sessionId, r.rows);
}

/**
 * The JSON text of {@link chainBundle}, in pieces, as the SQLite export makes it
 * (store/sqlite/chain.ts AuditChain.bundleJson) but for a newline after each page (JSON whitespace,
 * from COPY): the chain up to its tip when the export began, read
 * in pages of `pageSize` sequence numbers, each page one short `COPY (SELECT …) TO STDOUT`
 * whose text PostgreSQL builds (`to_json` escapes each stored text as a JSON string) and sends
 * as raw bytes (pg-copy-streams): the page reaches the socket as the Buffers it arrived in,
 * never decoded into a string, parsed into rows or serialised, so the event loop does no work
 * per byte (pages read as strings made ~16 MB of strings for a 10,000-entry export, half of what
 * it allocated, and so more of the collections that fell inside the loop's longest gaps). A page is read whole and its connection released before it is yielded, so a
 * slow reader of the export holds no connection. Each page is its own statement and snapshot;
 * the chain is append-only, so pages below the tip read first are the same in every snapshot.
 * A chain's sequence numbers run 0…tip; a missing one leaves its page short
 * and the bundle's verification finds the gap.
 * @throws (rejects, from the iteration) pg errors; Error `COPY_TEXT_QUOTED` (copy-text.ts) when a
 * page came back quoted or NULL (a control byte in a stored text: the bundle would not be the
 * chain's), the response then ending short of its closing bracket.
 */
export async function* chainBundleJson(
  db: pg.Pool | pg.ClientBase,
  chainId: string,
  sessionId: string | null,
  pageSize = 25,
): AsyncGenerator<string | Buffer> {
  const t = await db.query<{ tip: string | null }>(
    'SELECT max(sequence_number)::text AS tip FROM audit_entries WHERE chain_id = $1',
    [chainId],
  );
  const tip = t.rows[0]?.tip == null ? -1 : Number(t.rows[0].tip);
  yield `{"bundle_version":1,"chain_id":${JSON.stringify(chainId)},"session_id":${JSON.stringify(sessionId)},"exported_at":${JSON.stringify(new Date().toISOString())},"entries":[`;
  let emitted = false;
  for (let after = -1; after < tip; after += pageSize) {
    const upto = Math.min(after + pageSize, tip);
    const page = await copyTextOut(
      db,
      (cl) => {
        // COPY takes no bind parameters: the chain id is quoted by pg's escapeLiteral, the bounds are integers.
        const id = cl.escapeLiteral(chainId);
        return `COPY (SELECT ${emitted ? "','" : "''"} || string_agg('{"canonical":' || to_json(p.canonical)::text
           || ',"entry_hash":' || to_json(p.entry_hash)::text
           || coalesce(',"writer_signature":' || to_json(w.writer_signature)::text, '') || '}', ',' ORDER BY p.sequence_number)
         FROM (SELECT sequence_number, canonical, entry_hash FROM audit_entries
               WHERE chain_id = ${id} AND sequence_number > ${after} AND sequence_number <= ${upto}) p
         LEFT JOIN entry_writers w ON w.entry_hash = p.entry_hash
         HAVING count(*) > 0) TO STDOUT WITH ${VERBATIM_CSV}`;
      },
      `an export page of chain ${chainId}`,
    );
    if (page.length > 0) emitted = true;
    yield* page;
  }
  yield ']}';
}
