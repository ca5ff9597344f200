/**
 * A newcomer's first command, timed: the repository is cloned (`git clone`, the commit under
 * test: committed state only) into an empty folder, and the README's first command (the first
 * line of its quick-start block, `npm run demo`) runs there as a reader runs it. Nothing of this
 * checkout is reused but npm's cache (`--prefer-offline`): the machine's PATH without `.runtime/`,
 * so where the machine's Node is older than 22 the clone installs its own Node 24 as the README
 * says; `npm ci` (native modules built from source when no prebuilt binary is fetched), the
 * clean build and the demo. It fails unless the command exits 0 with the demo's verdict, and
 * reports its time (stdout, and `.tmp/newcomer.json`).
 *
 * Bounded: the command gets 25 minutes, as the release-package install test does for the same
 * native builds on a loaded 2-core machine.
 */
import { execFileSync, spawn } from 'node:child_process';
import { mkdirSync, mkdtempSync, readdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { REPO_ROOT } from './harness/gateway.js';
import { cleanNpmEnv, machinePath } from './harness/package.js';

const TIMEOUT_MS = 25 * 60_000;

/** The first command of the README's quick start: the first line of its first fenced block. */
function readmeFirstCommand(readme: string): string {
  const quick = readme.indexOf('## Quick start');
  const m = /^```sh\n([^\n]+)\n/m.exec(readme.slice(quick));
  if (quick < 0 || !m?.[1]) throw new Error('README.md has no quick-start sh block');
  return m[1].trim();
}

const root = mkdtempSync(join(tmpdir(), 'cmcp-newcomer-'));
afterAll(() => rmSync(root, { recursive: true, force: true }));

describe("the README's first command in a fresh clone", () => {
  it('runs to the demo verdict, and its time is reported', { timeout: TIMEOUT_MS + 120_000 }, async () => {
    const command = readmeFirstCommand(readFileSync(join(REPO_ROOT, 'README.md'), 'utf8'));
    expect(command).toBe('npm run demo');
    const folder = join(root, 'empty');
    mkdirSync(folder);
    expect(readdirSync(folder)).toEqual([]);
    const head = execFileSync('git', ['rev-parse', 'HEAD'], { cwd: REPO_ROOT, encoding: 'utf8' }).trim();
    const clone = join(folder, 'cmcp');
    execFileSync('git', ['clone', '--quiet', '--no-checkout', REPO_ROOT, clone]);
    execFileSync('git', ['-c', 'advice.detachedHead=false', 'checkout', '--quiet', head], { cwd: clone });

    const env: NodeJS.ProcessEnv = {
      ...cleanNpmEnv(),
      PATH: machinePath(),
      npm_config_prefer_offline: 'true',
      npm_config_update_notifier: 'false',
    };
    delete env.CMCP_CHECKOUT_LOCK_PID; // the clone is its own checkout
    const started = Date.now();
    const proc = spawn('bash', ['-c', command], {
      cwd: clone,
      env,
      detached: true,
      stdio: ['ignore', 'pipe', 'pipe'],
    });
    let out = '';
    proc.stdout?.on('data', (d: Buffer) => {
      out += d.toString();
    });
    proc.stderr?.on('data', (d: Buffer) => {
      out += d.toString();
    });
    const timer = setTimeout(() => {
      try {
        if (proc.pid) process.kill(-proc.pid, 'SIGTERM');
      } catch {
        // already gone
      }
    }, TIMEOUT_MS);
    const code = await new Promise<number | null>((r) => proc.once('exit', (c) => r(c)));
    clearTimeout(timer);
    const seconds = Math.round((Date.now() - started) / 100) / 10;

    const report = `newcomer: \`${command}\` in a fresh clone of ${head.slice(0, 12)}: exit ${code} after ${seconds} s\n`;
    process.stdout.write(report);
    mkdirSync(join(REPO_ROOT, '.tmp'), { recursive: true });
    writeFileSync(
      join(REPO_ROOT, '.tmp', 'newcomer.json'),
      `${JSON.stringify({ command, commit: head, exit: code, seconds, at: new Date().toISOString() })}\n`,
    );
    expect(code, `${report}${out.slice(-4000)}`).toBe(0);
    expect(out).toMatch(/PASS: verdict hardware-(unanchored|attested) for session/);
  });
});
