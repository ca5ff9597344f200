/**
 * The setup the replica test files share (docs/replicas.md): a throw-away PostgreSQL
 * (testing/postgres.ts) with one database, an admin pool on it, and a counting MCP upstream in
 * this process; and its teardown, with the `cmcp start` replicas and folders a file started.
 * The replicas are `cmcp start` children running the build (dist/).
 */
import { existsSync } from 'node:fs';
import { join } from 'node:path';
import pg from 'pg';
import { createDatabase, type PostgresInstance, startPostgres } from '../../testing/postgres.js';
import { type CountingServer, startCountingServer } from '../fixtures/counting-server.js';
import { type ChildGateway, cleanup, REPO_ROOT } from './gateway.js';

/** The built CLI the replicas run. */
export const REPLICA_CLI = join(REPO_ROOT, 'dist', 'src', 'cli', 'main.js');

export interface ReplicaBackend {
  server: PostgresInstance;
  /** postgres:// URL of the database the replicas share. */
  url: string;
  admin: pg.Pool;
  up: CountingServer;
}

/**
 * Starts PostgreSQL, creates `database`, opens a 2-connection admin pool on it and starts the
 * counting upstream. @throws Error when dist/ is missing (run `npm run build`).
 */
export async function startReplicaBackend(database: string): Promise<ReplicaBackend> {
  if (!existsSync(REPLICA_CLI)) throw new Error('dist/ is missing: run `npm run build` first');
  const server = await startPostgres();
  try {
    const url = await createDatabase(server, database);
    const admin = new pg.Pool({ connectionString: url, max: 2 });
    admin.on('error', () => undefined);
    const up = await startCountingServer().catch(async (e) => {
      await admin.end();
      throw e;
    });
    return { server, url, admin, up };
  } catch (e) {
    await server.stop(); // not left running by a start that failed half-way
    throw e;
  }
}

/**
 * Kills every replica (resumed first, should a test have paused it), then closes the upstream
 * and the pool, stops PostgreSQL and removes `dirs`. Each part may be missing (a failed start).
 */
export async function stopReplicaBackend(
  b: Partial<ReplicaBackend>,
  replicas: readonly ChildGateway[],
  dirs: readonly string[],
): Promise<void> {
  for (const r of replicas) {
    r.proc.kill('SIGCONT');
    await r.stop('SIGKILL');
  }
  await b.up?.close();
  await b.admin?.end();
  await b.server?.stop();
  for (const d of dirs) cleanup(d);
}
