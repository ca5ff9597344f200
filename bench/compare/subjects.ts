/**
 * The subjects of the comparison (bench/compare/run.ts), each started as its own process with
 * the probe preloaded (./probe.ts), fronting the same MCP server (./upstream.ts):
 *
 * - `direct` — the client talks to the upstream itself (HTTP: its Streamable HTTP port; stdio:
 *   the client spawns it);
 * - `tcp-relay` — a byte relay in front of the HTTP upstream (./tcp-relay.ts);
 * - `supergateway`, `mcp-proxy` — the npm stdio→Streamable HTTP proxies users pick, in front of
 *   the stdio upstream (supergateway `--stateful`: its stateless mode spawns a server per request);
 * - `cmcp-light` — `cmcp start`, software attestation, no policy, no catalog (dev mode);
 * - `cmcp-full` — `cmcp start`, TPM provider on a fresh swtpm (testing/swtpm.ts), the example
 *   Cedar bundle, a catalog pinning the upstream's tools, an agent token, and an execution_id on
 *   every call. SQLite runs with synchronous=FULL in every profile (src/store/sqlite/db.ts).
 *
 * Each cmcp gateway has both upstreams (`h` over HTTP, `s` over stdio); a subject names which one
 * a call goes to through the tool name.
 */
import { type ChildProcess, execFileSync, spawn } from 'node:child_process';
import { createHash, randomBytes } from 'node:crypto';
import { closeSync, mkdirSync, openSync, readFileSync, writeFileSync } from 'node:fs';
import { createServer } from 'node:net';
import { join } from 'node:path';
import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { StdioClientTransport } from '@modelcontextprotocol/sdk/client/stdio.js';
import { StreamableHTTPClientTransport } from '@modelcontextprotocol/sdk/client/streamableHttp.js';
import { stringify } from 'yaml';
import { provisionSwtpm, startSwtpm } from '../../testing/swtpm.js';
import { spawnListening } from '../listening.js';
import { REPO_ROOT } from '../load/profile.js';

export type Transport = 'http' | 'stdio';
export type SubjectName = 'direct' | 'tcp-relay' | 'supergateway' | 'mcp-proxy' | 'cmcp-light' | 'cmcp-full';

/** Which subjects run over which upstream transport. */
export const SUBJECTS: Record<Transport, SubjectName[]> = {
  http: ['direct', 'tcp-relay', 'cmcp-light', 'cmcp-full'],
  stdio: ['direct', 'supergateway', 'mcp-proxy', 'cmcp-light', 'cmcp-full'],
};

/** A connected subject: how to call a tool through it and which process to measure. */
export interface Subject {
  name: SubjectName;
  transport: Transport;
  /** The process whose CPU, memory and event loop are measured (the gateway; for direct, the upstream). */
  pid: number;
  /** One `tools/call` of `noop` or `blob`; rejects when the answer is not a result. */
  call(tool: 'noop' | 'blob', i: number): Promise<void>;
  close(): Promise<void>;
}

export interface Env {
  dir: string;
  node: string;
  /** dist/ of the cmcp to run (default: this checkout's). */
  cmcpDist: string;
  probeDir: string;
  /** Extra Node options for cmcp gateways (e.g. `--cpu-prof`). */
  cmcpNodeArgs?: string[];
  /** Folder of the gateways' SQLite databases (default `dir`). */
  dbDir?: string;
  /** pino level of the cmcp gateways (default info, as a deployment runs). */
  logLevel?: string;
  /** Extra environment of the cmcp gateways (e.g. `CMCP_LOG_LEVEL`). */
  cmcpEnv?: Record<string, string>;
  /** Extra top-level sections of the cmcp gateways' config (e.g. `store: { worker: true }`). */
  cmcpConfig?: Record<string, unknown>;
}

const DIST = join(REPO_ROOT, 'dist');
const PROBE = join(DIST, 'bench', 'compare', 'probe.js');
const UPSTREAM = join(DIST, 'bench', 'compare', 'upstream.js');

