/**
 * One error family (docs/spec/errors.md): docs/errors.md is exactly what the registry renders, and
 * every error class in src/ derives from CmcpError (so its code is registered) and names itself.
 * The class check reads the TypeScript program, so a new bare `extends Error` fails it.
 */
import { readdirSync, readFileSync } from 'node:fs';
import { join, relative, sep } from 'node:path';
import { registerErrors, registeredErrors } from '@cmcp/verify/errors';
import ts from 'typescript';
import { describe, expect, it } from 'vitest';
import { reasonsMarkdown } from '../packages/verify/src/reasons-markdown.js';
import { CmcpError, ERRORS } from '../src/errors/index.js';
import { errorsMarkdown } from '../src/errors/markdown.js';

const ROOT = join(import.meta.dirname, '..');

describe('the error registry', () => {
  it('docs/reasons.md is current (run `npm run docs:errors` after changing REASON_CODES)', () => {
    expect(readFileSync(join(ROOT, 'docs', 'reasons.md'), 'utf8')).toBe(reasonsMarkdown());
  });

  it('docs/errors.md is current (run `npm run docs:errors` after changing the registry)', () => {
    expect(readFileSync(join(ROOT, 'docs', 'errors.md'), 'utf8')).toBe(errorsMarkdown());
  });

  it('every code is upper-snake with an HTTP status, a JSON-RPC code and a summary', () => {
    for (const [code, spec] of Object.entries(ERRORS)) {
      expect(code).toMatch(/^[A-Z][A-Z0-9_]*$/);
      expect(Number.isInteger(spec.http) && spec.http >= 400 && spec.http < 600, code).toBe(true);
      expect(Number.isInteger(spec.rpc) && spec.rpc < 0, code).toBe(true);
      expect(spec.summary.length, code).toBeGreaterThan(10);
    }
  });

  it('each package registers its own codes once, and no code has two owners', () => {
    const owners = new Map(registeredErrors().map((e) => [e.code, e.owner]));
    expect([...owners.keys()].sort()).toEqual(Object.keys(ERRORS).sort());
    expect(owners.get('UNKNOWN_SESSION')).toBe('gateway');
    expect(owners.get('TPM_RC')).toBe('native');
    expect(owners.get('CANONICAL_JSON_INVALID')).toBe('@cmcp/verify');
    expect(() => registerErrors('elsewhere', { UNKNOWN_SESSION: ERRORS.UNKNOWN_SESSION })).toThrow(
      /UNKNOWN_SESSION is registered twice \(gateway, elsewhere\)/,
    );
  });

  it('a CmcpError carries its registered statuses', () => {
    const e = new CmcpError('UNKNOWN_SESSION', 'unknown session');
    expect([e.name, e.http, e.rpc]).toEqual(['CmcpError', 404, -32010]);
  });
});

/** Every `.ts` file under `dir`, recursively. */
function tsFilesUnder(dir: string): string[] {
  return readdirSync(dir, { withFileTypes: true }).flatMap((e) =>
    e.isDirectory() ? tsFilesUnder(join(dir, e.name)) : e.name.endsWith('.ts') ? [join(dir, e.name)] : [],
  );
}

/**
 * Every class declared in src/, native/ or packages/verify/src whose base-class chain reaches
 * the global Error.
 */
function errorClasses(): { name: string; file: string; chain: string[]; setsName: boolean }[] {
  const configPath = join(ROOT, 'tsconfig.json');
  const parsed = ts.getParsedCommandLineOfConfigFile(
    configPath,
    {},
    {
      ...ts.sys,
      onUnRecoverableConfigFileDiagnostic: (d) => {
        throw new Error(ts.flattenDiagnosticMessageText(d.messageText, '\n'));
      },
    },
  );
  if (!parsed) throw new Error('tsconfig.json could not be read');
  const top = (f: string) => relative(ROOT, f).split(sep)[0];
  const srcFiles = [
    ...parsed.fileNames.filter((f) => top(f) === 'src' || top(f) === 'native'),
    ...tsFilesUnder(join(ROOT, 'packages', 'verify', 'src')),
  ];
  const program = ts.createProgram(srcFiles, { ...parsed.options, noEmit: true });
  const checker = program.getTypeChecker();
  const found: { name: string; file: string; chain: string[]; setsName: boolean }[] = [];
  for (const sf of program.getSourceFiles()) {
    if (!srcFiles.includes(sf.fileName)) continue;
    const visit = (node: ts.Node) => {
      if (ts.isClassDeclaration(node) && node.name) {
        const chain: string[] = [];
        let type = checker.getTypeAtLocation(node) as ts.InterfaceType;
        for (;;) {
          const base = checker.getBaseTypes(type)[0] as ts.InterfaceType | undefined;
          if (!base) break;
          chain.push(base.symbol.getName());
          type = base;
        }
        if (chain.includes('Error')) {
          const text = node.getText(sf);
          const setsName = text.includes(`this.name = '${node.name.text}'`);
          found.push({ name: node.name.text, file: relative(ROOT, sf.fileName), chain, setsName });
        }
      }
      ts.forEachChild(node, visit);
    };
    visit(sf);
  }
  return found;
}

describe('error classes in src/, native/ and packages/verify', () => {
  const classes = errorClasses();

  it('are found (the scan sees the program)', () => {
    const names = classes.map((c) => c.name);
    for (const n of [
      'CatalogError',
      'ConfigError',
      'BindingError',
      'VerifyInputError',
      'AbiError',
      'TpmError',
    ])
      expect(names).toContain(n);
  });

  it('all derive from CmcpError and set their own name', () => {
    const bad = classes
      .filter((c) => c.name !== 'CmcpError')
      .filter((c) => !c.chain.includes('CmcpError') || !c.setsName)
      .map(
        (c) =>
          `${c.file}: ${c.name} extends ${c.chain.join(' → ')}${c.setsName ? '' : ' (does not set name)'}`,
      );
    expect(bad).toEqual([]);
  });
});
