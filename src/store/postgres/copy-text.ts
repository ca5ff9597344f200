/**
 * Texts read from PostgreSQL as bytes with COPY (pg-copy-streams), never as JavaScript
 * strings: a replica's bundle export pages and stored claim texts are read
 * (`COPY (SELECT …) TO STDOUT`) as the Buffers they arrive in. Strings would decode, copy and
 * re-encode megabytes on the event loop in one turn.
 */
import { setImmediate as nextTurn } from 'node:timers/promises';
import pg from 'pg';
import { to as copyTo } from 'pg-copy-streams';

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
