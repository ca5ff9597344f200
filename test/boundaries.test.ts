/**
 * Import boundaries, read from the sources with the TypeScript compiler's own import scanner
 * (`ts.preProcessFile`: static imports, re-exports, `import()`, `require`, type-only imports):
 *
 * - `verify-self-contained`: packages/verify imports nothing from the repository outside the
 *   package (src/, native/, testing/, test/, bench/, demo/), and of npm packages only those its
 *   package.json depends on, never a native or server module (koffi, better-sqlite3, fastify,
 *   pino, pg) — what an install of the package alone must resolve.
 * - `verify-foundations`: abi/, crypto/, format/ and errors/ import only each other — nothing
 *   from the verifier or the CLI (crypto/ is the one place hashing and signature checks live;
 *   the formats hash and sign through it).
 * - `verify-cli-is-a-shell`: no module outside cli/ imports cli/ (the verifier is a library; the
 *   Node-only command line sits on top of it).
 * - `verify-platforms-apart`: a platform folder (tpm/, snp/, tdx/) imports no other platform
 *   folder; what they share lives outside them. azure/ is the one composite kind: it imports
 *   the three, and none of them imports it.
 * - `native-below-gateway`: native/ imports nothing from the repository outside native/, and of
 *   @cmcp/verify only its abi, format and errors subpaths.
 *
 * Every rule is also run on a small synthetic tree that breaks it, so a checker that stopped
 * seeing violations would fail here.
 */
import { existsSync, readdirSync, readFileSync } from 'node:fs';
import { isBuiltin } from 'node:module';
import { join, posix, relative } from 'node:path';
import ts from 'typescript';
import { describe, expect, it } from 'vitest';
import { REPO_ROOT } from './harness/gateway.js';

const VERIFY = 'packages/verify/src/';
const NATIVE = 'native/';
/** Native or server modules that must never reach the relying party's package. */
const FORBIDDEN_PACKAGES = ['koffi', 'better-sqlite3', 'fastify', 'pino', 'pg'];
const FOUNDATIONS = ['abi/', 'crypto/', 'format/', 'errors/'];
const PLATFORMS = ['tpm/', 'snp/', 'tdx/'];

/** Where one import specifier leads. */
type Target =
  | { kind: 'file'; path: string }
  | { kind: 'builtin' }
  | { kind: 'package'; name: string; sub: string }
  | { kind: 'unresolved' };

/** One source tree to check: repository-relative POSIX path → text, and a file-exists test. */
interface Tree {
  files: Map<string, string>;
  exists: (path: string) => boolean;
}

function resolveImport(from: string, spec: string, exists: (p: string) => boolean): Target {
  if (spec.startsWith('.')) {
    const base = posix.normalize(posix.join(posix.dirname(from), spec));
    const stem = base.replace(/\.(m?js|ts)$/, '');
    const found = [`${stem}.ts`, `${stem}.tsx`, `${stem}/index.ts`, base].find(exists);
    return found ? { kind: 'file', path: found } : { kind: 'unresolved' };
  }
  if (spec.startsWith('node:') || isBuiltin(spec)) return { kind: 'builtin' };
  const parts = spec.split('/');
  const n = spec.startsWith('@') ? 2 : 1;
  return { kind: 'package', name: parts.slice(0, n).join('/'), sub: parts.slice(n).join('/') };
}

const isForbidden = (name: string) => FORBIDDEN_PACKAGES.includes(name) || name.startsWith('@fastify/');
/** The folder of a package module below packages/verify/src/ ('' for top-level modules). */
const folderIn = (path: string) => {
  const rest = path.slice(VERIFY.length);
  return rest.includes('/') ? `${rest.slice(0, rest.indexOf('/'))}/` : '';
};

