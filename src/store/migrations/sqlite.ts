/**
 * The SQLite schema, by version (./index.ts). Version 1 is the schema as the gateway made it
 * before versions were recorded (CREATE TABLE IF NOT EXISTS at every open), text unchanged, so
 * that a file made by that code is taken over at version 1 as it is: {@link migrateSqlite}
 * first applies the two upgrades that code applied at open (sessions.owner; audit_entries from
 * WITHOUT ROWID to a rowid table), then version 1's IF NOT EXISTS DDL adds the tables such a
 * file may lack, then records version 1 — all in one transaction.
 */
import type Database from 'better-sqlite3';
import {
  engineMigrations,
  LATEST_SCHEMA_VERSION,
  type Migration,
  type MigrationReport,
  SchemaTooNewError,
} from './index.js';

type Db = Database.Database;

// audit_entries is a rowid table: its ~1 KB rows fit in a table b-tree leaf. As a WITHOUT
// ROWID table each row lived in an index b-tree, whose cells spill past ~1 KB (page 4096) to
// an overflow page of its own: ~4.7 KB on disk per entry (docs/operations.md#the-wal-and-the-disk).
const AUDIT_ENTRIES = `
CREATE TABLE IF NOT EXISTS audit_entries (
  chain_id        TEXT    NOT NULL,
  sequence_number INTEGER NOT NULL,
  prev_entry_hash TEXT    NOT NULL,
  entry_hash      TEXT    NOT NULL,
  entry_type      TEXT    NOT NULL,
  session_id      TEXT,
  execution_id    TEXT,
  agent_id        TEXT,
  timestamp_utc   TEXT    NOT NULL,
  canonical       TEXT    NOT NULL,   -- the exact JCS text that was hashed
  PRIMARY KEY (chain_id, sequence_number),
  UNIQUE (chain_id, prev_entry_hash)
);
CREATE UNIQUE INDEX IF NOT EXISTS audit_entries_hash ON audit_entries(entry_hash);
`;

const SCHEMA_V1 = `${AUDIT_ENTRIES}

CREATE TABLE IF NOT EXISTS sessions (
  session_id    TEXT PRIMARY KEY,
  agent_id      TEXT    NOT NULL,
  is_default    INTEGER NOT NULL,
  status        TEXT    NOT NULL CHECK (status IN ('open','closed')),
  created_at    TEXT    NOT NULL,
  created_ms    INTEGER NOT NULL,
  closed_at     TEXT,
  chain_root    TEXT    NOT NULL,
  key_thumbprint TEXT   NOT NULL,    -- b64url; the gateway key that the binding covers
  call_count    INTEGER NOT NULL DEFAULT 0,
  binding_json  TEXT    NOT NULL,    -- preimage + evidence section as it will appear in the claim
  owner         TEXT    NOT NULL DEFAULT 'gateway'  -- instance_id of the gateway that opened it
);

-- One live process per instance_id (see store/sqlite/instance-lock.ts).
CREATE TABLE IF NOT EXISTS instances (
  instance_id  TEXT PRIMARY KEY,
  pid          INTEGER NOT NULL,
  hostname     TEXT    NOT NULL,
  started_at   TEXT    NOT NULL,
  heartbeat_ms INTEGER NOT NULL
);
CREATE INDEX IF NOT EXISTS sessions_agent ON sessions(agent_id, status, is_default);

CREATE TABLE IF NOT EXISTS claims (
  claim_sequence INTEGER PRIMARY KEY,
  session_id     TEXT NOT NULL UNIQUE,
  claim_hash     TEXT NOT NULL,
  canonical      TEXT NOT NULL        -- the exact JCS text of the signed claim
);

CREATE TABLE IF NOT EXISTS executions (
  agent_id        TEXT NOT NULL,
  execution_id    TEXT NOT NULL,
  binding         TEXT NOT NULL,      -- Execution Action Binding v1, rendered sha256:<hex>
  state           TEXT NOT NULL CHECK (state IN ('in_flight','completed','not_attempted','outcome_unknown')),
  call_id         TEXT NOT NULL,
  session_id      TEXT NOT NULL,
  tool_name       TEXT NOT NULL,
  owner           TEXT NOT NULL,      -- instance_id of the gateway that admitted it (recovery scope)
  created_at      TEXT NOT NULL,
  updated_at      TEXT NOT NULL,
  terminal_entry_hash TEXT,
  PRIMARY KEY (agent_id, execution_id)
) WITHOUT ROWID;
CREATE INDEX IF NOT EXISTS executions_state ON executions(state);

-- Calls on their way to an upstream (src/store/sqlite/attempts.ts): a row is written before the upstream
-- is invoked and deleted in the transaction of the call's terminal entry; what is left at
-- start-up is recovered as outcome_unknown (docs/spec/execution.md#recovery).
CREATE TABLE IF NOT EXISTS call_attempts (
  call_id      TEXT PRIMARY KEY,
  method       TEXT NOT NULL,      -- the MCP method forwarded (tools/call, …)
  upstream     TEXT NOT NULL,      -- server_identity of the upstream invoked
  agent_id     TEXT NOT NULL,
  session_id   TEXT NOT NULL,
  execution_id TEXT,               -- the agent's execution_id, or NULL (never synthesized)
  tool_name    TEXT,
  request_payload_hash TEXT,
  workflow_id  TEXT,
  owner        TEXT NOT NULL,      -- instance_id of the gateway that forwarded it (recovery scope)
  started_at   TEXT NOT NULL
) WITHOUT ROWID;
CREATE INDEX IF NOT EXISTS call_attempts_owner ON call_attempts(owner);
`;

