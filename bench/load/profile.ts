/**
 * The gateway's "full profile" for load runs (docs/testing.md, Node.js; test/load-stability.test.ts): the TPM provider on a fresh swtpm, the
 * example Cedar bundle (examples/policy) and tool catalog (examples/catalog.json), one stdio
 * upstream (`fs`: server-filesystem) and one Streamable HTTP upstream (`everything`:
 * server-everything served by ./everything-http.ts), both on 127.0.0.1. The gateway runs as
 * `cmcp start` in a child process of its own (its own process group, so its stdio upstream
 * stops with it), on a chosen Node.js binary with chosen V8 flags, and its stdout/stderr go to a
 * log file that survives a crash.
 */
import { type ChildProcess, execFileSync, spawn } from 'node:child_process';
import { createHash, randomBytes } from 'node:crypto';
import { closeSync, mkdirSync, openSync, readFileSync, writeFileSync } from 'node:fs';
import { createServer } from 'node:net';
import { dirname, join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import { stringify } from 'yaml';
import { provisionSwtpm, type SwtpmInstance, startSwtpm } from '../../testing/swtpm.js';
import { spawnListening } from '../listening.js';

/** The repository root (this file runs from bench/load or dist/bench/load). */
export const REPO_ROOT = (() => {
  const here = dirname(fileURLToPath(import.meta.url));
  const up = resolve(here, '..', '..');
  return up.endsWith('dist') ? resolve(up, '..') : up;
})();
const DIST = join(REPO_ROOT, 'dist');
const MCP_SERVERS = join(REPO_ROOT, 'node_modules', '@modelcontextprotocol');

/** Principal attributes of the load agent: a writer (examples/policy/00-baseline.cedar). */
const AGENT_ATTRIBUTES = { team: 'eng', roles: ['writer'] };

export interface FullProfileOptions {
  /** Working folder (config, database, log, TPM state, files); the caller removes it. */
  dir: string;
  /** Node.js binary for the gateway and its upstreams (default: this process's). */
  node?: string;
  /** Extra Node/V8 options for the gateway process only, after the ones bin/cmcp gives it. */
  nodeArgs?: string[];
  /** A provisioned swtpm state to copy (else one is provisioned in `dir`). */
  templateStateDir?: string;
  /** pino level of the gateway (default `warn`: the log stays small under load). */
  logLevel?: string;
}

export interface FullProfile {
  url: string;
  token: string;
  dbPath: string;
  logFile: string;
  /** A file inside the filesystem upstream's allowed folder, for `fs.read_text_file`. */
  readableFile: string;
  gateway: ChildProcess;
  /** How the gateway process ended, once it has (null while it runs). */
  exit(): { code: number | null; signal: NodeJS.Signals | null } | null;
  /** The gateway's log so far (stdout and stderr). */
  log(): string;
  /** Stops gateway (SIGTERM, then SIGKILL of its group), HTTP upstream and swtpm. Idempotent. */
  stop(): Promise<void>;
}

/** A TCP port that was free on 127.0.0.1 a moment ago. */
function freePort(): Promise<number> {
  return new Promise((ok, fail) => {
    const s = createServer();
    s.once('error', fail);
    s.listen(0, '127.0.0.1', () => {
      const p = (s.address() as { port: number }).port;
      s.close(() => ok(p));
    });
  });
}

function waitExit(child: ChildProcess, ms: number): Promise<void> {
  if (child.exitCode !== null || child.signalCode !== null) return Promise.resolve();
  return new Promise((ok) => {
    const t = setTimeout(ok, ms);
    child.once('exit', () => {
      clearTimeout(t);
      ok();
    });
  });
}

/** Starts the HTTP upstream child and resolves its MCP URL once it listens. */
async function startEverythingHttp(node: string): Promise<{ proc: ChildProcess; url: string }> {
  const { proc, port } = await spawnListening(node, [join(DIST, 'bench', 'load', 'everything-http.js')]);
  return { proc, url: `http://127.0.0.1:${port}/mcp` };
}

function writeConfig(o: {
  dir: string;
  port: number;
  tcti: string;
  token: string;
  filesDir: string;
  httpUrl: string;
  node: string;
}): { file: string; dbPath: string } {
  const dbPath = join(o.dir, 'cmcp.db');
  const config = {
    dev_mode: false,
    listen: { host: '127.0.0.1', port: o.port },
    database: dbPath,
    attestation: { provider: 'tpm', tcti: o.tcti, ak_algorithm: 'ecc-p256' },
    agents: [
      {
        agent_id: 'load-agent',
        token_sha256: createHash('sha256').update(o.token).digest('hex'),
        attributes: AGENT_ATTRIBUTES,
      },
    ],
    policy: { bundle: join(REPO_ROOT, 'examples', 'policy'), enforcement_mode: 'enforcing' },
    catalog: { file: join(REPO_ROOT, 'examples', 'catalog.json') },
    upstreams: [
      {
        name: 'fs',
        transport: 'stdio',
        command: o.node,
        args: [join(MCP_SERVERS, 'server-filesystem', 'dist', 'index.js'), o.filesDir],
      },
      { name: 'everything', transport: 'http', url: o.httpUrl },
    ],
    // The example policy's budget forbids a session's 500th call: rotate the default session
    // before that, so every call of a long run is permitted and reaches its upstream.
    sessions: { default_max_calls: 450 },
    // A load profile: one agent at full speed, above the per-agent defaults (docs/operations.md).
    limits: { agent_requests_per_s: 1_000_000, agent_request_burst: 1_000_000, agent_max_in_flight: 100_000 },
  };
  const file = join(o.dir, 'cmcp.yaml');
  writeFileSync(file, stringify(config));
  return { file, dbPath };
}

/**
 * The V8 start-up flags bin/cmcp gives the gateway on `node` (see bin/cmcp): JS→Wasm inlining
 * off on Node.js older than 24, none from 24 on.
 */
function binStartupFlags(node: string): string[] {
  const major = Number(execFileSync(node, ['--version'], { encoding: 'utf8' }).trim().slice(1).split('.')[0]);
  return major < 24 ? ['--no-turbo-inline-js-wasm-calls'] : [];
}

/**
 * Starts swtpm, the HTTP upstream and the gateway; resolves once GET /healthz answers.
 * @throws when a part does not start within 30 s (everything started is stopped first).
 */
export async function startFullProfile(o: FullProfileOptions): Promise<FullProfile> {
  const node = o.node ?? process.execPath;
  const filesDir = join(o.dir, 'files');
  mkdirSync(filesDir, { recursive: true });
  const readableFile = join(filesDir, 'note.txt');
  writeFileSync(readableFile, 'a note that the load agent reads\n');
  const stops: (() => Promise<void>)[] = [];
  const stopAll = async () => {
    for (const s of stops.splice(0).reverse()) await s().catch(() => undefined);
  };
  try {
    const templateStateDir = o.templateStateDir ?? (await provisionSwtpm(join(o.dir, 'tpm'))).stateDir;
    const tpm: SwtpmInstance = await startSwtpm({ templateStateDir, parentDir: o.dir });
    stops.push(() => tpm.stop());
    const http = await startEverythingHttp(node);
    stops.push(async () => {
      http.proc.kill('SIGTERM');
      await waitExit(http.proc, 5000);
      if (http.proc.exitCode === null && http.proc.signalCode === null) http.proc.kill('SIGKILL');
    });
    const token = randomBytes(24).toString('base64url');
    const port = await freePort();
    const { file, dbPath } = writeConfig({
      dir: o.dir,
      port,
      tcti: tpm.tcti,
      token,
      filesDir,
      httpUrl: http.url,
      node,
    });
    const logFile = join(o.dir, 'gateway.log');
    const fd = openSync(logFile, 'a');
    const gateway = spawn(
      node,
      [
        ...binStartupFlags(node),
        ...(o.nodeArgs ?? []),
        join(DIST, 'src', 'cli', 'main.js'),
        'start',
        '--config',
        file,
      ],
      {
        stdio: ['ignore', fd, fd],
        detached: true,
        env: { ...process.env, CMCP_LOG_LEVEL: o.logLevel ?? 'warn' },
      },
    );
    closeSync(fd);
    let ended: { code: number | null; signal: NodeJS.Signals | null } | null = null;
    gateway.once('exit', (code, signal) => {
      ended = { code, signal };
    });
    const pgid = gateway.pid as number;
    stops.push(async () => {
      if (!ended) {
        gateway.kill('SIGTERM');
        await waitExit(gateway, 10_000);
      }
      try {
        process.kill(-pgid, 'SIGKILL'); // the stdio upstream and anything else left in the group
      } catch {
        // the group is gone
      }
    });
    const log = () => {
      try {
        return readFileSync(logFile, 'utf8');
      } catch {
        return '';
      }
    };
    const url = `http://127.0.0.1:${port}`;
    const deadline = Date.now() + 30_000;
    for (;;) {
      if (ended) throw new Error(`gateway exited at start-up (${JSON.stringify(ended)}): ${log()}`);
      try {
        if ((await fetch(`${url}/healthz`)).ok) break;
      } catch {
        // not listening yet
      }
      if (Date.now() > deadline) throw new Error(`gateway did not answer /healthz: ${log()}`);
      await new Promise((r) => setTimeout(r, 100));
    }
    return {
      url,
      token,
      dbPath,
      logFile,
      readableFile,
      gateway,
      exit: () => ended,
      log,
      stop: stopAll,
    };
  } catch (e) {
    await stopAll();
    throw e;
  }
}
