/**
 * The conformance client scenarios (`@modelcontextprotocol/conformance` `client`), run twice
 * with ./client-driver.ts as the client under test: the official SDK client straight to each
 * scenario's server (the control), then the same client through cmcp (a gateway whose upstream
 * is the scenario's server), so that what is measured is cmcp as a client of its upstreams.
 * Scenarios run one at a time (each starts its server, and the gateway run a gateway).
 */
import { spawn } from 'node:child_process';
import { existsSync, readdirSync, readFileSync, statSync } from 'node:fs';
import { dirname, join, relative } from 'node:path';
import { fileURLToPath } from 'node:url';

/** Passed and failed checks of one scenario (WARNING and INFO checks are not counted). */
export interface Counts {
  passed: number;
  failed: number;
}

/** The compiled driver: beside this module once built, else in dist/ (this module run from source). */
const HERE = dirname(fileURLToPath(import.meta.url));
const DRIVER = existsSync(join(HERE, 'client-driver.js'))
  ? join(HERE, 'client-driver.js')
  : join(HERE, '..', '..', 'dist', 'testing', 'conformance', 'client-driver.js');

/** Runs the runner with `args`; resolves with its output (exit 1 only means a check failed). */
function runner(bin: string, args: string[], timeoutMs: number): Promise<string> {
  return new Promise((resolve, reject) => {
    const child = spawn(process.execPath, [bin, ...args], { stdio: ['ignore', 'pipe', 'pipe'] });
    let log = '';
    child.stdout.on('data', (d) => {
      log += d;
    });
    child.stderr.on('data', (d) => {
      log += d;
    });
    const timer = setTimeout(() => child.kill('SIGKILL'), timeoutMs);
    child.on('exit', (code) => {
      clearTimeout(timer);
      if (code === 0 || code === 1) resolve(log);
      else reject(new Error(`conformance runner exited ${code}:\n${log.slice(-4000)}`));
    });
  });
}

/** The client scenarios the installed runner lists. */
export async function clientScenarios(bin: string): Promise<string[]> {
  const out = await runner(bin, ['list'], 60_000);
  const section = out.split(/Client scenarios[^\n]*\n/)[1] ?? '';
  return [...section.matchAll(/^\s+- (\S+)/gm)].map((m) => m[1] as string);
}

/** Every checks.json under `dir`, by the scenario its directory names. */
function countsUnder(dir: string, scenarios: string[]): Record<string, Counts> {
  const out: Record<string, Counts> = {};
  const walk = (d: string) => {
    for (const name of readdirSync(d)) {
      const p = join(d, name);
      if (statSync(p).isDirectory()) walk(p);
      else if (name === 'checks.json') {
        const rel = relative(dir, dirname(p)).replace(/-\d{4}-\d{2}-\d{2}T[\d-]+Z$/, '');
        const scenario = scenarios.find((s) => s === rel);
        if (!scenario) continue;
        const checks = JSON.parse(readFileSync(p, 'utf8')) as { status: string }[];
        out[scenario] = {
          passed: checks.filter((c) => c.status === 'SUCCESS').length,
          failed: checks.filter((c) => c.status === 'FAILURE').length,
        };
      }
    }
  };
  if (existsSync(dir)) walk(dir);
  return out;
}

/**
 * Runs every client scenario with the driver (`direct`: the SDK client alone; else through a
 * gateway) and returns each one's counts.
 */
export async function runClientSuite(
  bin: string,
  scenarios: string[],
  outDir: string,
  direct: boolean,
): Promise<Record<string, Counts>> {
  const command = `"${process.execPath}" "${DRIVER}"${direct ? ' --direct' : ''}`;
  for (const scenario of scenarios)
    await runner(bin, ['client', '--command', command, '--scenario', scenario, '-o', outDir], 180_000);
  return countsUnder(outDir, scenarios);
}