// The highest catalog sensitivity level each session has attempted (src/call/sensitivity.ts):
// raised in the attempt's transaction, read back instead of replaying the session's chain. A
// session made before version 2 has no row and is replayed once.
const SCHEMA_V2 = `
CREATE TABLE session_sensitivity (
  session_id TEXT PRIMARY KEY,
  level      INTEGER NOT NULL      -- index into SENSITIVITY_LEVELS (src/catalog/catalog.ts)
) WITHOUT ROWID;
`;

// The replicas' tables (docs/replicas.md), the same in both engines. Only the PostgreSQL store
// (store/postgres/) maintains them: a chain's tip row, locked by every append to that chain, and
// one fenced lease per replica. A SQLite gateway is one writer on one file (the write lock is the
// serialisation, store/sqlite/instance-lock.ts the lease), so replica_leases stays empty here;
// from version 8 each append moves its chain's tip row, which carries the chain's tree.
const SCHEMA_REPLICAS = `
CREATE TABLE chain_tips (
  chain_id      TEXT PRIMARY KEY,
  tip_sequence  INTEGER NOT NULL,  -- the chain's last sequence_number (-1: no entry yet)
  tip_hash      TEXT NOT NULL,     -- its entry_hash ('genesis' when none)
  tip_timestamp TEXT NOT NULL      -- its timestamp_utc ('' when none)
) WITHOUT ROWID;

CREATE TABLE replica_leases (
  replica_id     TEXT PRIMARY KEY, -- the replica's instance_id
  lease_token    INTEGER NOT NULL, -- fencing token: grows at every acquire and takeover
  holder         TEXT NOT NULL,    -- host, pid, started_at (for operators)
  key_thumbprint TEXT NOT NULL,    -- the replica's gateway key (binding.md)
  expires_ms     INTEGER NOT NULL, -- the database's clock, epoch milliseconds
  state          TEXT NOT NULL CHECK (state IN ('live','sealing','sealed'))
) WITHOUT ROWID;
`;

// A long version-1 claim's stored text in parts, as earlier gateways wrote it: claims.canonical
// holds its first part, claim_parts the rest, claim_part_links ties them to the claim. No longer
// written (a version-2 claim is a few KB); still read (src/store/sqlite/claims.ts storedClaimText).
const SCHEMA_V3 = `
CREATE TABLE claim_parts (
  text_id TEXT    NOT NULL,      -- one claim text (one try of a close)
  part    INTEGER NOT NULL,      -- 1, 2, … in order (part 0 is claims.canonical)
  owner   TEXT    NOT NULL,      -- instance_id of the gateway that wrote it (clean-up scope)
  bytes   BLOB    NOT NULL,      -- the part's UTF-8 bytes
  PRIMARY KEY (text_id, part)
);
CREATE INDEX claim_parts_owner ON claim_parts(owner);
CREATE TABLE claim_part_links (
  claim_sequence INTEGER PRIMARY KEY,   -- the claim whose text goes on in the parts
  text_id        TEXT    NOT NULL UNIQUE,
  parts          INTEGER NOT NULL,      -- parts after claims.canonical
  text_bytes     INTEGER NOT NULL       -- the whole text's length, bytes
);
`;

