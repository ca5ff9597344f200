/**
 * The conformance `auth/*` client scenarios (`@modelcontextprotocol/conformance`), run in one
 * go with two clients under test: the plain MCP SDK client with its own OAuth (the control,
 * auth-sdk-client.ts) and cmcp (auth-cmcp-client.ts: a gateway whose upstream is the scenario's
 * protected server). cmcp must pass every scenario the SDK client passes, with the same passed
 * and failed check counts.
 *
 * `node dist/testing/conformance/auth-run.js [--json] [scenario…]`; exit status 0 when that holds.
 */
import { spawn, spawnSync } from 'node:child_process';
import { existsSync, mkdtempSync, readdirSync, readFileSync, rmSync, statSync } from 'node:fs';
import { createRequire } from 'node:module';
import { tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';

export interface Counts {
  passed: number;
  failed: number;
  /** The client program's exit status (0: it connected, listed and called). */
  exit: number | null;
}

export interface AuthReport {
  version: string;
  sdk: Record<string, Counts>;
  cmcp: Record<string, Counts>;
  /** Scenarios the SDK client passes and cmcp does not, with the same counts. */
  problems: string[];
}

const require = createRequire(import.meta.url);
const HERE = dirname(fileURLToPath(import.meta.url));
/** The compiled client programs (run from the sources, as under vitest: the build's). */
const PROGRAMS = HERE.split(/[\\/]/).includes('dist')
  ? HERE
  : join(HERE, '..', '..', 'dist', 'testing', 'conformance');

/**
 * Scenarios where cmcp's counts differ from the SDK client's while both pass every check, with
 * the reason; one that comes out the same is reported (the list is stale).
 */
export const EXPECTED_DIFFERENT: Record<string, string> = {
  'auth/scope-retry-limit':
    'cmcp does not ask a user again for a scope the upstream already refused (one authorization request, not a loop); the SDK client asks again, up to three times; both pass every check',
};

function runner(): { bin: string; version: string } {
  const pkgPath = require.resolve('@modelcontextprotocol/conformance/package.json');
  const pkg = JSON.parse(readFileSync(pkgPath, 'utf8')) as { version: string; bin: Record<string, string> };
  return { bin: join(dirname(pkgPath), pkg.bin.conformance as string), version: pkg.version };
}

/** Every `auth/*` client scenario the installed runner knows. */
export function authScenarios(): string[] {
  const out = spawnSync(process.execPath, [runner().bin, 'list', '--client'], { encoding: 'utf8' });
  return [...`${out.stdout}${out.stderr}`.matchAll(/^\s*-\s*(auth\/\S+)/gm)].map((m) => m[1] as string);
}

function findChecks(dir: string): string | undefined {
  if (!existsSync(dir)) return undefined;
  for (const e of readdirSync(dir)) {
    const p = join(dir, e);
    if (e === 'checks.json') return p;
    if (statSync(p).isDirectory()) {
      const f = findChecks(p);
      if (f) return f;
    }
  }
  return undefined;
}

/** Runs one scenario with one client program; its check counts. */
async function runOne(scenario: string, program: string, outDir: string): Promise<Counts> {
  const command = `${JSON.stringify(process.execPath)} ${JSON.stringify(join(PROGRAMS, program))}`;
  const exit = await new Promise<number | null>((resolve) => {
    const child = spawn(
      process.execPath,
      [
        runner().bin,
        'client',
        '--command',
        command,
        '--scenario',
        scenario,
        '-o',
        outDir,
        '--timeout',
        '60000',
      ],
      { stdio: 'ignore' },
    );
    const timer = setTimeout(() => child.kill('SIGKILL'), 120_000);
    child.on('exit', (code) => {
      clearTimeout(timer);
      resolve(code);
    });
  });
  const file = findChecks(outDir);
  const checks = file ? (JSON.parse(readFileSync(file, 'utf8')) as { status: string }[]) : [];
  return {
    passed: checks.filter((c) => c.status === 'SUCCESS').length,
    failed: checks.filter((c) => c.status === 'FAILURE').length,
    exit,
  };
}

/** Runs each scenario with the SDK client and with cmcp, one after the other, and compares. */
export async function runAuthConformance(only: string[] = []): Promise<AuthReport> {
  const names = only.length ? only : authScenarios();
  const dir = mkdtempSync(join(tmpdir(), 'cmcp-auth-conformance-'));
  const sdk: Record<string, Counts> = {};
  const cmcp: Record<string, Counts> = {};
  const problems: string[] = [];
  try {
    for (const [i, name] of names.entries()) {
      sdk[name] = await runOne(name, 'auth-sdk-client.js', join(dir, `sdk-${i}`));
      cmcp[name] = await runOne(name, 'auth-cmcp-client.js', join(dir, `cmcp-${i}`));
      const s = sdk[name] as Counts;
      const c = cmcp[name] as Counts;
      const sdkPasses = s.failed === 0 && s.passed > 0;
      const same = c.passed === s.passed && c.failed === s.failed;
      const expected = EXPECTED_DIFFERENT[name];
      if (expected !== undefined && same)
        problems.push(`${name}: same counts now; remove it from EXPECTED_DIFFERENT`);
      else if (expected !== undefined && (c.failed > 0 || c.passed === 0))
        problems.push(`${name}: cmcp fails ${c.failed} checks (expected to differ only in counts)`);
      else if (sdkPasses && !same && expected === undefined)
        problems.push(
          `${name}: SDK ${s.passed} passed/${s.failed} failed, cmcp ${c.passed} passed/${c.failed} failed`,
        );
    }
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
  return { version: runner().version, sdk, cmcp, problems };
}

if (process.argv[1] && fileURLToPath(import.meta.url) === process.argv[1]) {
  const args = process.argv.slice(2).filter((a) => !a.startsWith('--'));
  const r = await runAuthConformance(args);
  if (process.argv.includes('--json')) console.log(JSON.stringify(r, null, 2));
  else {
    console.log(
      `@modelcontextprotocol/conformance ${r.version}: auth/* client scenarios, SDK client vs cmcp`,
    );
    for (const [name, s] of Object.entries(r.sdk)) {
      const c = r.cmcp[name] as Counts;
      const same = c.passed === s.passed && c.failed === s.failed;
      console.log(
        `${same ? 'same' : 'DIFF'} ${name.padEnd(44)} sdk ${s.passed}/${s.passed + s.failed} (exit ${s.exit})  cmcp ${c.passed}/${c.passed + c.failed} (exit ${c.exit})`,
      );
    }
    for (const p of r.problems) console.log(`problem: ${p}`);
  }
  process.exit(r.problems.length === 0 ? 0 : 1);
}
