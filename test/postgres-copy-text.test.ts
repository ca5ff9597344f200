/**
 * Texts moved as bytes with COPY (src/store/postgres/copy-text.ts) on a real throw-away
 * PostgreSQL (testing/postgres.ts): a row written by `copyRowIn` in slices, one field longer
 * than many slices and cut mid-character at every slice boundary, reads back byte for byte; a
 * field holding a byte the CSV options would read as syntax is refused before anything is sent;
 * a COPY the server refuses rejects with its code and leaves the connection ready for the
 * transaction's ROLLBACK, also when it comes while slices are still going out; a row that is the
 * CSV end-of-data marker is refused (COPY_ROW_COUNT); a text read back quoted is refused
 * (COPY_TEXT_QUOTED), a caller's connection still usable after it.
 */
import pg from 'pg';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import {
  COPY_IN_SLICE_BYTES,
  copyRowIn,
  copyTextOut,
  VERBATIM_CSV,
} from '../src/store/postgres/copy-text.js';
import { createDatabase, type PostgresInstance, startPostgres } from '../testing/postgres.js';
import { hasPostgres } from './harness/postgres.js';

const withPostgres = hasPostgres();
let server: PostgresInstance | null = null;
let pool: pg.Pool;

beforeAll(async () => {
  if (!withPostgres) return;
  server = await startPostgres();
  pool = new pg.Pool({ connectionString: await createDatabase(server, 'copy_text'), max: 2 });
  await pool.query('CREATE TABLE texts (id TEXT PRIMARY KEY, body TEXT NOT NULL)');
  await pool.query('CREATE TABLE lines (body TEXT NOT NULL)');
}, 60_000);
afterAll(async () => {
  await pool?.end();
  await server?.stop();
});

const readBack = (id: string) =>
  copyTextOut(
    pool,
    (cl) => `COPY (SELECT body FROM texts WHERE id = ${cl.escapeLiteral(id)}) TO STDOUT WITH ${VERBATIM_CSV}`,
    'the text',
  );

describe.skipIf(!withPostgres)('COPY texts as bytes', () => {
  it('a field of many slices, cut mid-character at every boundary, reads back byte for byte', async () => {
    // '€' is 3 UTF-8 bytes: a 4-byte unit after a 1-byte offset puts every slice boundary inside one.
    const text = `{"${'x€'.repeat(3 * COPY_IN_SLICE_BYTES)}":1}`;
    const body = Buffer.from(text, 'utf8');
    expect(body.length).toBeGreaterThan(5 * COPY_IN_SLICE_BYTES);
    for (let at = COPY_IN_SLICE_BYTES; at < body.length; at += COPY_IN_SLICE_BYTES)
      expect((body[at] as number) & 0xc0, `byte ${at} continues a character`).toBe(0x80);
    const cl = await pool.connect();
    try {
      await cl.query('BEGIN');
      await copyRowIn(cl, 'texts', ['id', 'body'], ['many-slices', body]);
      await cl.query('COMMIT');
    } finally {
      cl.release();
    }
    expect(
      Buffer.concat(await readBack('many-slices')).equals(Buffer.concat([body, Buffer.from('\n')])),
    ).toBe(true);
    const r = await pool.query<{ body: string }>("SELECT body FROM texts WHERE id = 'many-slices'");
    expect(r.rows[0]?.body).toBe(text);
  });

  it.each([
    ['a newline', 'a\nb'],
    ['a carriage return', 'a\rb'],
    ['the delimiter', 'a\u0002b'],
    ['the quote', 'a\u0001b'],
    ['the NULL string', '\u0003'],
    ['a newline in a later slice of a long field', `${'a'.repeat(3 * COPY_IN_SLICE_BYTES)}\n`],
  ])('a field holding %s is refused before anything is sent', async (_what, field) => {
    const cl = await pool.connect();
    try {
      await cl.query('BEGIN');
      await expect(copyRowIn(cl, 'texts', ['id', 'body'], ['unsafe', field])).rejects.toMatchObject({
        code: 'COPY_FIELD_UNSAFE',
      });
      // Nothing was sent: the transaction is still usable and holds no row.
      const r = await cl.query<{ n: string }>("SELECT count(*)::text AS n FROM texts WHERE id = 'unsafe'");
      expect(r.rows[0]?.n).toBe('0');
      await cl.query('ROLLBACK');
    } finally {
      cl.release();
    }
  });

  it("a COPY the server refuses rejects with its code; the connection takes the transaction's ROLLBACK", async () => {
    const cl = await pool.connect();
    try {
      await cl.query('BEGIN');
      await copyRowIn(cl, 'texts', ['id', 'body'], ['twice', 'first']);
      await expect(copyRowIn(cl, 'texts', ['id', 'body'], ['twice', 'second'])).rejects.toMatchObject({
        code: '23505',
      });
      await cl.query('ROLLBACK');
      const r = await cl.query<{ n: string }>("SELECT count(*)::text AS n FROM texts WHERE id = 'twice'");
      expect(r.rows[0]?.n).toBe('0');
    } finally {
      cl.release();
    }
  });

  it('an error while slices are still going out rejects with its code; the connection takes the ROLLBACK', async () => {
    // A NUL byte is not text in PostgreSQL (22021), found by the server in the first slice.
    const body = Buffer.alloc(4 * COPY_IN_SLICE_BYTES, 'a');
    body[10] = 0;
    const cl = await pool.connect();
    try {
      await cl.query('BEGIN');
      await expect(copyRowIn(cl, 'texts', ['id', 'body'], ['nul', body])).rejects.toMatchObject({
        code: '22021',
      });
      await cl.query('ROLLBACK');
      const r = await cl.query<{ n: string }>("SELECT count(*)::text AS n FROM texts WHERE id = 'nul'");
      expect(r.rows[0]?.n).toBe('0');
    } finally {
      cl.release();
    }
  });

  it('a row that is the end-of-data marker (\\.) writes no row and is refused (COPY_ROW_COUNT)', async () => {
    const cl = await pool.connect();
    try {
      await expect(copyRowIn(cl, 'lines', ['body'], ['\\.'])).rejects.toMatchObject({
        code: 'COPY_ROW_COUNT',
      });
      const r = await cl.query<{ n: string }>('SELECT count(*)::text AS n FROM lines');
      expect(r.rows[0]?.n).toBe('0');
    } finally {
      cl.release();
    }
  });

  it('a text holding a raw control byte comes back quoted and is refused (COPY_TEXT_QUOTED)', async () => {
    await pool.query("INSERT INTO texts (id, body) VALUES ('raw', 'a' || chr(1) || 'b')");
    await expect(readBack('raw')).rejects.toMatchObject({ code: 'COPY_TEXT_QUOTED' });
    // On a caller's connection the COPY is read to its end first: the connection stays usable.
    const cl = await pool.connect();
    try {
      await expect(
        copyTextOut(
          cl,
          () => `COPY (SELECT body FROM texts WHERE id = 'raw') TO STDOUT WITH ${VERBATIM_CSV}`,
          'it',
        ),
      ).rejects.toMatchObject({ code: 'COPY_TEXT_QUOTED' });
      expect((await cl.query<{ one: number }>('SELECT 1 AS one')).rows[0]?.one).toBe(1);
    } finally {
      cl.release();
    }
  });
});
