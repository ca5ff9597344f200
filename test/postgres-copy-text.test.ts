/**
 * Texts read as bytes with COPY (src/store/postgres/copy-text.ts) on a real throw-away
 * PostgreSQL (testing/postgres.ts): a long text of multi-byte characters reads back byte for
 * byte in several chunks; a text read back quoted is refused (COPY_TEXT_QUOTED), a caller's
 * connection still usable after it.
 */
import pg from 'pg';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { copyTextOut, VERBATIM_CSV } from '../src/store/postgres/copy-text.js';
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
  it('a text of many chunks, multi-byte characters throughout, reads back byte for byte', async () => {
    // '€' is 3 UTF-8 bytes: over many 64 KiB chunks of the COPY, some boundaries fall inside one.
    const text = `{"${'x€'.repeat(3 * 64 * 1024)}":1}`;
    const body = Buffer.from(text, 'utf8');
    await pool.query('INSERT INTO texts (id, body) VALUES ($1, $2)', ['many-chunks', text]);
    const chunks = await readBack('many-chunks');
    expect(chunks.length).toBeGreaterThan(1);
    expect(Buffer.concat(chunks).equals(Buffer.concat([body, Buffer.from('\n')]))).toBe(true);
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
