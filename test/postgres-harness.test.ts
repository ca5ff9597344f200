/**
 * The throw-away PostgreSQL of testing/postgres.ts: a real server from Debian's package, on its
 * own port on 127.0.0.1, reached with node-postgres, and gone after stop() (process and folder).
 */
import { existsSync } from 'node:fs';
import { createConnection } from 'node:net';
import pg from 'pg';
import { afterAll, describe, expect, it } from 'vitest';
import { createDatabase, type PostgresInstance, startPostgres } from '../testing/postgres.js';
import { hasPostgres } from './harness/postgres.js';

const started: PostgresInstance[] = [];
afterAll(async () => {
  for (const s of started) await s.stop();
});

function accepts(port: number): Promise<boolean> {
  return new Promise((ok) => {
    const sock = createConnection({ host: '127.0.0.1', port });
    sock.once('connect', () => {
      sock.destroy();
      ok(true);
    });
    sock.once('error', () => ok(false));
  });
}

describe.skipIf(!hasPostgres())('throw-away PostgreSQL', () => {
  it('starts, answers on 127.0.0.1 as PostgreSQL 15 or newer, and is gone after stop()', async () => {
    const server = await startPostgres();
    started.push(server);
    expect(server.url).toMatch(/^postgres:\/\/cmcp_test@127\.0\.0\.1:\d+\/postgres$/);
    const client = new pg.Client({ connectionString: server.url });
    await client.connect();
    const version = await client.query<{ v: string }>("SELECT current_setting('server_version_num') AS v");
    expect(Number(version.rows[0]?.v)).toBeGreaterThanOrEqual(150000);
    const listen = await client.query<{ v: string }>("SELECT current_setting('listen_addresses') AS v");
    expect(listen.rows[0]?.v).toBe('127.0.0.1');
    const who = await client.query<{ u: string }>('SELECT current_user AS u');
    expect(who.rows[0]?.u).toBe('cmcp_test');
    await client.end();

    // A database of its own for one test, and the unix socket inside the cluster's folder.
    const url = await createDatabase(server, 'harness_check');
    const own = new pg.Client({ connectionString: url });
    await own.connect();
    expect((await own.query<{ d: string }>('SELECT current_database() AS d')).rows[0]?.d).toBe(
      'harness_check',
    );
    await own.end();
    expect(existsSync(`${server.socketDir}/.s.PGSQL.${server.port}`)).toBe(true);

    await server.stop();
    expect(await accepts(server.port)).toBe(false);
    expect(existsSync(server.dir)).toBe(false);
    await server.stop(); // idempotent
  });

  it('two servers run side by side on different ports', async () => {
    const [a, b] = await Promise.all([startPostgres(), startPostgres()]);
    started.push(a, b);
    expect(a.port).not.toBe(b.port);
    for (const s of [a, b]) {
      const c = new pg.Client({ connectionString: s.url });
      await c.connect();
      await c.query('CREATE TABLE only_here (x BIGINT)');
      await c.end();
    }
    await a.stop();
    expect(await accepts(b.port)).toBe(true);
    await b.stop();
  });
});
