/**
 * The two engines behind the storage contract, as the contract suite (test/store-contract.test.ts)
 * drives them: three "replicas" writing into one database — on SQLite three connections to one
 * file (one host's processes share its write lock), on PostgreSQL three pools each holding its
 * own fenced lease (src/store/postgres/). Each replica exposes the call path's side of the storage
 * port (store/port.ts CallStore, the adapter the gateway runs), its sessions' side (SessionStore) and a plain chain append; the engine exposes committed reads.
 * Nothing of either engine is mocked.
 */
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import type { AuditBundle, AuditEntry } from '@cmcp/verify/formats';
import pg from 'pg';
import { afterAll, beforeAll } from 'vitest';
import { migratePostgres } from '../../src/store/migrations/postgres.js';
import type { CallStore, ExecutionRow, OperatorRecords, SessionStore } from '../../src/store/port.js';
import { appendEntry, chainBundle, chainBundleJson } from '../../src/store/postgres/chain.js';
import { getExecution } from '../../src/store/postgres/executions.js';
import { acquireLease, type Fence } from '../../src/store/postgres/leases.js';
import { postgresOperatorRecords } from '../../src/store/postgres/operator-records.js';
import { PostgresSessionStore } from '../../src/store/postgres/session-store.js';
import { fencedTransaction, openReplicaPool } from '../../src/store/postgres/transaction.js';
import { PostgresWriteStore } from '../../src/store/postgres/write-store.js';
import { sqliteCallStore } from '../../src/store/sqlite/call-store.js';
import { AuditChain, type EntryInput } from '../../src/store/sqlite/chain.js';
import { type Db, openDatabase } from '../../src/store/sqlite/db.js';
import { ExecutionRegistry } from '../../src/store/sqlite/executions.js';
import { sqliteOperatorRecords } from '../../src/store/sqlite/operator-records.js';
import { SqliteSessionStore } from '../../src/store/sqlite/session-store.js';
import { createDatabase, type PostgresInstance, startPostgres } from '../../testing/postgres.js';
import { hasPostgres } from './postgres.js';

/** One writer of the shared database. */
export interface Replica {
  id: string;
  writes: CallStore;
  /** The operators' records (blocks, reloads) through the same port. */
  operator: OperatorRecords;
  /** The sessions' side of the port (SQLite: this replica's sessions as one instance's). */
  sessions: SessionStore;
  /** One entry appended to `chainId` in its own transaction. */
  append(chainId: string, input: EntryInput): Promise<AuditEntry>;
}

/** A database with three replicas writing into it. */
export interface Engine {
  name: 'sqlite' | 'postgres';
  replicas: Replica[];
  bundle(chainId: string, sessionId: string | null): Promise<AuditBundle>;
  /** The same bundle as the gateway's audit route sends it: JSON text in pages of `pageSize`. */
  bundleJson(chainId: string, sessionId: string | null, pageSize: number): AsyncIterable<string | Buffer>;
  execution(agentId: string, executionId: string): Promise<ExecutionRow | undefined>;
  /** The call_ids of every open attempt. */
  openAttempts(): Promise<string[]>;
  /** A session row (status open), as SessionService writes it, without its genesis entry. */
  addSession(sessionId: string, agentId: string): Promise<void>;
  callCount(sessionId: string): Promise<number>;
  close(): Promise<void>;
}

const SESSION_SQL = `INSERT INTO sessions (session_id, agent_id, is_default, status, created_at, created_ms, chain_root,
  key_thumbprint, call_count, binding_json, owner) VALUES ($1, $2, 0, 'open', '2026-12-01T00:00:00.000Z', 0,
  'sha256:root', 'thumb', 0, '{}', 'replica-0')`;

/** Three connections to one new SQLite file. */
export function sqliteEngine(): Engine {
  const dir = mkdtempSync(join(tmpdir(), 'cmcp-contract-'));
  const path = join(dir, 'store.db');
  const dbs = [0, 1, 2].map(() => openDatabase(path, 30_000));
  const reader = dbs[0] as Db;
  return {
    name: 'sqlite',
    replicas: dbs.map((db, i) => {
      const chain = new AuditChain(db);
      return {
        id: `replica-${i}`,
        writes: sqliteCallStore(db, `replica-${i}`, chain, null),
        operator: sqliteOperatorRecords(db, chain),
        sessions: new SqliteSessionStore(db, chain, `replica-${i}`),
        append: (chainId, input) => chain.appendAwaited(chainId, input),
      };
    }),
    bundle: async (chainId, sessionId) => new AuditChain(reader).bundle(chainId, sessionId),
    bundleJson: (chainId, sessionId, pageSize) =>
      new AuditChain(reader).bundleJson(chainId, sessionId, pageSize),
    execution: async (a, x) => new ExecutionRegistry(reader, 'reader').get(a, x),
    openAttempts: async () =>
      reader
        .prepare<[], { call_id: string }>('SELECT call_id FROM call_attempts ORDER BY call_id')
        .all()
        .map((r) => r.call_id),
    addSession: async (id, agent) => {
      reader.prepare(SESSION_SQL.replace(/\$\d/g, '?')).run(id, agent);
    },
    callCount: async (id) =>
      reader
        .prepare<[string], { n: number }>('SELECT call_count AS n FROM sessions WHERE session_id = ?')
        .get(id)?.n ?? -1,
    close: async () => {
      for (const db of dbs) db.close();
      rmSync(dir, { recursive: true, force: true });
    },
  };
}

