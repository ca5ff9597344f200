/**
 * The storage layer sits below the domain: nothing under src/store/ (the port, its shared rules
 * and both adapters) imports from the folders above it — only from src/store/ itself and
 * src/config/, src/offload/ (handing work to a thread), src/errors/, and of packages what it likes (@cmcp/verify's formats, pg, better-sqlite3).
 * Read with the TypeScript compiler's import scanner (`ts.preProcessFile`: static imports,
 * re-exports, `import()`, type-only imports). The rule also runs on a small tree that breaks
 * it, so a checker that stopped seeing violations would fail here. Sessions and claims (src/session/,
 * src/claim/) know storage only through the port: of src/store/ they import port.ts and the
 * shared pure modules, never an adapter or the SQLite connection. The two adapters import
 * neither each other nor, outside the SQLite adapter and its migrations, the SQLite driver.
 */
import { readdirSync, readFileSync } from 'node:fs';
import { join, posix, relative } from 'node:path';
import ts from 'typescript';
import { describe, expect, it } from 'vitest';
import { REPO_ROOT } from './harness/gateway.js';

/** Where a module of the storage layer may import from in the repository. */
const BELOW_OR_WITHIN = ['src/store/', 'src/config/', 'src/offload/', 'src/errors/'];

/** "importer → specifier" of every relative import that leaves the storage layer. */
function upward(files: Map<string, string>): string[] {
  const out: string[] = [];
  for (const [from, text] of files)
    for (const { fileName: spec } of ts.preProcessFile(text, true, true).importedFiles) {
      if (!spec.startsWith('.')) continue;
      const to = posix.normalize(posix.join(posix.dirname(from), spec));
      if (!BELOW_OR_WITHIN.some((d) => to.startsWith(d))) out.push(`${from} → ${spec}`);
    }
  return out;
}

function sources(folder: string): Map<string, string> {
  const dir = join(REPO_ROOT, folder);
  return new Map(
    readdirSync(dir, { recursive: true, withFileTypes: true })
      .filter((e) => e.isFile() && e.name.endsWith('.ts'))
      .map((e) => {
        const p = relative(REPO_ROOT, join(e.parentPath, e.name)).split('\\').join('/');
        return [p, readFileSync(join(REPO_ROOT, p), 'utf8')] as const;
      }),
  );
}

describe('the storage layer imports nothing from above it', () => {
  it('src/store/: the port and both adapters are read, and none imports upward', () => {
    const files = sources('src/store');
    const paths = [...files.keys()];
    expect(paths).toContain('src/store/port.ts');
    expect(paths.filter((p) => p.startsWith('src/store/sqlite/')).length).toBeGreaterThan(3);
    expect(paths.filter((p) => p.startsWith('src/store/postgres/')).length).toBeGreaterThan(3);
    expect(upward(files)).toEqual([]);
  });

  it('a tree that breaks the rule is reported, import by import', () => {
    const broken = new Map([
      ['src/store/port.ts', "import type { Refusal } from '../call/types.js';\nimport { a } from './db.js';"],
      [
        'src/store/postgres/x.ts',
        "export { c } from '../../claim/build.js';\nimport { f } from '../../config/store.js';",
      ],
      ['src/store/sqlite/y.ts', "const s = await import('../../session/service.js');"],
    ]);
    expect(upward(broken)).toEqual([
      'src/store/port.ts → ../call/types.js',
      'src/store/postgres/x.ts → ../../claim/build.js',
      'src/store/sqlite/y.ts → ../../session/service.js',
    ]);
  });
});

/** What of src/store/ the sessions and claims may import: the port and shared pure modules. */
const PORT_SIDE = ['src/store/port.ts', 'src/store/entries/'];

/** "importer → specifier" of every relative import into src/store/ past the port. */
function pastThePort(files: Map<string, string>): string[] {
  const out: string[] = [];
  for (const [from, text] of files)
    for (const { fileName: spec } of ts.preProcessFile(text, true, true).importedFiles) {
      if (!spec.startsWith('.')) continue;
      const to = posix.normalize(posix.join(posix.dirname(from), spec)).replace(/\.js$/, '.ts');
      if (to.startsWith('src/store/') && !PORT_SIDE.some((d) => to.startsWith(d)))
        out.push(`${from} → ${spec}`);
    }
  return out;
}

describe('sessions and claims reach storage only through the port', () => {
  it('src/session/ and src/claim/ import no adapter and no connection', () => {
    const files = new Map([...sources('src/session'), ...sources('src/claim')]);
    expect([...files.keys()]).toContain('src/session/service.ts');
    expect([...files.keys()]).toContain('src/claim/issuer.ts');
    expect(pastThePort(files)).toEqual([]);
  });

  it('a tree that breaks the rule is reported, import by import', () => {
    const broken = new Map([
      [
        'src/session/service.ts',
        "import type { Db } from '../store/sqlite/db.js';\nimport type { SessionStore } from '../store/port.js';",
      ],
      ['src/claim/x.ts', "import { claimTip } from '../store/sqlite/claim-text.js';"],
      [
        'src/session/y.ts',
        "export { a } from '../store/postgres/reads.js';\nimport { buildNextEntry } from '../store/entries/next-entry.js';",
      ],
    ]);
    expect(pastThePort(broken)).toEqual([
      'src/session/service.ts → ../store/sqlite/db.js',
      'src/claim/x.ts → ../store/sqlite/claim-text.js',
      'src/session/y.ts → ../store/postgres/reads.js',
    ]);
  });
});

/** Where an adapter's module leads when it imports the other adapter, or the SQLite driver from outside its adapter. */
function acrossAdapters(files: Map<string, string>): string[] {
  const out: string[] = [];
  for (const [from, text] of files)
    for (const { fileName: spec } of ts.preProcessFile(text, true, true).importedFiles) {
      const to = spec.startsWith('.') ? posix.normalize(posix.join(posix.dirname(from), spec)) : spec;
      const inSqlite = from.startsWith('src/store/sqlite/') || from === 'src/store/migrations/sqlite.ts';
      const other = from.startsWith('src/store/postgres/')
        ? 'src/store/sqlite/'
        : from.startsWith('src/store/sqlite/')
          ? 'src/store/postgres/'
          : null;
      if ((other !== null && to.startsWith(other)) || (to === 'better-sqlite3' && !inSqlite))
        out.push(`${from} → ${spec}`);
    }
  return out;
}

describe('the two adapters stay apart', () => {
  it('neither adapter imports the other, and only the SQLite adapter and its migrations import better-sqlite3', () => {
    const files = sources('src/store');
    expect([...files.keys()]).toContain('src/store/sqlite/db.ts');
    expect(acrossAdapters(files)).toEqual([]);
  });

  it('a tree that breaks the rule is reported, import by import', () => {
    const broken = new Map([
      ['src/store/postgres/x.ts', "import { InstanceBusyError } from '../sqlite/instance-lock.js';"],
      [
        'src/store/sqlite/y.ts',
        "import type { Fence } from '../postgres/leases.js';\nimport Database from 'better-sqlite3';",
      ],
      ['src/store/writes.ts', "import type Database from 'better-sqlite3';"],
    ]);
    expect(acrossAdapters(broken)).toEqual([
      'src/store/postgres/x.ts → ../sqlite/instance-lock.js',
      'src/store/sqlite/y.ts → ../postgres/leases.js',
      'src/store/writes.ts → better-sqlite3',
    ]);
  });
});