/** A TCP port that was free on 127.0.0.1 a moment ago. */
export function freePort(): Promise<number> {
  return new Promise((ok, fail) => {
    const s = createServer();
    s.once('error', fail);
    s.listen(0, '127.0.0.1', () => {
      const p = (s.address() as { port: number }).port;
      s.close(() => ok(p));
    });
  });
}

function probeEnv(env: Env): NodeJS.ProcessEnv {
  return { ...process.env, CMCP_BENCH_PROBE_DIR: env.probeDir, NODE_OPTIONS: `--import=${PROBE}` };
}

/** Spawns a process whose stdout/stderr go to `<dir>/<name>.log`. */
function spawnLogged(
  env: Env,
  name: string,
  cmd: string,
  args: string[],
  extra: NodeJS.ProcessEnv = {},
): ChildProcess {
  const fd = openSync(join(env.dir, `${name}.log`), 'a');
  const child = spawn(cmd, args, {
    stdio: ['ignore', fd, fd],
    env: { ...probeEnv(env), ...extra },
    detached: true,
  });
  closeSync(fd);
  return child;
}

/** A bench child that prints `listening <port>` (bench/listening.ts), with the probe's environment. */
const listening = (env: Env, args: string[]) => spawnListening(env.node, args, probeEnv(env));

/** Polls `url` until it answers; @throws when `proc` exits or 30 s pass. */
export async function waitHttp(
  url: string,
  proc: ChildProcess,
  what: string,
  logFile?: string,
): Promise<void> {
  const deadline = Date.now() + 30_000;
  for (;;) {
    if (proc.exitCode !== null)
      throw new Error(
        `${what} exited ${proc.exitCode}: ${logFile ? readFileSync(logFile, 'utf8').slice(-2000) : ''}`,
      );
    try {
      await fetch(url, { signal: AbortSignal.timeout(1000) });
      return;
    } catch {
      // not listening yet
    }
    if (Date.now() > deadline) throw new Error(`${what} did not listen on ${url}`);
    await new Promise((r) => setTimeout(r, 100));
  }
}

/** SIGTERM, then SIGKILL after 10 s (`group`: the whole process group). */
export function stopProc(p: ChildProcess, group = false): Promise<void> {
  if (p.exitCode !== null || p.signalCode !== null) return Promise.resolve();
  return new Promise((ok) => {
    const kill = setTimeout(() => {
      try {
        if (group && p.pid) process.kill(-p.pid, 'SIGKILL');
        else p.kill('SIGKILL');
      } catch {
        // gone
      }
      ok();
    }, 10_000);
    p.once('exit', () => {
      clearTimeout(kill);
      if (group && p.pid)
        try {
          process.kill(-p.pid, 'SIGKILL'); // what it left in its group (its stdio upstream)
        } catch {
          // the group is gone
        }
      ok();
    });
    p.kill('SIGTERM');
  });
}

/** An SDK client over Streamable HTTP (one MCP session shared by all concurrent callers). */
async function httpClient(url: string, token?: string): Promise<Client> {
  const client = new Client({ name: 'cmcp-bench', version: '1' });
  const requestInit = token ? { headers: { authorization: `Bearer ${token}` } } : undefined;
  await client.connect(new StreamableHTTPClientTransport(new URL(url), { requestInit }));
  return client;
}

function caller(client: Client, prefix: string, executionIds: string | null) {
  return async (tool: 'noop' | 'blob', i: number) => {
    const params: Record<string, unknown> = { name: `${prefix}${tool}`, arguments: {} };
    if (executionIds) params._cmcp = { execution_id: `${executionIds}-${i}` };
    const r = await client.callTool(params as { name: string });
    if (r.isError) throw new Error(`tool error: ${JSON.stringify(r.content).slice(0, 300)}`);
  };
}

/** The shared processes of one run: the HTTP upstream and the cmcp gateways. */
export interface Fleet {
  upstreamHttp: { proc: ChildProcess; port: number; url: string };
  cmcp: Record<'cmcp-light' | 'cmcp-full', { proc: ChildProcess; url: string; token?: string }>;
  stop(): Promise<void>;
}