// The replicas' evidence (docs/replicas.md#replica-identity-in-entries), the same in both engines.
// Only the PostgreSQL store writes them: a replica signs each entry it writes (one entry_writers
// row beside the entry; audit_entries itself is unchanged) and records its start-up evidence once
// per key. A SQLite gateway's entries name no writer, so here they stay empty.
const SCHEMA_V5 = `
CREATE TABLE entry_writers (
  entry_hash       TEXT PRIMARY KEY, -- the signed entry's audit_entries.entry_hash
  replica_id       TEXT NOT NULL,    -- the writer its body names
  writer_signature TEXT NOT NULL     -- base64url Ed25519 over "cmcp.entry-writer/1:" ‖ entry_hash
) WITHOUT ROWID;
CREATE TABLE replica_evidence (
  key_thumbprint TEXT PRIMARY KEY,  -- the replica's gateway key (one per start)
  replica_id     TEXT NOT NULL,     -- its instance_id
  lease_token    INTEGER NOT NULL,  -- the lease it started under
  entry_hash     TEXT NOT NULL,     -- its replica_start entry in the gateway chain
  member         TEXT NOT NULL      -- JSON: the claim's replicas[] member (format/replica.ts)
) WITHOUT ROWID;
`;

// Readiness's write probe (src/gateway/health/readiness.ts): /readyz commits an update of its writer's
// row, so "ready" means a write reached the disk just now (a full disk fails the WAL append).
// Nothing else reads it.
const SCHEMA_V6 = `
CREATE TABLE readiness_probe (
  writer    TEXT PRIMARY KEY, -- the gateway's instance_id (a replica's on PostgreSQL)
  probed_at TEXT NOT NULL     -- ISO 8601 time of the last committed probe
) WITHOUT ROWID;
`;

// The audit export's position (store/sqlite/audit-feed.ts) is audit_entries' rowid: one writer
// at a time appends, rows are never deleted, so rowids grow in commit order. Nothing to add.
const SCHEMA_V7 = `SELECT 1;`;

// Every chain is also a Merkle tree (docs/spec/transparency.md#the-tree), kept by each append
// (store/sqlite/tree.ts): the frontier on the chain's tip row (which SQLite now keeps too), the
// perfect subtree nodes above the leaves, the signed checkpoints, and each entry's call_id for a
// receipt's lookup. A chain older than this version has its tree built at its next append.
const SCHEMA_V8 = `
ALTER TABLE chain_tips ADD COLUMN tree_frontier BLOB; -- MerkleFrontier.toBytes(); NULL: not kept yet
CREATE TABLE tree_nodes (
  chain_id   TEXT    NOT NULL,
  level      INTEGER NOT NULL,  -- ≥ 1: the subtree of 2^level leaves
  node_index INTEGER NOT NULL,  -- leaves [node_index·2^level, (node_index+1)·2^level)
  hash       BLOB    NOT NULL,  -- its 32-byte RFC 9162 hash
  PRIMARY KEY (chain_id, level, node_index)
) WITHOUT ROWID;
CREATE TABLE checkpoints (
  chain_id  TEXT    NOT NULL,
  tree_size INTEGER NOT NULL,
  root_hash TEXT    NOT NULL,   -- lowercase hex
  note      TEXT    NOT NULL,   -- the C2SP signed note, as signed
  signed_at TEXT    NOT NULL,
  PRIMARY KEY (chain_id, tree_size)
) WITHOUT ROWID;
ALTER TABLE audit_entries ADD COLUMN call_id TEXT;
UPDATE audit_entries SET call_id = json_extract(canonical, '$.call_id');
CREATE INDEX audit_entries_call ON audit_entries(chain_id, call_id) WHERE call_id IS NOT NULL;
`;

