/**
 * The PostgreSQL 15 schema, by version (./index.ts): the same tables, columns, keys, checks and
 * indexes as ./sqlite.ts, in PostgreSQL's types. SQLite INTEGER is BIGINT (64-bit, as SQLite's);
 * every TEXT column is `COLLATE "C"`, byte order of UTF-8 as SQLite's BINARY collation, so keys
 * compare and sort alike in both engines whatever the server's default collation. WITHOUT ROWID
 * is a SQLite storage choice with no PostgreSQL counterpart (a heap table plus its primary key
 * index). `cmcp db migrate|status` and the PostgreSQL store (store/postgres/) use this file; the
 * gateway serves on SQLite (docs/replicas.md).
 */
import type pg from 'pg';
import {
  engineMigrations,
  LATEST_SCHEMA_VERSION,
  type Migration,
  type MigrationReport,
  SchemaTooNewError,
} from './index.js';

const T = 'TEXT COLLATE "C"';

const SCHEMA_V1 = `
CREATE TABLE audit_entries (
  chain_id        ${T} NOT NULL,
  sequence_number BIGINT NOT NULL,
  prev_entry_hash ${T} NOT NULL,
  entry_hash      ${T} NOT NULL,
  entry_type      ${T} NOT NULL,
  session_id      ${T},
  execution_id    ${T},
  agent_id        ${T},
  timestamp_utc   ${T} NOT NULL,
  canonical       ${T} NOT NULL,
  PRIMARY KEY (chain_id, sequence_number),
  UNIQUE (chain_id, prev_entry_hash)
);
CREATE UNIQUE INDEX audit_entries_hash ON audit_entries(entry_hash);

CREATE TABLE sessions (
  session_id     ${T} PRIMARY KEY,
  agent_id       ${T} NOT NULL,
  is_default     BIGINT NOT NULL,
  status         ${T} NOT NULL CHECK (status IN ('open','closed')),
  created_at     ${T} NOT NULL,
  created_ms     BIGINT NOT NULL,
  closed_at      ${T},
  chain_root     ${T} NOT NULL,
  key_thumbprint ${T} NOT NULL,
  call_count     BIGINT NOT NULL DEFAULT 0,
  binding_json   ${T} NOT NULL,
  owner          ${T} NOT NULL DEFAULT 'gateway'
);

CREATE TABLE instances (
  instance_id  ${T} PRIMARY KEY,
  pid          BIGINT NOT NULL,
  hostname     ${T} NOT NULL,
  started_at   ${T} NOT NULL,
  heartbeat_ms BIGINT NOT NULL
);
CREATE INDEX sessions_agent ON sessions(agent_id, status, is_default);

CREATE TABLE claims (
  claim_sequence BIGINT PRIMARY KEY,
  session_id     ${T} NOT NULL UNIQUE,
  claim_hash     ${T} NOT NULL,
  canonical      ${T} NOT NULL
);

CREATE TABLE executions (
  agent_id            ${T} NOT NULL,
  execution_id        ${T} NOT NULL,
  binding             ${T} NOT NULL,
  state               ${T} NOT NULL CHECK (state IN ('in_flight','completed','not_attempted','outcome_unknown')),
  call_id             ${T} NOT NULL,
  session_id          ${T} NOT NULL,
  tool_name           ${T} NOT NULL,
  owner               ${T} NOT NULL,
  created_at          ${T} NOT NULL,
  updated_at          ${T} NOT NULL,
  terminal_entry_hash ${T},
  PRIMARY KEY (agent_id, execution_id)
);
CREATE INDEX executions_state ON executions(state);

CREATE TABLE call_attempts (
  call_id              ${T} PRIMARY KEY,
  method               ${T} NOT NULL,
  upstream             ${T} NOT NULL,
  agent_id             ${T} NOT NULL,
  session_id           ${T} NOT NULL,
  execution_id         ${T},
  tool_name            ${T},
  request_payload_hash ${T},
  workflow_id          ${T},
  owner                ${T} NOT NULL,
  started_at           ${T} NOT NULL
);
CREATE INDEX call_attempts_owner ON call_attempts(owner);
`;

// See ./sqlite.ts version 2.
const SCHEMA_V2 = `
CREATE TABLE session_sensitivity (
  session_id ${T} PRIMARY KEY,
  level      BIGINT NOT NULL
);
`;

