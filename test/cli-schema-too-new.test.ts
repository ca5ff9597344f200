/**
 * The read-only commands refuse a database newer than this cmcp as `cmcp start` does
 * (DATABASE_SCHEMA_TOO_NEW, exit 1): `cmcp executions` (its tables may not mean what this code
 * reads) and `cmcp db status` (which still prints the version it found). Real SQLite files,
 * the built CLI (`npm run build`).
 */
import { spawnSync } from 'node:child_process';
import { mkdtempSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { LATEST_SCHEMA_VERSION } from '../src/store/migrations/index.js';
import { openDatabase } from '../src/store/sqlite/db.js';
import { cleanup, REPO_ROOT } from './harness/gateway.js';

const dir = mkdtempSync(join(tmpdir(), 'cmcp-too-new-'));
afterAll(() => cleanup(dir));

function cmcp(...args: string[]) {
  const r = spawnSync(process.execPath, [join(REPO_ROOT, 'dist', 'src', 'cli', 'main.js'), ...args], {
    encoding: 'utf8',
  });
  return { code: r.status, out: r.stdout, err: r.stderr };
}

/** A migrated database, stamped with `version` when given (as a newer cmcp would leave it). */
function database(name: string, version?: number): string {
  const path = join(dir, name);
  const db = openDatabase(path);
  if (version !== undefined)
    db.prepare("INSERT INTO schema_version VALUES (?, 'from a newer cmcp', '2030-01-01T00:00:00Z')").run(
      version,
    );
  db.close();
  return path;
}

const TOO_NEW = new RegExp(
  `schema version 99, newer than this cmcp knows \\(${LATEST_SCHEMA_VERSION}\\).*\\(DATABASE_SCHEMA_TOO_NEW\\)\\n$`,
);

describe('a database newer than this cmcp', () => {
  it('cmcp executions list and show refuse it with DATABASE_SCHEMA_TOO_NEW, exit 1', () => {
    const path = database('newer.db', 99);
    for (const args of [
      ['list', '--db', path],
      ['show', 'x', '--db', path, '--agent', 'alice'],
    ]) {
      const r = cmcp('executions', ...args);
      expect(r.code, args.join(' ')).toBe(1);
      expect(r.err).toMatch(TOO_NEW);
      expect(r.out).toBe('');
    }
    // The same command on a current database reads it.
    const current = cmcp('executions', 'list', '--db', database('current.db'), '--json');
    expect(current.code).toBe(0);
    expect(JSON.parse(current.out)).toEqual([]);
  });

  it('cmcp db status prints the version it found, then fails with DATABASE_SCHEMA_TOO_NEW, exit 1', () => {
    const path = database('newer-status.db', 99);
    const r = cmcp('db', 'status', '--database', path);
    expect(r.code).toBe(1);
    expect(r.out).toContain(
      `schema version 99 (newer than this cmcp, which knows up to ${LATEST_SCHEMA_VERSION})`,
    );
    expect(r.err).toMatch(TOO_NEW);
    const j = cmcp('db', 'status', '--database', path, '--json');
    expect(j.code).toBe(1);
    expect(JSON.parse(j.out)).toMatchObject({ engine: 'sqlite', version: 99, latest: LATEST_SCHEMA_VERSION });
    expect(cmcp('db', 'status', '--database', database('current-status.db')).code).toBe(0);
  });
});