/** The violations of every rule in `tree`, as "rule: importer → specifier (why)". */
function violations(tree: Tree, verifyDependencies: string[]): string[] {
  const out: string[] = [];
  for (const [from, text] of tree.files) {
    for (const { fileName: spec } of ts.preProcessFile(text, true, true).importedFiles) {
      const t = resolveImport(from, spec, tree.exists);
      const bad = (rule: string, why: string) => out.push(`${rule}: ${from} → ${spec} (${why})`);
      if (t.kind === 'unresolved') bad('resolvable', 'no such file');
      if (from.startsWith(VERIFY)) {
        if (t.kind === 'file' && !t.path.startsWith(VERIFY))
          bad('verify-self-contained', 'outside the package');
        if (t.kind === 'package' && isForbidden(t.name)) bad('verify-self-contained', 'native/server module');
        else if (t.kind === 'package' && !verifyDependencies.includes(t.name))
          bad('verify-self-contained', 'not a dependency of @cmcp/verify');
        if (t.kind !== 'file' || !t.path.startsWith(VERIFY)) continue;
        const [src, dst] = [folderIn(from), folderIn(t.path)];
        if (FOUNDATIONS.includes(src) && !FOUNDATIONS.includes(dst))
          bad('verify-foundations', `${src} imports ${dst || 'a top-level verifier module'}`);
        if (src !== 'cli/' && dst === 'cli/') bad('verify-cli-is-a-shell', 'the library imports the CLI');
        if (PLATFORMS.includes(src) && (PLATFORMS.includes(dst) || dst === 'azure/') && src !== dst)
          bad('verify-platforms-apart', `${src} imports ${dst}`);
      } else if (from.startsWith(NATIVE)) {
        if (t.kind === 'file' && !t.path.startsWith(NATIVE)) bad('native-below-gateway', 'outside native/');
        if (t.kind === 'package' && t.name === '@cmcp/verify' && !/^(abi|format|errors)(\/|$)/.test(t.sub))
          bad('native-below-gateway', 'only @cmcp/verify/abi|format|errors');
      }
    }
  }
  return out;
}

/** Every .ts source (not .d.ts) under `dir`, repository-relative POSIX paths. */
function sources(dir: string): string[] {
  return readdirSync(join(REPO_ROOT, dir), { recursive: true, withFileTypes: true })
    .filter((e) => e.isFile() && e.name.endsWith('.ts') && !e.name.endsWith('.d.ts'))
    .map((e) => relative(REPO_ROOT, join(e.parentPath, e.name)).split('\\').join('/'));
}

const onDisk = (p: string) => existsSync(join(REPO_ROOT, p));
const verifyDependencies = Object.keys(
  (
    JSON.parse(readFileSync(join(REPO_ROOT, 'packages/verify/package.json'), 'utf8')) as {
      dependencies: Record<string, string>;
    }
  ).dependencies,
);

describe('import boundaries', () => {
  const files = new Map(
    [...sources(VERIFY), ...sources(NATIVE)].map((p) => [p, readFileSync(join(REPO_ROOT, p), 'utf8')]),
  );

  it('the scanned trees are the real ones (the package verifier, its formats and CLI; native/)', () => {
    const paths = [...files.keys()];
    expect(paths.filter((p) => p.startsWith(`${VERIFY}format/`)).length).toBeGreaterThan(2);
    expect(paths).toContain(`${VERIFY}cli/claim.ts`);
    expect(paths.filter((p) => p.startsWith(NATIVE)).length).toBeGreaterThan(5);
  });

  it('packages/verify and native/ keep every rule', () => {
    expect(violations({ files, exists: onDisk }, verifyDependencies)).toEqual([]);
  });

  it('each rule reports a synthetic tree that breaks it', () => {
    const synthetic = new Map<string, string>([
      [`${VERIFY}claim.ts`, "import { x } from '../../../src/gateway/runtime.js';\nimport k from 'koffi';"],
      [`${VERIFY}x509.ts`, "import { y } from 'left-pad';\nimport { run } from './cli/claim.js';"],
      [`${VERIFY}format/claim.ts`, "import { verifyClaim } from '../claim.js';"],
      [`${VERIFY}tdx/quote.ts`, "export { z } from '../tpm/quote.js';"],
      [`${VERIFY}tpm/quote.ts`, "const s = await import('pino');"],
      [
        `${NATIVE}tpm/x.ts`,
        "import { g } from '../../src/config/index.js';\nimport { v } from '@cmcp/verify/claim';",
      ],
      [
        `${NATIVE}tsm/y.ts`,
        "import { ok } from '@cmcp/verify/format/canonical';\nimport { no } from './nope.js';",
      ],
    ]);
    const exists = (p: string) => synthetic.has(p) || onDisk(p);
    const found = violations({ files: synthetic, exists }, verifyDependencies);
    const rules = (f: string) =>
      found.filter((v) => v.includes(` ${f} → `)).map((v) => v.slice(0, v.indexOf(':')));
    expect(rules(`${VERIFY}claim.ts`)).toEqual(['verify-self-contained', 'verify-self-contained']);
    expect(rules(`${VERIFY}x509.ts`)).toEqual(['verify-self-contained', 'verify-cli-is-a-shell']);
    expect(rules(`${VERIFY}format/claim.ts`)).toEqual(['verify-foundations']);
    expect(rules(`${VERIFY}tdx/quote.ts`)).toEqual(['verify-platforms-apart']);
    expect(rules(`${VERIFY}tpm/quote.ts`)).toEqual(['verify-self-contained']);
    expect(rules(`${NATIVE}tpm/x.ts`)).toEqual(['native-below-gateway', 'native-below-gateway']);
    expect(rules(`${NATIVE}tsm/y.ts`)).toEqual(['resolvable']);
  });
});