// See ./sqlite.ts (replicas). A chain written before this version gets its tip row here, so
// store/postgres/chain.ts may treat a missing row as an empty chain.
const SCHEMA_REPLICAS = `
CREATE TABLE chain_tips (
  chain_id      ${T} PRIMARY KEY,
  tip_sequence  BIGINT NOT NULL,
  tip_hash      ${T} NOT NULL,
  tip_timestamp ${T} NOT NULL
);
INSERT INTO chain_tips (chain_id, tip_sequence, tip_hash, tip_timestamp)
  SELECT DISTINCT ON (chain_id) chain_id, sequence_number, entry_hash, timestamp_utc
  FROM audit_entries ORDER BY chain_id, sequence_number DESC;

CREATE TABLE replica_leases (
  replica_id     ${T} PRIMARY KEY,
  lease_token    BIGINT NOT NULL,
  holder         ${T} NOT NULL,
  key_thumbprint ${T} NOT NULL,
  expires_ms     BIGINT NOT NULL,
  state          ${T} NOT NULL CHECK (state IN ('live','sealing','sealed'))
);
`;

// A long claim's stored text in parts (as ./sqlite.ts version 3).
const SCHEMA_V3 = `
CREATE TABLE claim_parts (
  text_id ${T} NOT NULL,
  part    BIGINT NOT NULL,
  owner   ${T} NOT NULL,
  bytes   BYTEA  NOT NULL,
  PRIMARY KEY (text_id, part)
);
CREATE INDEX claim_parts_owner ON claim_parts(owner);
CREATE TABLE claim_part_links (
  claim_sequence BIGINT PRIMARY KEY,
  text_id        ${T} NOT NULL UNIQUE,
  parts          BIGINT NOT NULL,
  text_bytes     BIGINT NOT NULL
);
`;

// See ./sqlite.ts version 5.
const SCHEMA_V5 = `
CREATE TABLE entry_writers (
  entry_hash       ${T} PRIMARY KEY,
  replica_id       ${T} NOT NULL,
  writer_signature ${T} NOT NULL
);
CREATE TABLE replica_evidence (
  key_thumbprint ${T} PRIMARY KEY,
  replica_id     ${T} NOT NULL,
  lease_token    BIGINT NOT NULL,
  entry_hash     ${T} NOT NULL,
  member         ${T} NOT NULL
);
`;

// See ./sqlite.ts version 6.
const SCHEMA_V6 = `
CREATE TABLE readiness_probe (
  writer    ${T} PRIMARY KEY,
  probed_at ${T} NOT NULL
);
`;

// The audit export's position (store/postgres/audit-feed.ts): an era, the writing transaction's
// id and a serial. Replicas commit concurrently, so no serial is commit order; entries are read
// only from transactions older than every transaction still running (pg_snapshot_xmin), so no
// entry can commit behind a position already read. A restore (`cmcp db restore`) moves to the
// next era: the restored entries keep their order, and whatever the new server writes, whose
// transaction ids start low again, follows them. Existing rows take the migration's transaction.
const SCHEMA_V7 = `
CREATE TABLE audit_feed_era (era BIGINT NOT NULL);
INSERT INTO audit_feed_era VALUES (0);
ALTER TABLE audit_entries ADD COLUMN feed_era BIGINT NOT NULL DEFAULT 0;
ALTER TABLE audit_entries ADD COLUMN feed_xid xid8 NOT NULL DEFAULT pg_current_xact_id();
ALTER TABLE audit_entries ADD COLUMN feed_serial BIGINT GENERATED ALWAYS AS IDENTITY;
CREATE INDEX audit_entries_feed ON audit_entries (feed_era, feed_xid, feed_serial);
`;

// See ./sqlite.ts version 8. The frontier moves with the tip in the statement that moves it
// (store/postgres/chain.ts). A key of json (not jsonb) reads a text jsonb would refuse (\u0000).
const SCHEMA_V8 = `
ALTER TABLE chain_tips ADD COLUMN tree_frontier BYTEA;
CREATE TABLE tree_nodes (
  chain_id   ${T} NOT NULL,
  level      BIGINT NOT NULL,
  node_index BIGINT NOT NULL,
  hash       BYTEA NOT NULL,
  PRIMARY KEY (chain_id, level, node_index)
);
CREATE TABLE checkpoints (
  chain_id  ${T} NOT NULL,
  tree_size BIGINT NOT NULL,
  root_hash ${T} NOT NULL,
  note      ${T} NOT NULL,
  signed_at ${T} NOT NULL,
  PRIMARY KEY (chain_id, tree_size)
);
ALTER TABLE audit_entries ADD COLUMN call_id ${T};
UPDATE audit_entries SET call_id = canonical::json->>'call_id';
CREATE INDEX audit_entries_call ON audit_entries(chain_id, call_id) WHERE call_id IS NOT NULL;
`;

