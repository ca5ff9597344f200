/**
 * swtpm (software TPM 2.0) provisioning and process control for tests and `npm run demo`.
 * Loopback only. Provisioning follows docs/spec/tpm.md ("swtpm for tests"): a throwaway local CA in a folder of ours
 * (never the system /var/lib/swtpm-localca), EK certificates, no --allow-signing.
 */
import { type ChildProcess, execFile, spawn } from 'node:child_process';
import {
  accessSync,
  constants,
  cpSync,
  mkdirSync,
  readdirSync,
  readFileSync,
  rmSync,
  writeFileSync,
} from 'node:fs';
import { mkdtemp } from 'node:fs/promises';
import { createConnection, createServer } from 'node:net';
import { tmpdir } from 'node:os';
import { delimiter, join, resolve } from 'node:path';
import { waitExit } from './process.js';

const LOOPBACK = '127.0.0.1';
const REQUIRED_BINARIES = ['swtpm', 'swtpm_setup', 'swtpm_localca'] as const;

/** Where setup instructions point when swtpm is missing. */
export const SWTPM_SETUP_HINT =
  'run the setup script (scripts/setup.sh; it installs the Debian packages swtpm swtpm-tools tpm2-tools libtss2-dev)';

/** The local CA that signed the EK and platform certificates of a provisioned swtpm. */
export interface SwtpmCa {
  /** The CA folder (swtpm_localca statedir). */
  dir: string;
  /** Self-signed root (`swtpm-localca-rootca-cert.pem`). */
  rootCertPath: string;
  /** Intermediate that issues EK certs, CN=swtpm-localca (`issuercert.pem`). */
  issuerCertPath: string;
}

export interface ProvisionedSwtpm {
  /** TPM state folder to copy per instance (one swtpm per state folder: swtpm locks it). */
  stateDir: string;
  ca: SwtpmCa;
}

export interface SwtpmInstance {
  /** tctildr configuration for {@link Tpm.open}. */
  tcti: string;
  /** TPM command port; the control channel is port + 1. */
  port: number;
  ctrlPort: number;
  stateDir: string;
  pid: number;
  /** Kills the process (SIGTERM, then SIGKILL after 3 s) and removes a copied state folder. Idempotent. */
  stop(): Promise<void>;
}

export interface StartSwtpmOptions {
  /** Copy this provisioned state folder into a fresh temporary folder (removed by stop()). */
  templateStateDir?: string;
  /** Or run on this state folder in place (kept by stop()). Exactly one of the two. */
  stateDir?: string;
  /** Where to create the copied state folder (default: the OS temp folder). */
  parentDir?: string;
  /** Folder in which a `<pid>` file is kept while the process runs, for {@link killRegisteredSwtpms}. */
  pidRegistryDir?: string;
}

function findExecutable(name: string): string | null {
  for (const dir of (process.env.PATH ?? '').split(delimiter)) {
    if (!dir) continue;
    const p = join(dir, name);
    try {
      accessSync(p, constants.X_OK);
      return p;
    } catch {
      // not here
    }
  }
  return null;
}

/** Throws a clear error naming the setup script when swtpm, swtpm_setup or swtpm_localca is missing. */
export function assertSwtpmInstalled(): { swtpm: string; swtpmSetup: string; swtpmLocalca: string } {
  const found = REQUIRED_BINARIES.map((b) => findExecutable(b));
  const missing = REQUIRED_BINARIES.filter((_, i) => found[i] === null);
  if (missing.length > 0) {
    throw new Error(`swtpm binaries not found on PATH (missing: ${missing.join(', ')}); ${SWTPM_SETUP_HINT}`);
  }
  return { swtpm: found[0]!, swtpmSetup: found[1]!, swtpmLocalca: found[2]! };
}

function run(file: string, args: string[]): Promise<{ stdout: string; stderr: string }> {
  return new Promise((ok, fail) => {
    execFile(file, args, { timeout: 60_000 }, (err, stdout, stderr) => {
      if (err) {
        fail(new Error(`${file} ${args.join(' ')} failed: ${err.message}\n${stdout}\n${stderr}`));
      } else {
        ok({ stdout, stderr });
      }
    });
  });
}

