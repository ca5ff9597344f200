/**
 * The versioned schema (docs/spec/audit-entries.md#schema-versions): what both engines share.
 * Each engine has its own numbered migrations (./sqlite.ts, ./postgres.ts) with the same version
 * numbers and descriptions; a `schema_version` table records each applied version; each
 * migration is applied in one transaction; a database whose version is newer than
 * {@link LATEST_SCHEMA_VERSION} is refused, never written.
 */
import { CmcpError } from '../../errors/index.js';

/** The schema version this code writes and reads. */
export const LATEST_SCHEMA_VERSION = 8;

/**
 * Each version's one-line description, in order from version 1, the same text in both engines
 * (stored in `schema_version.description`).
 */
const MIGRATION_DESCRIPTIONS: readonly string[] = [
  'the schema as of cmcp 0.1.0 before versioning',
  'session_sensitivity: the highest sensitivity each session attempted',
  "claim_parts, claim_part_links: a long claim's stored text in parts written before its closing transaction",
  // The replicas (docs/replicas.md).
  'chain_tips and replica_leases: per-chain tips and fenced replica leases',
  "entry_writers and replica_evidence: each replica entry's writer signature, each replica's start-up evidence",
  // Readiness's write probe (src/gateway/health/readiness.ts).
  'readiness_probe: one row per writer that /readyz updates to show a write commits',
  // The audit export feed (src/store/sqlite/audit-feed.ts, src/store/postgres/audit-feed.ts).
  'audit_entries feed position: the commit order the audit export reads entries in',
  // The chains' Merkle trees (docs/spec/transparency.md).
  "chain trees: each chain's tree frontier on its tip row, tree_nodes, checkpoints, audit_entries.call_id",
];

/** One numbered migration of one engine. */
export interface Migration {
  /** 1, 2, … in order; the same numbers in both engines. */
  version: number;
  /** One line; the same text in both engines (stored in schema_version.description). */
  description: string;
  /** The DDL, run as one script inside the version's transaction. */
  sql: string;
}

/** What a migration run found and did. */
export interface MigrationReport {
  engine: 'sqlite' | 'postgres';
  /**
   * The version found: a number (0 for an empty database), or `unversioned` for a SQLite file
   * made before versions were recorded (taken over at version 1, data unchanged).
   */
  from: number | 'unversioned';
  /** The version now. */
  to: number;
  /** The migrations applied, in order (none when the database was current). */
  applied: { version: number; description: string }[];
}

/** Thrown when the database's schema is newer than this code knows. `code` is stable. */
export class SchemaTooNewError extends CmcpError {
  declare readonly code: 'DATABASE_SCHEMA_TOO_NEW';
  constructor(
    readonly found: number,
    where: string,
  ) {
    super(
      'DATABASE_SCHEMA_TOO_NEW',
      `${where} has schema version ${found}, newer than this cmcp knows (${LATEST_SCHEMA_VERSION}): ` +
        'run the cmcp version that migrated it, or a newer one',
    );
    this.name = 'SchemaTooNewError';
  }
}

/**
 * Thrown where a PostgreSQL database (or a replica on one) is given for something served on
 * SQLite only (gateway/lifecycle/replica-unavailable.ts lists what a replica refuses). `code` is stable.
 */
export class PostgresFeatureUnavailableError extends CmcpError {
  declare readonly code: 'POSTGRES_FEATURE_UNAVAILABLE';
  /** @param what what is not served on PostgreSQL, as the message names it. */
  constructor(what: string) {
    super('POSTGRES_FEATURE_UNAVAILABLE', `${what} is not served on PostgreSQL yet (docs/replicas.md)`);
    this.name = 'PostgresFeatureUnavailableError';
  }
}

export { isPostgresUrl } from '../../config/database.js';

/**
 * The URL with any password replaced by `***`, for messages and logs.
 * A string that is no URL is returned as `postgres://…` (never echoed: it may hold a secret).
 */
export function redactPostgresUrl(url: string): string {
  try {
    const u = new URL(url);
    if (u.password) u.password = '***';
    return u.toString();
  } catch {
    return 'postgres://…';
  }
}

/**
 * One engine's migrations: its DDL for each version, in order from version 1, with the shared
 * descriptions.
 * @throws Error when the engine's list is not one script per version up to
 *   {@link LATEST_SCHEMA_VERSION} (a bug, caught at load).
 */
export function engineMigrations(engine: string, sqls: readonly string[]): Migration[] {
  if (sqls.length !== LATEST_SCHEMA_VERSION || MIGRATION_DESCRIPTIONS.length !== LATEST_SCHEMA_VERSION)
    throw new Error(
      `${engine} has ${sqls.length} migrations, LATEST_SCHEMA_VERSION is ${LATEST_SCHEMA_VERSION}`,
    );
  return sqls.map((sql, i) => ({ version: i + 1, description: MIGRATION_DESCRIPTIONS[i] as string, sql }));
}

/** Thrown when the database cannot be opened or reached. `code` is stable. */
export class DatabaseUnavailableError extends CmcpError {
  declare readonly code: 'DATABASE_UNAVAILABLE';
  constructor(message: string) {
    super('DATABASE_UNAVAILABLE', message);
    this.name = 'DatabaseUnavailableError';
  }
}
