/**
 * The one way a runtime opens its storage: SQLite for a file path, PostgreSQL for a
 * `postgres://` URL (config `database`). Everything above works through the port (./port.ts);
 * what only one engine has is on its storage, told apart by `engine`.
 */
import type { Logger } from 'pino';
import { isPostgresUrl } from './migrations/index.js';
import { openPostgresStorage, type PostgresSettings, type PostgresStorage } from './postgres/open.js';
import {
  openSqliteStorage,
  type SqliteSettings,
  type SqliteStorage,
  type SqliteStorageOptions,
} from './sqlite/open.js';

export type Storage = SqliteStorage | PostgresStorage;

/**
 * Opens the configured storage, migrated and (SQLite) locked to this instance; on a failure
 * what was opened is closed again.
 * @throws (rejects) DatabaseUnavailableError; SchemaTooNewError; InstanceBusyError (SQLite: the
 *   instance runs elsewhere).
 * @param sqliteOptions SQLite mechanisms turned off for a measurement (tests); none by default.
 */
export async function openStorage(
  cfg: SqliteSettings & PostgresSettings,
  log: Logger,
  sqliteOptions?: SqliteStorageOptions,
): Promise<Storage> {
  if (!isPostgresUrl(cfg.database)) return openSqliteStorage(cfg, log, sqliteOptions);
  const storage = openPostgresStorage(cfg);
  try {
    await storage.migrate();
  } catch (e) {
    await storage.close();
    throw e;
  }
  return storage;
}