/**
 * Provisions a TPM 2.0 state folder in `dir` (created; must be empty or absent): writes
 * `dir/swtpm-localca.conf` and `dir/swtpm_setup.conf`, keeps the CA in `dir/ca`, and runs
 * `swtpm_setup --tpm2 --create-ek-cert --create-platform-cert --pcr-banks sha256,sha384` into
 * `dir/state`. Result: RSA-2048 EK 0x81010001 (cert NV 0x01C00002), ECC P-384 EK 0x81010016
 * (cert NV 0x01C00016), platform cert NV 0x01C08000. About 1.2 s.
 */
export async function provisionSwtpm(dir: string): Promise<ProvisionedSwtpm> {
  const bins = assertSwtpmInstalled();
  const root = resolve(dir);
  const caDir = join(root, 'ca');
  const stateDir = join(root, 'state');
  mkdirSync(caDir, { recursive: true });
  mkdirSync(stateDir, { recursive: true });
  const localcaConf = join(root, 'swtpm-localca.conf');
  const setupConf = join(root, 'swtpm_setup.conf');
  writeFileSync(
    localcaConf,
    [
      `statedir = ${caDir}`,
      `signingkey = ${join(caDir, 'signkey.pem')}`,
      `issuercert = ${join(caDir, 'issuercert.pem')}`,
      `certserial = ${join(caDir, 'certserial')}`,
      '',
    ].join('\n'),
  );
  writeFileSync(
    setupConf,
    [
      `create_certs_tool = ${bins.swtpmLocalca}`,
      `create_certs_tool_config = ${localcaConf}`,
      'create_certs_tool_options = /etc/swtpm-localca.options',
      'active_pcr_banks = sha256',
      '',
    ].join('\n'),
  );
  // No --allow-signing: its EK is not the TCG default-template EK the certificate must match.
  await run(bins.swtpmSetup, [
    '--tpm2',
    '--tpmstate',
    stateDir,
    '--config',
    setupConf,
    '--create-ek-cert',
    '--create-platform-cert',
    '--pcr-banks',
    'sha256,sha384',
    '--overwrite',
  ]);
  const ca: SwtpmCa = {
    dir: caDir,
    rootCertPath: join(caDir, 'swtpm-localca-rootca-cert.pem'),
    issuerCertPath: join(caDir, 'issuercert.pem'),
  };
  for (const p of [ca.rootCertPath, ca.issuerCertPath]) {
    try {
      accessSync(p, constants.R_OK);
    } catch {
      throw new Error(`swtpm_setup finished but the local CA file ${p} is missing`);
    }
  }
  return { stateDir, ca };
}

function listenOnce(port: number): Promise<number | null> {
  return new Promise((ok) => {
    const srv = createServer();
    srv.once('error', () => ok(null));
    srv.listen({ host: LOOPBACK, port, exclusive: true }, () => {
      const addr = srv.address();
      const got = typeof addr === 'object' && addr !== null ? addr.port : null;
      srv.close(() => ok(got));
    });
  });
}

/** A port P such that P and P+1 were both free on 127.0.0.1 a moment ago. */
async function pickPortPair(): Promise<number> {
  for (let i = 0; i < 50; i++) {
    const p = await listenOnce(0);
    if (p === null || p >= 65535) continue;
    if ((await listenOnce(p + 1)) !== null) return p;
  }
  throw new Error('could not find two consecutive free loopback ports');
}

function canConnect(port: number): Promise<boolean> {
  return new Promise((ok) => {
    const s = createConnection({ host: LOOPBACK, port });
    s.once('connect', () => {
      s.destroy();
      ok(true);
    });
    s.once('error', () => {
      s.destroy();
      ok(false);
    });
  });
}

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

/** Live swtpm children of this process, killed synchronously if the process exits first. */
const live = new Map<ChildProcess, () => void>();
let exitHookInstalled = false;

function installExitHook(): void {
  if (exitHookInstalled) return;
  exitHookInstalled = true;
  process.on('exit', () => {
    for (const [child, cleanup] of live) {
      try {
        child.kill('SIGKILL');
      } catch {
        // already gone
      }
      cleanup();
    }
    live.clear();
  });
}

/**
 * Starts `swtpm socket --tpm2` on a fresh pair of loopback ports (server P, control P+1) with
 * `--flags not-need-init,startup-clear`, as a tracked child process, and waits until both ports
 * accept connections. Retries on a port clash. The process is killed if this process exits.
 */