/** PostgreSQL's migrations, in order (the same versions and descriptions as ./sqlite.ts). */
export const POSTGRES_MIGRATIONS: Migration[] = engineMigrations('postgres', [
  SCHEMA_V1,
  SCHEMA_V2,
  SCHEMA_V3,
  SCHEMA_REPLICAS,
  SCHEMA_V5,
  SCHEMA_V6,
  SCHEMA_V7,
  SCHEMA_V8,
]);

const SCHEMA_VERSION_TABLE = `
CREATE TABLE IF NOT EXISTS schema_version (
  version     BIGINT PRIMARY KEY,
  description ${T} NOT NULL,
  applied_at  ${T} NOT NULL
);`;

/**
 * Key of the session-level advisory lock that serialises migrations of one database
 * (PostgreSQL 15 docs §9.27.10): replicas started together migrate one after the other; a
 * connection that dies releases it.
 * 0x636d6370 is "cmcp" in ASCII; 1 names the migration lock.
 */
const MIGRATION_LOCK: [number, number] = [0x636d6370, 1];

/**
 * The schema version of a PostgreSQL database (its search_path's schema_version table):
 * 0 when there is none. Reads only.
 * @throws pg errors (connection lost, permission denied).
 */
export async function postgresSchemaVersion(client: pg.ClientBase): Promise<number> {
  const t = await client.query<{ t: string | null }>("SELECT to_regclass('schema_version')::text AS t");
  if (!t.rows[0]?.t) return 0;
  const v = await client.query<{ v: string | null }>('SELECT MAX(version)::text AS v FROM schema_version');
  return Number(v.rows[0]?.v ?? 0);
}

/**
 * Brings a PostgreSQL database to {@link LATEST_SCHEMA_VERSION}: each pending migration in its
 * own transaction, begun once the migration advisory lock is held, which re-reads the version.
 * @param where how messages name the database (a redacted URL).
 * @throws SchemaTooNewError when the database is newer than this code (nothing written);
 *   pg errors (the transaction is rolled back).
 */
export async function migratePostgres(client: pg.ClientBase, where: string): Promise<MigrationReport> {
  const from = await postgresSchemaVersion(client);
  if (from > LATEST_SCHEMA_VERSION) throw new SchemaTooNewError(from, where);
  const report: MigrationReport = { engine: 'postgres', from, to: from, applied: [] };
  for (;;) {
    // The lock is taken before BEGIN: a transaction begun before another one's migration
    // committed would still see its catalog as it was at that BEGIN (stale relation cache).
    await client.query('SELECT pg_advisory_lock($1, $2)', MIGRATION_LOCK);
    try {
      const step = await migrateOne(client, where);
      report.to = step.to;
      if (!step.applied) return report;
      report.applied.push(step.applied);
    } finally {
      await client.query('SELECT pg_advisory_unlock($1, $2)', MIGRATION_LOCK).catch(() => undefined);
    }
  }
}

/** The next pending migration in one transaction (the caller holds the migration lock). */
async function migrateOne(
  client: pg.ClientBase,
  where: string,
): Promise<{ to: number; applied: { version: number; description: string } | null }> {
  await client.query('BEGIN');
  try {
    const now = await postgresSchemaVersion(client);
    if (now > LATEST_SCHEMA_VERSION) throw new SchemaTooNewError(now, where);
    const next = POSTGRES_MIGRATIONS[now];
    if (next) {
      await client.query(SCHEMA_VERSION_TABLE);
      await client.query(next.sql);
      await client.query(
        'INSERT INTO schema_version (version, description, applied_at) VALUES ($1, $2, $3)',
        [next.version, next.description, new Date().toISOString()],
      );
    }
    await client.query('COMMIT');
    return next
      ? { to: next.version, applied: { version: next.version, description: next.description } }
      : { to: now, applied: null };
  } catch (e) {
    await client.query('ROLLBACK').catch(() => undefined);
    throw e;
  }
}
