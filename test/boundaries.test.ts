/**
 * Import boundaries, read from the sources with the TypeScript compiler's own import scanner
 * (`ts.preProcessFile`: static imports, re-exports, `import()`, `require`, type-only imports):
 *
 * - `verify-self-contained`: packages/verify imports nothing from the repository outside the
 *   package (src/, native/, testing/, test/, bench/, demo/), and of npm packages only those its
 *   package.json depends on, never a native or server module (koffi, better-sqlite3, fastify,
 *   pino, pg) — what an install of the package alone must resolve.
 * - `verify-foundations`: abi/, crypto/, format/, errors/ and transparency/ (the chain trees,
 *   checkpoints and receipts format/ exports) import only each other — nothing
 *   from the verifier or the CLI (crypto/ is the one place hashing and signature checks live;
 *   the formats hash and sign through it).
 * - `verify-cli-is-a-shell`: no module outside cli/ imports cli/ (the verifier is a library; the
 *   Node-only command line sits on top of it).
 * - `verify-platforms-apart`: a platform folder (tpm/, snp/, tdx/) imports no other platform
 *   folder; what they share lives outside them. azure/ is the one composite kind: it imports
 *   the three, and none of them imports it.
 * - `native-below-gateway`: native/ imports nothing from the repository outside native/, and of
 *   @cmcp/verify only its abi, formats and errors entry points.
 * - `src-layer-table`: every folder of src/ has a place in {@link SRC_LAYERS} (docs/architecture.md).
 * - `src-layers`: a module of src/ imports nothing from a higher layer; the one arrow up is an
 *   adapter importing the storage port it implements.
 * - `src-adapters-behind-port`: the call path and the domain import no storage adapter; they
 *   talk to the port, and only the port and the edge's composition pick an engine.
 * - `src-no-folder-circles` / `src-no-file-circles`: no import circle between the folders of
 *   src/ (store/ with its adapters counted as one), nor between its files.
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
const FOUNDATIONS = ['abi/', 'crypto/', 'format/', 'errors/', 'transparency/'];
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
        if (t.kind === 'package' && t.name === '@cmcp/verify' && !/^(abi|formats|errors)$/.test(t.sub))
          bad('native-below-gateway', 'only @cmcp/verify/abi|formats|errors');
      }
    }
  }
  return out;
}

const SRC = 'src/';

/**
 * The layers of src/, top to bottom; a folder may import its own layer and the ones below.
 * docs/architecture.md holds the same table.
 */
const SRC_LAYERS = [
  { layer: 'edge', folders: ['gateway', 'console', 'cli', 'metrics'] },
  { layer: 'call path', folders: ['call', 'relay'] },
  {
    layer: 'domain',
    folders: ['session', 'execution', 'policy', 'catalog', 'claim', 'tee', 'tls', 'measure', 'upstream'],
  },
  // audit/ exports the storage port's audit feed as lines and checks its chains, for both engines.
  { layer: 'storage port', folders: ['store', 'store/migrations', 'audit'] },
  { layer: 'adapters', folders: ['store/sqlite', 'store/postgres'] },
  { layer: 'foundation', folders: ['config', 'errors', 'tracing', 'offload'] },
] as const;
/** Indexes into SRC_LAYERS (0 is the edge). */
const [CALL_PATH, DOMAIN, PORT, ADAPTERS] = [1, 2, 3, 4];

/** The folder of a src/ module as SRC_LAYERS names it (the longest listed prefix), or null. */
function srcFolder(path: string): string | null {
  const rest = path.slice(SRC.length);
  const listed = SRC_LAYERS.flatMap((l) => l.folders as readonly string[]).filter((f) =>
    rest.startsWith(`${f}/`),
  );
  return listed.sort((a, b) => b.length - a.length)[0] ?? null;
}
const layerOf = (folder: string) =>
  SRC_LAYERS.findIndex((l) => (l.folders as readonly string[]).includes(folder));
/** The top-level folder of src/ (store/ with its adapters is one), for the folder circle rule. */
const topFolder = (path: string) => path.slice(SRC.length).split('/')[0] ?? '';

/** Strongly connected components of a graph with more than one node. */
function circles(graph: Map<string, Set<string>>): Set<string>[] {
  let next = 0;
  const index = new Map<string, number>();
  const low = new Map<string, number>();
  const stack: string[] = [];
  const out: Set<string>[] = [];
  const visit = (v: string) => {
    index.set(v, next);
    low.set(v, next++);
    stack.push(v);
    for (const w of graph.get(v) ?? []) {
      if (!index.has(w)) {
        visit(w);
        low.set(v, Math.min(low.get(v)!, low.get(w)!));
      } else if (stack.includes(w)) low.set(v, Math.min(low.get(v)!, index.get(w)!));
    }
    if (low.get(v) === index.get(v)) {
      const c = new Set<string>();
      for (let w = stack.pop(); w !== undefined; w = w === v ? undefined : stack.pop()) c.add(w);
      if (c.size > 1) out.push(c);
    }
  };
  for (const v of graph.keys()) if (!index.has(v)) visit(v);
  return out;
}

