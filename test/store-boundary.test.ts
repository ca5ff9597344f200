/**
 * The storage layer sits below the domain: nothing under src/store/ (the port, its shared rules
 * and both adapters) imports from the folders above it — only from src/store/ itself and
 * src/config/, and of packages what it likes (@cmcp/verify's formats, pg, better-sqlite3).
 * Read with the TypeScript compiler's import scanner (`ts.preProcessFile`: static imports,
 * re-exports, `import()`, type-only imports). The rule also runs on a small tree that breaks
 * it, so a checker that stopped seeing violations would fail here.
 */
import { readdirSync, readFileSync } from 'node:fs';
import { join, posix, relative } from 'node:path';
import ts from 'typescript';
import { describe, expect, it } from 'vitest';
import { REPO_ROOT } from './harness/gateway.js';

/** Where a module of the storage layer may import from in the repository. */
const BELOW_OR_WITHIN = ['src/store/', 'src/config/'];

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

function storeSources(): Map<string, string> {
  const dir = join(REPO_ROOT, 'src/store');
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
    const files = storeSources();
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
