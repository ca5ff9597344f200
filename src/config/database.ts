/** What the `database` setting names: a SQLite file or a PostgreSQL server. */

/** True when `database` names a PostgreSQL server (libpq URI, PostgreSQL 15 docs §34.1.1.2). */
export function isPostgresUrl(database: string): boolean {
  return /^postgres(ql)?:\/\//i.test(database);
}
