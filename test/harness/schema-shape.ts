/**
 * The shape of a cmcp schema read from each engine's own catalog (SQLite's pragma_table_info /
 * pragma_index_list / pragma_index_info; PostgreSQL's information_schema and pg_index), in one
 * normal form, so that the two engines' migrated schemas can be compared as data.
 */
import type Database from 'better-sqlite3';
import type pg from 'pg';

export interface TableShape {
  /** name type not-null default, in column order. */
  columns: string[];
  /** Primary key columns, in key order. */
  primaryKey: string[];
  /** Every other unique key (constraint or index), as `a,b`, sorted. */
  unique: string[];
  /** Indexes made with CREATE INDEX, as `name(a,b)` (+ ` unique`), sorted. */
  indexes: string[];
}

export type SchemaShape = Record<string, TableShape>;

function column(name: string, type: string, notNull: boolean, dflt: string | null): string {
  return `${name} ${type} ${notNull ? 'not null' : 'null'} default ${dflt ?? '-'}`;
}

/** SQLite INTEGER is 64-bit: PostgreSQL BIGINT; SQLite BLOB: PostgreSQL BYTEA. */
const SQLITE_TYPES: Record<string, string> = { INTEGER: 'bigint', TEXT: 'text', BLOB: 'bytea' };

/**
 * The shape of a SQLite database. A primary key column counts as not null in both engines
 * (PostgreSQL enforces it; SQLite leaves a TEXT key of a rowid table nullable, and the gateway
 * never writes NULL there).
 */
export function sqliteShape(db: Database.Database): SchemaShape {
  const shape: SchemaShape = {};
  const tables = db
    .prepare<[], { name: string }>(
      "SELECT name FROM sqlite_schema WHERE type = 'table' AND name NOT LIKE 'sqlite_%' ORDER BY name",
    )
    .all();
  for (const { name } of tables) {
    const cols = db
      .prepare<
        [string],
        { name: string; type: string; notnull: number; dflt_value: string | null; pk: number }
      >('SELECT name, type, "notnull", dflt_value, pk FROM pragma_table_info(?) ORDER BY cid')
      .all(name);
    const indexList = db
      .prepare<[string], { name: string; unique: number; origin: string }>(
        'SELECT name, "unique", origin FROM pragma_index_list(?)',
      )
      .all(name);
    const indexCols = (index: string) =>
      db
        .prepare<[string], { name: string }>('SELECT name FROM pragma_index_info(?) ORDER BY seqno')
        .all(index)
        .map((c) => c.name)
        .join(',');
    shape[name] = {
      columns: cols.map((c) =>
        column(
          c.name,
          SQLITE_TYPES[c.type.toUpperCase()] ?? c.type,
          c.notnull === 1 || c.pk > 0,
          c.dflt_value,
        ),
      ),
      primaryKey: cols
        .filter((c) => c.pk > 0)
        .sort((a, b) => a.pk - b.pk)
        .map((c) => c.name),
      unique: indexList
        .filter((i) => i.unique === 1 && i.origin !== 'pk')
        .map((i) => indexCols(i.name))
        .sort(),
      indexes: indexList
        .filter((i) => i.origin === 'c')
        .map((i) => `${i.name}(${indexCols(i.name)})${i.unique ? ' unique' : ''}`)
        .sort(),
    };
  }
  return shape;
}

/** The shape of the PostgreSQL schema the connection's search_path resolves to first. */
export async function postgresShape(client: pg.ClientBase): Promise<SchemaShape> {
  const shape: SchemaShape = {};
  const cols = await client.query<{
    table_name: string;
    column_name: string;
    data_type: string;
    is_nullable: string;
    column_default: string | null;
  }>(
    `SELECT table_name, column_name, data_type, is_nullable, column_default FROM information_schema.columns
     WHERE table_schema = current_schema() ORDER BY table_name, ordinal_position`,
  );
  for (const c of cols.rows) {
    shape[c.table_name] ??= { columns: [], primaryKey: [], unique: [], indexes: [] };
    // A default is shown with its cast ('gateway'::text); SQLite shows the literal.
    const dflt = c.column_default?.replace(/::text$/, '') ?? null;
    shape[c.table_name]?.columns.push(column(c.column_name, c.data_type, c.is_nullable === 'NO', dflt));
  }
  const idx = await client.query<{
    table_name: string;
    index_name: string;
    is_unique: boolean;
    is_primary: boolean;
    backs_constraint: boolean;
    cols: string[];
  }>(
    `SELECT t.relname AS table_name, i.relname AS index_name, ix.indisunique AS is_unique,
       ix.indisprimary AS is_primary,
       EXISTS (SELECT 1 FROM pg_constraint k WHERE k.conindid = ix.indexrelid) AS backs_constraint,
       ARRAY(SELECT a.attname::text FROM unnest(ix.indkey::int2[]) WITH ORDINALITY AS k(attnum, ord)
             JOIN pg_attribute a ON a.attrelid = t.oid AND a.attnum = k.attnum ORDER BY k.ord) AS cols
     FROM pg_index ix
     JOIN pg_class i ON i.oid = ix.indexrelid
     JOIN pg_class t ON t.oid = ix.indrelid
     JOIN pg_namespace n ON n.oid = t.relnamespace
     WHERE n.nspname = current_schema()`,
  );
  for (const r of idx.rows) {
    const table = shape[r.table_name];
    if (!table) continue;
    if (r.is_primary) table.primaryKey = r.cols;
    else if (r.is_unique) table.unique.push(r.cols.join(','));
    if (!r.backs_constraint)
      table.indexes.push(`${r.index_name}(${r.cols.join(',')})${r.is_unique ? ' unique' : ''}`);
  }
  for (const t of Object.values(shape)) {
    t.unique.sort();
    t.indexes.sort();
  }
  return shape;
}
