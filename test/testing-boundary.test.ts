/**
 * The gateway never ships test code: no module under src/ or native/ imports from testing/
 * (swtpm provisioning, evidence builders), statically or dynamically.
 */
import { readdirSync, readFileSync } from 'node:fs';
import { dirname, join, relative, resolve } from 'node:path';
import { describe, expect, it } from 'vitest';
import { REPO_ROOT } from './harness/gateway.js';

function tsFiles(dir: string): string[] {
  return readdirSync(dir, { withFileTypes: true }).flatMap((e) => {
    const p = join(dir, e.name);
    if (e.isDirectory()) return tsFiles(p);
    return /\.(ts|mts|js|mjs)$/.test(e.name) ? [p] : [];
  });
}

/** Every relative module specifier in `source` (import/export … from, import(), require()). */
function specifiers(source: string): string[] {
  const re = /(?:from\s*|import\s*\(\s*|require\s*\(\s*|import\s+)['"](\.{1,2}\/[^'"]+)['"]/g;
  return [...source.matchAll(re)].map((m) => m[1] as string);
}

describe('testing/ stays out of the gateway', () => {
  it('the specifier scan sees a relative import (so the check below can fail)', () => {
    expect(specifiers("import { x } from '../../testing/swtpm.js';\nawait import('./a.js');")).toEqual([
      '../../testing/swtpm.js',
      './a.js',
    ]);
  });

  it('no file under src/ or native/ imports a module under testing/', () => {
    const testingDir = resolve(REPO_ROOT, 'testing');
    const offenders: string[] = [];
    for (const top of ['src', 'native', 'packages']) {
      for (const file of tsFiles(join(REPO_ROOT, top))) {
        for (const spec of specifiers(readFileSync(file, 'utf8'))) {
          const target = resolve(dirname(file), spec);
          if (!relative(testingDir, target).startsWith('..')) {
            offenders.push(`${relative(REPO_ROOT, file)} → ${spec}`);
          }
        }
      }
    }
    expect(offenders).toEqual([]);
  });
});
