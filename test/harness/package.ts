/**
 * The release tarball as a user gets it (docs/operations.md): `npm pack` of this checkout's build,
 * then `npm install -g --prefix <tmp>` of that tarball, with nothing from the checkout on the
 * installed gateway's path. Native modules (better-sqlite3, koffi) build from source when no
 * prebuilt binary can be fetched, which takes minutes on 2 cores; so an install is kept under
 * `.tmp/package-install/<tarball sha256>/` and reused only for a byte-identical tarball
 * (`npm pack` output is reproducible). `CMCP_PACKAGE_FRESH=1` always installs afresh. The
 * install uses this machine's npm cache (`--prefer-offline`) and npm config (registry CA,
 * `nodedir` for node-gyp); packages missing from the cache come from the registry.
 */
import { type ChildProcess, execFile, spawn } from 'node:child_process';
import { createHash } from 'node:crypto';
import { existsSync, mkdirSync, readdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { promisify } from 'node:util';
import { REPO_ROOT } from './gateway.js';

const run = promisify(execFile);

/** A packed and installed release. */
export interface InstalledPackage {
  /** The tarball `npm pack` wrote. */
  tarball: string;
  /** `sha256:<hex>` of the tarball. */
  tarballSha256: string;
  /** Paths inside the tarball (without the leading `package/`). */
  files: string[];
  /** The `--prefix` of the global install. */
  prefix: string;
  /** `<prefix>/bin/cmcp`. */
  bin: string;
  /** The installed package root: `<prefix>/lib/node_modules/cmcp`. */
  root: string;
  /** True when this run installed it; false when an install of the identical tarball was reused. */
  fresh: boolean;
  /** Seconds the install took (0 when reused). */
  installSeconds: number;
}

/** Runs `npm pack` (requires `npm run build`) and installs the tarball into a temporary prefix. */
export async function packAndInstall(): Promise<InstalledPackage> {
  if (!existsSync(join(REPO_ROOT, 'dist', 'src', 'cli', 'main.js'))) {
    throw new Error('dist/ is missing: run `npm run build` before this test');
  }
  const base = join(REPO_ROOT, '.tmp', 'package-install');
  const packDir = join(base, 'pack');
  rmSync(packDir, { recursive: true, force: true });
  mkdirSync(packDir, { recursive: true });
  const packed = await run('npm', ['pack', '--json', '--pack-destination', packDir], {
    cwd: REPO_ROOT,
    maxBuffer: 64 * 1024 * 1024,
  });
  const info = (JSON.parse(packed.stdout) as { filename: string; files: { path: string }[] }[])[0];
  if (!info) throw new Error('npm pack printed no result');
  const tarball = join(packDir, info.filename);
  const hex = createHash('sha256').update(readFileSync(tarball)).digest('hex');
  const installDir = join(base, hex);
  const prefix = join(installDir, 'prefix');
  const marker = join(installDir, 'installed');
  const fresh = process.env.CMCP_PACKAGE_FRESH === '1' || !existsSync(marker);
  let installSeconds = 0;
  if (fresh) {
    // Only one install is kept: older ones are of other tarballs.
    for (const n of readdirSync(base))
      if (/^[0-9a-f]{64}$/.test(n)) rmSync(join(base, n), { recursive: true, force: true });
    mkdirSync(installDir, { recursive: true });
    const started = Date.now();
    await run(
      'npm',
      ['install', '-g', '--prefix', prefix, '--no-audit', '--no-fund', '--prefer-offline', tarball],
      // A clean environment for npm: no workspace or checkout settings leak into the install.
      { cwd: installDir, maxBuffer: 64 * 1024 * 1024, env: cleanNpmEnv() },
    );
    installSeconds = Math.round((Date.now() - started) / 1000);
    writeFileSync(marker, `${info.filename} sha256:${hex} installed in ${installSeconds} s\n`);
  }
  return {
    tarball,
    tarballSha256: `sha256:${hex}`,
    files: info.files.map((f) => f.path),
    prefix,
    bin: join(prefix, 'bin', 'cmcp'),
    root: join(prefix, 'lib', 'node_modules', 'cmcp'),
    fresh,
    installSeconds,
  };
}

/** process.env without npm's per-run settings (npm_config_*, npm_package_*, npm_lifecycle_*). */
export function cleanNpmEnv(): NodeJS.ProcessEnv {
  const env: NodeJS.ProcessEnv = {};
  for (const [k, v] of Object.entries(process.env)) if (!/^npm_/i.test(k)) env[k] = v;
  return env;
}

/** A `cmcp start` child of an installed package. */
export interface InstalledGateway {
  proc: ChildProcess;
  url: string;
  output: () => string;
  /** Sends `signal` (default SIGTERM) and resolves with the exit code. */
  stop(signal?: NodeJS.Signals): Promise<number | null>;
}

/** Starts `<bin> start --config FILE` in `cwd` and waits for `/healthz` on `port`. */
export async function startInstalled(
  bin: string,
  config: string,
  port: number,
  cwd: string,
): Promise<InstalledGateway> {
  const proc = spawn(bin, ['start', '--config', config], {
    cwd,
    env: { ...cleanNpmEnv(), CMCP_LOG_LEVEL: 'info' },
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  let out = '';
  proc.stdout?.on('data', (d) => {
    out += d;
  });
  proc.stderr?.on('data', (d) => {
    out += d;
  });
  const url = `http://127.0.0.1:${port}`;
  const deadline = Date.now() + 45_000;
  for (;;) {
    if (proc.exitCode !== null) throw new Error(`installed gateway exited ${proc.exitCode}: ${out}`);
    try {
      if ((await fetch(`${url}/healthz`)).ok) break;
    } catch {
      // not listening yet
    }
    if (Date.now() > deadline) {
      proc.kill('SIGKILL');
      throw new Error(`installed gateway did not start: ${out}`);
    }
    await new Promise((r) => setTimeout(r, 100));
  }
  return {
    proc,
    url,
    output: () => out,
    stop(signal: NodeJS.Signals = 'SIGTERM') {
      return new Promise((res) => {
        if (proc.exitCode !== null || proc.signalCode !== null) return res(proc.exitCode);
        proc.once('exit', (code) => res(code));
        proc.kill(signal);
      });
    },
  };
}

/** Runs an installed `cmcp` command; resolves with exit code, stdout and stderr (never rejects). */
export async function runInstalled(
  bin: string,
  args: string[],
  cwd: string,
): Promise<{ code: number; stdout: string; stderr: string }> {
  try {
    const r = await run(bin, args, { cwd, env: cleanNpmEnv(), maxBuffer: 16 * 1024 * 1024 });
    return { code: 0, stdout: r.stdout, stderr: r.stderr };
  } catch (e) {
    const err = e as { code?: number; stdout?: string; stderr?: string };
    return {
      code: typeof err.code === 'number' ? err.code : -1,
      stdout: err.stdout ?? '',
      stderr: err.stderr ?? '',
    };
  }
}