export async function startSwtpm(opts: StartSwtpmOptions): Promise<SwtpmInstance> {
  const bins = assertSwtpmInstalled();
  if ((opts.templateStateDir === undefined) === (opts.stateDir === undefined)) {
    throw new Error('startSwtpm: pass exactly one of templateStateDir and stateDir');
  }
  let stateDir: string;
  let ownedDir: string | null = null;
  if (opts.templateStateDir !== undefined) {
    const parent = opts.parentDir ?? tmpdir();
    mkdirSync(parent, { recursive: true });
    ownedDir = await mkdtemp(join(parent, 'cmcp-swtpm-'));
    stateDir = join(ownedDir, 'state');
    cpSync(opts.templateStateDir, stateDir, { recursive: true });
    rmSync(join(stateDir, '.lock'), { force: true });
  } else {
    stateDir = resolve(opts.stateDir!);
  }
  const removeOwned = () => {
    if (ownedDir) rmSync(ownedDir, { recursive: true, force: true });
  };

  let lastError = '';
  for (let attempt = 0; attempt < 5; attempt++) {
    const port = await pickPortPair();
    const child = spawn(
      bins.swtpm,
      [
        'socket',
        '--tpm2',
        '--tpmstate',
        `dir=${stateDir}`,
        '--server',
        `type=tcp,port=${port},bindaddr=${LOOPBACK}`,
        '--ctrl',
        `type=tcp,port=${port + 1},bindaddr=${LOOPBACK}`,
        '--flags',
        'not-need-init,startup-clear',
      ],
      { stdio: ['ignore', 'ignore', 'pipe'] },
    );
    let stderr = '';
    child.stderr?.setEncoding('utf8');
    child.stderr?.on('data', (d: string) => {
      if (stderr.length < 8192) stderr += d;
    });
    let spawnError: Error | null = null;
    child.once('error', (e) => {
      spawnError = e;
    });
    const pidFile = opts.pidRegistryDir && child.pid ? join(opts.pidRegistryDir, String(child.pid)) : null;
    const unregister = () => {
      live.delete(child);
      if (pidFile) rmSync(pidFile, { force: true });
    };
    installExitHook();
    live.set(child, () => {
      unregister();
      removeOwned();
    });
    if (pidFile && opts.pidRegistryDir) {
      mkdirSync(opts.pidRegistryDir, { recursive: true });
      writeFileSync(pidFile, `${child.pid}\n`);
    }

    const deadline = Date.now() + 10_000;
    let ready = false;
    while (Date.now() < deadline) {
      if (spawnError || child.exitCode !== null || child.signalCode !== null) break;
      if ((await canConnect(port + 1)) && (await canConnect(port))) {
        ready = true;
        break;
      }
      await sleep(20);
    }
    if (ready && child.pid !== undefined) {
      let stopped = false;
      const stop = async () => {
        if (stopped) return;
        stopped = true;
        if (child.exitCode === null && child.signalCode === null) {
          child.kill('SIGTERM');
          if (!(await waitExit(child, 3000))) {
            child.kill('SIGKILL');
            await waitExit(child, 3000);
          }
        }
        unregister();
        removeOwned();
      };
      return {
        tcti: `swtpm:host=${LOOPBACK},port=${port}`,
        port,
        ctrlPort: port + 1,
        stateDir,
        pid: child.pid,
        stop,
      };
    }
    child.kill('SIGKILL');
    await waitExit(child, 3000);
    unregister();
    lastError = spawnError
      ? String(spawnError)
      : stderr.trim() || `exit ${child.exitCode ?? child.signalCode}`;
    // Only a port clash is worth another try.
    if (!/address already in use|bind|EADDRINUSE/i.test(lastError)) break;
  }
  removeOwned();
  throw new Error(`swtpm did not start: ${lastError}`);
}

/**
 * Kills (SIGKILL) every swtpm whose pid file is in `registryDir` and is still an swtpm process,
 * then empties the folder. For a test run's global teardown: catches workers that died hard.
 */
export function killRegisteredSwtpms(registryDir: string): number {
  let killed = 0;
  let entries: string[];
  try {
    entries = readdirSync(registryDir);
  } catch {
    return 0;
  }
  for (const f of entries) {
    const pid = Number(f);
    if (Number.isInteger(pid) && pid > 0) {
      let cmdline = '';
      try {
        cmdline = readFileSync(`/proc/${pid}/cmdline`, 'utf8');
      } catch {
        // gone
      }
      // Guard against a recycled pid: only kill an swtpm.
      if (cmdline.split('\0')[0]?.endsWith('swtpm')) {
        try {
          process.kill(pid, 'SIGKILL');
          killed++;
        } catch {
          // raced with its exit
        }
      }
    }
    rmSync(join(registryDir, f), { force: true });
  }
  return killed;
}
