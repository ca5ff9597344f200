/**
 * The versioned schema (docs/spec/audit-entries.md#schema-versions): what both engines share.
 * Each engine has its own numbered migrations (./sqlite.ts, ./postgres.ts) with the same version
 * numbers and descriptions; a `schema_version` table records each applied version; each
 * migration is applied in one transaction; a database whose version is newer than
 * {@link LATEST_SCHEMA_VERSION} is refused, never written.
 */
import { CmcpError } from '../../errors/index.js';

/** The schema version this code writes and reads. */
export const LATEST_SCHEMA_VERSION = 6;

/** Version 2's description, shared by both engines. */
export const SESSION_SENSITIVITY_DESCRIPTION =
  'session_sensitivity: the highest sensitivity each session attempted';

/** Version 3's description, shared by both engines. */
export const CLAIM_PARTS_DESCRIPTION =
  "claim_parts, claim_part_links: a long claim's stored text in parts written before its closing transaction";

/**
 * The replicas' version (docs/replicas.md), shared by both engines. Version 4, after claim_parts
 * (version 3).
 */
export const REPLICA_LEASES_DESCRIPTION =
  'chain_tips and replica_leases: per-chain tips and fenced replica leases';

/**
 * The replicas' evidence (docs/replicas.md#replica-identity-in-entries), shared by both engines.
 * Version 5, after the leases (version 4).
 */
export const REPLICA_EVIDENCE_DESCRIPTION =
  "entry_writers and replica_evidence: each replica entry's writer signature, each replica's start-up evidence";

/**
 * Readiness's write probe (src/gateway/readiness.ts), shared by both engines. Version 6, after
 * the replicas' evidence (version 5).
 */
export const READINESS_PROBE_DESCRIPTION =
  'readiness_probe: one row per writer that /readyz updates to show a write commits';

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
 * SQLite only (gateway/replica-unavailable.ts lists what a replica refuses). `code` is stable.
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
 * Checks that an engine's list is 1, 2, … {@link LATEST_SCHEMA_VERSION} in order.
 * @throws Error (a programming error, at module load) otherwise.
 */
export function checkedMigrations(engine: string, list: Migration[]): Migration[] {
  list.forEach((m, i) => {
    if (m.version !== i + 1) throw new Error(`${engine} migration ${i} has version ${m.version}`);
  });
  if (list.length !== LATEST_SCHEMA_VERSION)
    throw new Error(
      `${engine} has ${list.length} migrations, LATEST_SCHEMA_VERSION is ${LATEST_SCHEMA_VERSION}`,
    );
  return list;
}

/** Thrown when the database cannot be opened or reached. `code` is stable. */
export class DatabaseUnavailableError extends CmcpError {
  declare readonly code: 'DATABASE_UNAVAILABLE';
  constructor(message: string) {
    super('DATABASE_UNAVAILABLE', message);
    this.name = 'DatabaseUnavailableError';
  }
}