function cmcpConfig(o: {
  env: Env;
  profile: 'light' | 'full';
  port: number;
  upstreamUrl: string;
  tokenSha256?: string;
  tcti?: string;
  catalog?: string;
}): Record<string, unknown> {
  const full = o.profile === 'full';
  return {
    dev_mode: !full,
    listen: { host: '127.0.0.1', port: o.port },
    database: join(o.env.dbDir ?? o.env.dir, `${o.profile}.db`),
    attestation: full
      ? { provider: 'tpm', tcti: o.tcti, ak_algorithm: 'ecc-p256' }
      : { provider: 'software' },
    ...(full
      ? {
          agents: [
            {
              agent_id: 'bench-agent',
              token_sha256: o.tokenSha256,
              attributes: { team: 'eng', roles: ['writer'] },
            },
          ],
          policy: { bundle: join(REPO_ROOT, 'examples', 'policy'), enforcement_mode: 'enforcing' },
          ...(o.catalog ? { catalog: { file: o.catalog } } : {}),
        }
      : {}),
    upstreams: [
      { name: 'h', transport: 'http', url: o.upstreamUrl },
      { name: 's', transport: 'stdio', command: o.env.node, args: [UPSTREAM, 'stdio'] },
    ],
    // The example policy forbids a session's 500th call: rotate the default session before it.
    sessions: { default_max_calls: full ? 450 : 1_000_000 },
    // One agent drives the gateway at full speed: the per-agent limits (docs/operations.md) would
    // measure the limiter, not the gateway.
    limits: { agent_requests_per_s: 1_000_000, agent_request_burst: 1_000_000, agent_max_in_flight: 100_000 },
    ...o.env.cmcpConfig,
  };
}

async function startCmcp(
  env: Env,
  profile: 'light' | 'full',
  upstreamUrl: string,
  tcti?: string,
): Promise<{ proc: ChildProcess; url: string; token?: string }> {
  const port = await freePort();
  const token = profile === 'full' ? randomBytes(24).toString('base64url') : undefined;
  const base = {
    env,
    profile,
    port,
    upstreamUrl,
    tcti,
    tokenSha256: token ? createHash('sha256').update(token).digest('hex') : undefined,
  };
  const main = join(env.cmcpDist, 'src', 'cli', 'main.js');
  const file = join(env.dir, `${profile}.yaml`);
  let catalog: string | undefined;
  if (profile === 'full') {
    // Pin the upstream's tools as an operator would: `cmcp catalog snapshot` on the same config.
    writeFileSync(file, stringify(cmcpConfig(base)));
    catalog = join(env.dir, 'catalog.json');
    execFileSync(env.node, [main, 'catalog', 'snapshot', '--config', file, '--out', catalog], {
      stdio: 'ignore',
      env: probeEnv(env),
    });
  }
  writeFileSync(file, stringify(cmcpConfig({ ...base, catalog })));
  const proc = spawnLogged(
    env,
    `cmcp-${profile}`,
    env.node,
    [...(env.cmcpNodeArgs ?? []), main, 'start', '--config', file],
    {
      CMCP_LOG_LEVEL: env.logLevel ?? 'info',
      ...env.cmcpEnv,
    },
  );
  const url = `http://127.0.0.1:${port}`;
  await waitHttp(`${url}/healthz`, proc, `cmcp ${profile}`, join(env.dir, `cmcp-${profile}.log`));
  return { proc, url, token };
}

/**
 * Starts the HTTP upstream, swtpm and both cmcp gateways (`only` limits the gateways).
 * @throws when a part does not start within 30 s (what started is stopped first).
 */