/** A PostgreSQL replica: its pool, its fence. */
export interface PgReplica extends Replica {
  pool: pg.Pool;
  fence: Fence;
}

/** Options of {@link postgresEngine}. */
export interface PgEngineOptions {
  /** Lease ttl of each replica, milliseconds (default 60 s: never expires during a test). */
  ttlMs?: number[];
}

/** A new database on `server`, migrated, and three pools each holding its own lease. */
export async function postgresEngine(
  server: PostgresInstance,
  name: string,
  opts: PgEngineOptions = {},
): Promise<Engine & { replicas: PgReplica[]; url: string; admin: pg.Pool }> {
  const url = await createDatabase(server, name);
  const admin = new pg.Pool({ connectionString: url, max: 4 });
  // An idle connection the server ends (its stop at the end of a file) must not be an unhandled 'error'.
  admin.on('error', () => undefined);
  const c = await admin.connect();
  try {
    await migratePostgres(c, name);
  } finally {
    c.release();
  }
  const replicas: PgReplica[] = [];
  for (const i of [0, 1, 2]) {
    const pool = openReplicaPool(url, { leaseTtlMs: 60_000, max: 8 });
    const id = `replica-${i}`;
    const { fence } = await acquireLease(pool, {
      replicaId: id,
      holder: `test pool ${i}`,
      keyThumbprint: `thumb-${i}`,
      ttlMs: opts.ttlMs?.[i] ?? 60_000,
    });
    replicas.push({
      id,
      pool,
      fence,
      writes: new PostgresWriteStore(pool, fence),
      operator: postgresOperatorRecords(pool, fence),
      sessions: new PostgresSessionStore(pool, fence),
      append: (chainId, input) => fencedTransaction(pool, fence, (cl) => appendEntry(cl, chainId, input)),
    });
  }
  return {
    name: 'postgres',
    url,
    admin,
    replicas,
    bundle: (chainId, sessionId) => chainBundle(admin, chainId, sessionId),
    bundleJson: (chainId, sessionId, pageSize) => chainBundleJson(admin, chainId, sessionId, pageSize),
    execution: (a, x) => getExecution(admin, a, x),
    openAttempts: async () =>
      (await admin.query<{ call_id: string }>('SELECT call_id FROM call_attempts ORDER BY call_id')).rows.map(
        (r) => r.call_id,
      ),
    addSession: async (id, agent) => {
      await admin.query(SESSION_SQL, [id, agent]);
    },
    callCount: async (id) =>
      Number(
        (
          await admin.query<{ n: string }>(
            'SELECT call_count::text AS n FROM sessions WHERE session_id = $1',
            [id],
          )
        ).rows[0]?.n ?? -1,
      ),
    close: async () => {
      for (const r of replicas) await r.pool.end();
      await admin.end();
    },
  };
}

/**
 * The engines a contract file runs on: registers a throw-away PostgreSQL server for the calling
 * file (started in `beforeAll` where PostgreSQL is installed, stopped in `afterAll`); each
 * `pgEngine()` is a fresh database `<prefix>_<n>` on it.
 */
export function contractEngines(prefix: string) {
  const withPostgres = hasPostgres();
  let server: PostgresInstance | null = null;
  let count = 0;
  beforeAll(async () => {
    if (withPostgres) server = await startPostgres();
  }, 60_000);
  afterAll(async () => {
    await server?.stop();
  });
  const pgEngine = (opts?: PgEngineOptions) =>
    postgresEngine(server as PostgresInstance, `${prefix}_${++count}`, opts);
  const engines: [string, () => Promise<Engine>][] = [
    ['sqlite', async () => sqliteEngine()],
    ['postgres', () => pgEngine()],
  ];
  return { withPostgres, pgEngine, engines };
}
