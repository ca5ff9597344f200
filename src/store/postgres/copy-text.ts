/**
 * Texts moved to and from PostgreSQL as bytes with COPY (pg-copy-streams), never as JavaScript
 * strings or one bind message: a replica's bundle export pages and stored claim texts are read
 * (`COPY (SELECT …) TO STDOUT`) and sent on as the Buffers they arrive in, and a claim's text is
 * written (`COPY … FROM STDIN`) in slices from the Buffer it was built in. Strings or a bind
 * message would decode, copy and re-encode megabytes on the event loop in one turn.
 */
import { Readable } from 'node:stream';
import { pipeline } from 'node:stream/promises';
import { setImmediate as nextTurn } from 'node:timers/promises';
import pg from 'pg';
import { from as copyFrom, to as copyTo } from 'pg-copy-streams';

/**
 * COPY's CSV options under which a field of JSON text is written and read as it is: a field is
 * quoted only when it holds the delimiter, the quote, CR, LF or equals the NULL string
 * (PostgreSQL 15 docs, COPY, "CSV Format"; CSV gives backslashes no meaning), and a stored text
 * — JCS, RFC 8785 §3.2 — holds no raw control character (RFC 8259 §7 escapes them in strings; JCS
 * adds no whitespace), so a one-column row read out is its text followed by a newline, which
 * JSON reads as whitespace.
 */
export const VERBATIM_CSV = "(FORMAT csv, DELIMITER E'\\x02', QUOTE E'\\x01', NULL E'\\x03')";

/**
 * The bytes of one `COPY (SELECT <a JSON text>) TO STDOUT WITH VERBATIM_CSV` that `sql` builds
 * for a connection (COPY takes no bind parameters: quote values with its `escapeLiteral`), read
 * whole on a connection of `db` — a pool's is released before this returns (destroyed after any
 * failure, the COPY's state then unknown), so a slow consumer of the bytes holds none; one chunk
 * is taken per turn of the loop. Rows end in "\n".
 * @param what names the text in the error.
 * @throws Error code `COPY_TEXT_QUOTED` when a row came back quoted or NULL (a raw control byte in
 *   the text: its bytes would not be the stored text); pg errors.
 */
export async function copyTextOut(
  db: pg.Pool | pg.ClientBase,
  sql: (cl: pg.ClientBase) => string,
  what: string,
): Promise<Buffer[]> {
  const cl = db instanceof pg.Pool ? await db.connect() : db;
  let failed: Error | undefined;
  try {
    const chunks: Buffer[] = [];
    let quoted = false;
    for await (const b of cl.query(copyTo(sql(cl)))) {
      const chunk = b as Buffer;
      quoted ||= chunk.includes(1) || chunk.includes(3);
      // A pool's connection is destroyed after a failure, so the COPY may be cut off here; a
      // caller's connection is read to the COPY's end first, so that it stays usable.
      if (quoted && cl !== db) break;
      chunks.push(chunk);
      // A turn of the loop per chunk: read as fast as it arrives, the socket would hand the whole
      // text (1.5 MB for a 10,000-call claim, every 64 KiB read a fresh buffer) to one turn; while
      // this waits, the streams fill and the socket stops reading, which ends the turn.
      await nextTurn();
    }
    if (quoted)
      throw Object.assign(new Error(`${what} came back quoted from COPY: it holds a raw control byte`), {
        code: 'COPY_TEXT_QUOTED',
      });
    return chunks;
  } catch (e) {
    failed = e as Error;
    throw e;
  } finally {
    // A COPY cut off midway leaves the connection's protocol state unknown: not reused.
    if (cl !== db) (cl as pg.PoolClient).release(failed);
  }
}

/** Bytes of a field written per piece of a COPY FROM: a socket write's worth, not the whole text. */
export const COPY_IN_SLICE_BYTES = 64 * 1024;

/** Bytes a field written under {@link VERBATIM_CSV} must not hold: its quote, delimiter, NULL string, LF, CR. */
const UNSAFE_IN_CSV = [1, 2, 3, 0x0a, 0x0d] as const;
const DELIMITER = Buffer.from([2]);
const NEWLINE = Buffer.from('\n');

/**
 * Inserts one row into `table` (`columns`, in order) by `COPY table (columns) FROM STDIN WITH
 * VERBATIM_CSV` on `client` (the caller's transaction): each field is written as its bytes, a
 * long one in {@link COPY_IN_SLICE_BYTES} slices of the Buffer it is in (subarrays, no copy),
 * each written when the socket has taken the one before, so no turn of the loop builds or sends
 * the whole row (PostgreSQL 15 docs, COPY, "CSV Format": an unquoted field is its text; the
 * NULL string here is a byte no field may hold, so an empty field is the empty string).
 * Identifiers are the caller's constants, never input.
 * @param fields one per column: strings are written as UTF-8; a JCS text (RFC 8785 §3.2: no
 *   whitespace, control characters escaped) qualifies as it is; a pretty-printed JSON text does not.
 * @throws Error code `COPY_FIELD_UNSAFE` before anything is sent when a field holds a byte
 *   {@link VERBATIM_CSV} would read as syntax (the row would not be the text); pg errors (the
 *   COPY's, e.g. 23505): the row is not inserted, and the connection is left ready for the
 *   transaction's ROLLBACK; Error code `COPY_ROW_COUNT` when the server counted other than one row.
 */
export async function copyRowIn(
  client: pg.ClientBase,
  table: string,
  columns: readonly string[],
  fields: readonly (string | Buffer)[],
): Promise<void> {
  if (fields.length !== columns.length)
    throw new Error(`copyRowIn: ${fields.length} fields for ${columns.length} columns of ${table}`);
  const bytes = fields.map((f) => (typeof f === 'string' ? Buffer.from(f, 'utf8') : f));
  const pieces: Buffer[] = [];
  for (const [i, b] of bytes.entries()) {
    if (i > 0) pieces.push(DELIMITER);
    for (let at = 0; at < b.length; at += COPY_IN_SLICE_BYTES) {
      const slice = b.subarray(at, at + COPY_IN_SLICE_BYTES);
      if (UNSAFE_IN_CSV.some((c) => slice.includes(c)))
        throw Object.assign(
          new Error(`${table}.${columns[i]} holds a byte COPY would read as CSV syntax; nothing was written`),
          { code: 'COPY_FIELD_UNSAFE' },
        );
      pieces.push(slice);
      // Scanned a slice per turn of the loop (five passes each): a 1.5 MB text in one turn cost ~1 ms.
      if (b.length > COPY_IN_SLICE_BYTES) await nextTurn();
    }
  }
  pieces.push(NEWLINE);
  const copy = client.query(
    copyFrom(`COPY ${table} (${columns.join(', ')}) FROM STDIN WITH ${VERBATIM_CSV}`),
  );
  await pipeline(Readable.from(pieces, { objectMode: false }), copy);
  // A line that is exactly `\.` ends CSV data before PostgreSQL 18: one row or an error, never none.
  if (copy.rowCount !== 1)
    throw Object.assign(new Error(`COPY into ${table} wrote ${copy.rowCount} rows, not one`), {
      code: 'COPY_ROW_COUNT',
    });
}