export async function startFleet(env: Env, only?: ('cmcp-light' | 'cmcp-full')[]): Promise<Fleet> {
  const stops: (() => Promise<void>)[] = [];
  const stop = async () => {
    for (const s of stops.splice(0).reverse()) await s().catch(() => undefined);
  };
  try {
    const up = await listening(env, [UPSTREAM, 'http']);
    stops.push(() => stopProc(up.proc));
    const upstreamUrl = `http://127.0.0.1:${up.port}/mcp`;
    const cmcp = {} as Fleet['cmcp'];
    if (!only || only.includes('cmcp-light')) {
      cmcp['cmcp-light'] = await startCmcp(env, 'light', upstreamUrl);
      stops.push(() => stopProc(cmcp['cmcp-light'].proc, true));
    }
    if (!only || only.includes('cmcp-full')) {
      const tpmDir = join(env.dir, 'tpm');
      mkdirSync(tpmDir, { recursive: true });
      const { stateDir } = await provisionSwtpm(tpmDir);
      const tpm = await startSwtpm({ templateStateDir: stateDir, parentDir: env.dir });
      stops.push(() => tpm.stop());
      cmcp['cmcp-full'] = await startCmcp(env, 'full', upstreamUrl, tpm.tcti);
      stops.push(() => stopProc(cmcp['cmcp-full'].proc, true));
    }
    return { upstreamHttp: { ...up, url: upstreamUrl }, cmcp, stop };
  } catch (e) {
    await stop();
    throw e;
  }
}

/** Connects one subject over one transport (starting its own process where it has one). */
export async function connectSubject(
  env: Env,
  fleet: Fleet,
  name: SubjectName,
  transport: Transport,
): Promise<Subject> {
  const done = (
    pid: number | undefined,
    client: Client,
    call: Subject['call'],
    extra?: () => Promise<void>,
  ) => {
    if (!pid) throw new Error(`${name}: no process id`);
    return {
      name,
      transport,
      pid,
      call,
      close: async () => {
        await client.close().catch(() => undefined);
        await extra?.();
      },
    };
  };
  if (name === 'cmcp-light' || name === 'cmcp-full') {
    const g = fleet.cmcp[name];
    const client = await httpClient(`${g.url}/mcp`, g.token);
    const ids = name === 'cmcp-full' ? `bench-${transport}-${randomBytes(4).toString('hex')}` : null;
    return done(g.proc.pid, client, caller(client, transport === 'http' ? 'h.' : 's.', ids));
  }
  if (name === 'direct' && transport === 'http') {
    const client = await httpClient(fleet.upstreamHttp.url);
    return done(fleet.upstreamHttp.proc.pid, client, caller(client, '', null));
  }
  if (name === 'direct') {
    const t = new StdioClientTransport({
      command: env.node,
      args: [UPSTREAM, 'stdio'],
      env: probeEnv(env) as Record<string, string>,
    });
    const client = new Client({ name: 'cmcp-bench', version: '1' });
    await client.connect(t);
    return done(t.pid ?? undefined, client, caller(client, '', null));
  }
  if (name === 'tcp-relay') {
    const relay = await listening(env, [
      join(DIST, 'bench', 'compare', 'tcp-relay.js'),
      String(fleet.upstreamHttp.port),
    ]);
    const client = await httpClient(`http://127.0.0.1:${relay.port}/mcp`);
    return done(relay.proc.pid, client, caller(client, '', null), () => stopProc(relay.proc));
  }
  const port = await freePort();
  const upstreamCmd = `${env.node} ${UPSTREAM} stdio`;
  const proc =
    name === 'supergateway'
      ? spawnLogged(env, name, env.node, [
          join(REPO_ROOT, 'node_modules', 'supergateway', 'dist', 'index.js'),
          '--stdio',
          upstreamCmd,
          '--outputTransport',
          'streamableHttp',
          '--stateful',
          '--port',
          String(port),
          '--logLevel',
          'none',
        ])
      : spawnLogged(env, name, env.node, [
          join(REPO_ROOT, 'node_modules', 'mcp-proxy', 'dist', 'bin', 'mcp-proxy.mjs'),
          '--host',
          '127.0.0.1',
          '--port',
          String(port),
          '--server',
          'stream',
          '--',
          env.node,
          UPSTREAM,
          'stdio',
        ]);
  const url = `http://127.0.0.1:${port}/mcp`;
  await waitHttp(url, proc, name, join(env.dir, `${name}.log`));
  const client = await httpClient(url);
  return done(proc.pid, client, caller(client, '', null), () => stopProc(proc, true));
}