/** SQLite's migrations, in order (the same versions and descriptions as ./postgres.ts). */
export const SQLITE_MIGRATIONS: Migration[] = engineMigrations('sqlite', [
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
  version     INTEGER PRIMARY KEY,
  description TEXT    NOT NULL,
  applied_at  TEXT    NOT NULL
);`;

/** Tables of a cmcp database made before versions were recorded (any one of them is enough). */
const UNVERSIONED_TABLES = [
  'audit_entries',
  'sessions',
  'instances',
  'claims',
  'executions',
  'call_attempts',
];

/**
 * The schema version of an open SQLite database: a number (0 when it has no cmcp table), or
 * `unversioned` when it has cmcp tables but no schema_version (made before versioning).
 * Reads only.
 */
export function sqliteSchemaVersion(db: Db): number | 'unversioned' {
  const tables = db
    .prepare<[], { name: string }>("SELECT name FROM sqlite_schema WHERE type = 'table'")
    .all()
    .map((t) => t.name);
  if (tables.includes('schema_version')) {
    const row = db.prepare<[], { v: number | null }>('SELECT MAX(version) AS v FROM schema_version').get();
    return row?.v ?? 0;
  }
  return tables.some((t) => UNVERSIONED_TABLES.includes(t)) ? 'unversioned' : 0;
}

/**
 * Brings an open SQLite database to {@link LATEST_SCHEMA_VERSION}: each pending migration in
 * its own `BEGIN IMMEDIATE` transaction, which re-reads the version once it holds the write
 * lock (another process may have migrated meanwhile). A current database is only read.
 * @throws SchemaTooNewError when the database is newer than this code (nothing written);
 *   SQLite errors (SQLITE_BUSY after the connection's busy timeout).
 */
export function migrateSqlite(db: Db, where = 'the database'): MigrationReport {
  const from = sqliteSchemaVersion(db);
  const report: MigrationReport = { engine: 'sqlite', from, to: 0, applied: [] };
  if (typeof from === 'number' && from > LATEST_SCHEMA_VERSION) throw new SchemaTooNewError(from, where);
  report.to = typeof from === 'number' ? from : 0;
  // A current database (every open after the first) takes no write lock.
  if (from === LATEST_SCHEMA_VERSION) return report;
  for (;;) {
    const step = db
      .transaction(() => {
        const now = sqliteSchemaVersion(db);
        if (typeof now === 'number' && now > LATEST_SCHEMA_VERSION) throw new SchemaTooNewError(now, where);
        const next = SQLITE_MIGRATIONS[now === 'unversioned' ? 0 : now];
        if (!next) return { current: now as number, applied: null };
        if (now === 'unversioned') upgradeUnversioned(db);
        db.exec(SCHEMA_VERSION_TABLE);
        db.exec(next.sql);
        db.prepare('INSERT INTO schema_version (version, description, applied_at) VALUES (?, ?, ?)').run(
          next.version,
          next.description,
          new Date().toISOString(),
        );
        return { current: next.version, applied: next };
      })
      .immediate();
    report.to = step.current;
    if (!step.applied) return report;
    report.applied.push({ version: step.applied.version, description: step.applied.description });
  }
}

/**
 * The upgrades the gateway applied at open before versions were recorded, for a file made by
 * still older code: sessions gets its owner column (the default instance id), and audit_entries
 * made as a WITHOUT ROWID table becomes a rowid table with every row copied unchanged (the
 * canonical texts are what the chains hash). Runs inside {@link migrateSqlite}'s transaction.
 */
function upgradeUnversioned(db: Db): void {
  const cols = db.prepare<[], { name: string }>("SELECT name FROM pragma_table_info('sessions')").all();
  if (cols.length && !cols.some((c) => c.name === 'owner'))
    db.exec("ALTER TABLE sessions ADD COLUMN owner TEXT NOT NULL DEFAULT 'gateway'");
  const row = db
    .prepare<[], { sql: string }>(
      "SELECT sql FROM sqlite_schema WHERE type = 'table' AND name = 'audit_entries'",
    )
    .get();
  if (!row || !/WITHOUT\s+ROWID/i.test(row.sql)) return;
  db.exec('ALTER TABLE audit_entries RENAME TO audit_entries_without_rowid');
  db.exec('DROP INDEX IF EXISTS audit_entries_hash');
  db.exec(AUDIT_ENTRIES);
  db.exec(
    `INSERT INTO audit_entries (chain_id, sequence_number, prev_entry_hash, entry_hash, entry_type, session_id,
       execution_id, agent_id, timestamp_utc, canonical)
     SELECT chain_id, sequence_number, prev_entry_hash, entry_hash, entry_type, session_id, execution_id,
       agent_id, timestamp_utc, canonical FROM audit_entries_without_rowid ORDER BY chain_id, sequence_number`,
  );
  db.exec('DROP TABLE audit_entries_without_rowid');
}