/** The violations of the src/ rules in `tree`, as "rule: importer → imported (why)". */
function srcViolations(tree: Tree): string[] {
  const out: string[] = [];
  const imports: [string, string][] = [];
  for (const [from, text] of tree.files) {
    if (!from.startsWith(SRC)) continue;
    const src = srcFolder(from);
    if (src === null) {
      out.push(`src-layer-table: ${from} → ${from} (its folder is in no layer)`);
      continue;
    }
    for (const { fileName: spec } of ts.preProcessFile(text, true, true).importedFiles) {
      const t = resolveImport(from, spec, tree.exists);
      if (t.kind !== 'file' || !t.path.startsWith(SRC)) continue;
      const dst = srcFolder(t.path);
      if (dst === null) continue;
      imports.push([from, t.path]);
      const [a, b] = [layerOf(src), layerOf(dst)];
      const bad = (rule: string, why: string) => out.push(`${rule}: ${from} → ${t.path} (${why})`);
      if (b < a && !(a === ADAPTERS && b === PORT))
        bad('src-layers', `${SRC_LAYERS[a]?.layer} imports ${SRC_LAYERS[b]?.layer}`);
      if ((a === CALL_PATH || a === DOMAIN) && b === ADAPTERS)
        bad('src-adapters-behind-port', `${src} imports ${dst}`);
    }
  }
  const graph = (key: (p: string) => string) => {
    const g = new Map<string, Set<string>>();
    for (const [f, t] of imports)
      if (key(f) !== key(t)) g.set(key(f), (g.get(key(f)) ?? new Set()).add(key(t)));
    return g;
  };
  for (const [rule, key] of [
    ['src-no-folder-circles', topFolder],
    ['src-no-file-circles', (p: string) => p],
  ] as const) {
    for (const c of circles(graph(key)))
      for (const [f, t] of imports)
        if (key(f) !== key(t) && c.has(key(f)) && c.has(key(t)))
          out.push(`${rule}: ${f} → ${t} (circle through ${[...c].sort().join(', ')})`);
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
      [
        `${VERIFY}claim.ts`,
        "import { x } from '../../../src/gateway/lifecycle/start.js';\nimport k from 'koffi';",
      ],
      [`${VERIFY}x509.ts`, "import { y } from 'left-pad';\nimport { run } from './cli/claim.js';"],
      [`${VERIFY}format/claim.ts`, "import { verifyClaim } from '../claim.js';"],
      [`${VERIFY}tdx/quote.ts`, "export { z } from '../tpm/quote.js';"],
      [`${VERIFY}tpm/quote.ts`, "const s = await import('pino');"],
      [
        `${NATIVE}tpm/x.ts`,
        "import { g } from '../../src/config/index.js';\nimport { v } from '@cmcp/verify/claim';",
      ],
      [`${NATIVE}tsm/y.ts`, "import { ok } from '@cmcp/verify/formats';\nimport { no } from './nope.js';"],
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

describe('import boundaries of src/', () => {
  const files = new Map(sources(SRC).map((p) => [p, readFileSync(join(REPO_ROOT, p), 'utf8')]));

  it('every folder of src/ has a layer, and the table names only real folders', () => {
    const folders = new Set([...files.keys()].map((p) => srcFolder(p)));
    expect([...files.keys()].filter((p) => srcFolder(p) === null)).toEqual([]);
    for (const f of SRC_LAYERS.flatMap((l) => l.folders as readonly string[])) {
      expect(folders, f).toContain(f);
    }
  });

  it('src/ keeps every rule: no arrow up, no adapter above the port, no circle', () => {
    expect(srcViolations({ files, exists: onDisk })).toEqual([]);
  });

  it('each src/ rule reports a synthetic tree that breaks it', () => {
    const synthetic = new Map<string, string>([
      [`${SRC}config/a.ts`, "import { x } from '../store/migrations/index.js';"],
      [`${SRC}store/migrations/index.ts`, "import { y } from '../../call/b.js';"],
      [`${SRC}store/postgres/c.ts`, "import { p } from '../port.js';"],
      [`${SRC}store/port.ts`, 'export const p = 1;'],
      [
        `${SRC}call/b.ts`,
        "import { c } from '../store/postgres/c.js';\nimport { d } from '../session/d.js';",
      ],
      [`${SRC}session/d.ts`, "import { e } from '../claim/e.js';"],
      [`${SRC}claim/e.ts`, "import { d } from '../session/d.js';"],
      [`${SRC}newroom/f.ts`, "import { e } from '../claim/e.js';"],
    ]);
    const exists = (p: string) => synthetic.has(p);
    const found = srcViolations({ files: synthetic, exists });
    const rules = (f: string) =>
      found.filter((v) => v.includes(` ${f} → `)).map((v) => v.slice(0, v.indexOf(':')));
    expect(rules(`${SRC}config/a.ts`)).toEqual(['src-layers']);
    expect(rules(`${SRC}store/migrations/index.ts`)).toEqual(['src-layers', 'src-no-folder-circles']);
    expect(rules(`${SRC}store/postgres/c.ts`)).toEqual([]);
    expect(rules(`${SRC}call/b.ts`)).toEqual(['src-adapters-behind-port', 'src-no-folder-circles']);
    expect(rules(`${SRC}session/d.ts`)).toEqual(['src-no-folder-circles', 'src-no-file-circles']);
    expect(rules(`${SRC}claim/e.ts`)).toEqual(['src-no-folder-circles', 'src-no-file-circles']);
    expect(rules(`${SRC}newroom/f.ts`)).toEqual(['src-layer-table']);
  });
});
