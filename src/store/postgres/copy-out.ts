/**
 * Texts read from PostgreSQL as bytes (`COPY (SELECT …) TO STDOUT`, pg-copy-streams), never
 * decoded into JavaScript strings: a replica's bundle export pages and stored claim texts are
 * sent on as the Buffers they arrive in (issue 11 item 7: a 10,000-entry export read as strings
 * made ~16 MB of garbage, a 1.5 MB claim text ~2 ms of decoding and encoding on the loop).
 */
import pg from 'pg';
import { to as copyTo } from 'pg-copy-streams';

/**
 * COPY's CSV options under which a one-column row of JSON text is written as it is: a field is
 * quoted only when it holds the delimiter, the quote, CR, LF or equals the NULL string
 * (PostgreSQL 16 docs, COPY, "CSV Format"; CSV gives backslashes no meaning), and a JSON text
 * holds no raw control character (RFC 8259 §7; RFC 8785 §3.2.2.2 for JCS), so each row is its
 * text followed by a newline, which JSON reads as whitespace.
 */
export const VERBATIM_CSV = "(FORMAT csv, DELIMITER E'\\x02', QUOTE E'\\x01', NULL E'\\x03')";

/**
 * The bytes of one `COPY (SELECT <a JSON text>) TO STDOUT WITH VERBATIM_CSV` that `sql` builds
 * for a connection (COPY takes no bind parameters: quote values with its `escapeLiteral`), read
 * whole on a connection of `db` — a pool's is released before this returns (destroyed after any
 * failure, the COPY's state then unknown), so a slow consumer of the bytes holds none. Rows end in "\n".
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
    for await (const b of cl.query(copyTo(sql(cl)))) chunks.push(b as Buffer);
    for (const b of chunks)
      if (b.includes(1) || b.includes(3))
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
