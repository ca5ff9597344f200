/**
 * Starts real gateways for tests: in-process (fast) or as a `cmcp start` child process
 * (for restart and SIGKILL tests). Configs are written as YAML to a temp folder, exactly
 * as an operator would.
 */
import { type ChildProcess, spawn } from 'node:child_process';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { dirname, join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import pino from 'pino';
import { stringify } from 'yaml';
import { parseConfig } from '../../src/config/index.js';
import { type Gateway, startGateway } from '../../src/gateway/lifecycle/start.js';
import type { SqliteStorageOptions } from '../../src/store/sqlite/open.js';
import { freeLoopbackPort } from '../../testing/process.js';

export const REPO_ROOT = resolve(dirname(fileURLToPath(import.meta.url)), '..', '..');

/**
 * True in the vitest project `store-worker` (vitest.config.ts): every config the harness writes
 * then has `store.worker: true`, so the suites run with the call path's writes in the worker.
 */
export const STORE_WORKER_PROJECT = process.env.CMCP_TEST_STORE_WORKER === 'on';
const MODULES = join(REPO_ROOT, 'node_modules', '@modelcontextprotocol');

/** stdio upstream config for @modelcontextprotocol/server-everything. */
export function everythingUpstream(name = 'everything', extra: Record<string, unknown> = {}) {
  return {
    name,
    transport: 'stdio',
    command: process.execPath,
    args: [join(MODULES, 'server-everything', 'dist', 'index.js'), 'stdio'],
    ...extra,
  };
}

/** stdio upstream config for @modelcontextprotocol/server-filesystem on `dir`. */
export function filesystemUpstream(dir: string, name = 'fs', extra: Record<string, unknown> = {}) {
  return {
    name,
    transport: 'stdio',
    command: process.execPath,
    args: [join(MODULES, 'server-filesystem', 'dist', 'index.js'), dir],
    ...extra,
  };
}

/** A free TCP port on 127.0.0.1 (testing/process.ts). */
export const freePort = freeLoopbackPort;

export interface TestConfigOptions {
  upstreams?: Record<string, unknown>[];
  attestation?: Record<string, unknown>;
  agents?: { agent_id: string; token: string; attributes?: Record<string, unknown> }[];
  /** Operators (docs/spec/policy.md#operator-controls): tokens stored as SHA-256 only. */
  operators?: { operator_id: string; token: string }[];
  /** Further top-level config members (e.g. `policy`, `catalog`). */
  extra?: Record<string, unknown>;
  dev_mode?: boolean;
  sessions?: Record<string, unknown>;
  dir?: string;
  port?: number;
}

export interface TestConfig {
  dir: string;
  file: string;
  dbPath: string;
  raw: Record<string, unknown>;
}

/** Writes a YAML config into a fresh temp folder. Tokens are stored as SHA-256 only. */
export async function writeConfig(o: TestConfigOptions = {}): Promise<TestConfig> {
  const { createHash } = await import('node:crypto');
  const dir = o.dir ?? mkdtempSync(join(tmpdir(), 'cmcp-test-'));
  const dbPath = join(dir, 'cmcp.db');
  const agents = o.agents ?? [
    { agent_id: 'alice', token: 'alice-token' },
    { agent_id: 'bob', token: 'bob-token' },
  ];
  const raw: Record<string, unknown> = {
    dev_mode: o.dev_mode ?? false,
    listen: { host: '127.0.0.1', port: o.port ?? 0 },
    database: dbPath,
    upstreams: o.upstreams ?? [],
    attestation: o.attestation ?? { provider: 'software' },
    agents: agents.map((a) => ({
      agent_id: a.agent_id,
      token_sha256: createHash('sha256').update(a.token).digest('hex'),
      ...(a.attributes ? { attributes: a.attributes } : {}),
    })),
    ...(o.operators
      ? {
          operators: o.operators.map((op) => ({
            operator_id: op.operator_id,
            token_sha256: createHash('sha256').update(op.token).digest('hex'),
          })),
        }
      : {}),
    ...(o.sessions ? { sessions: o.sessions } : {}),
    ...(o.extra ?? {}),
  };
  if (STORE_WORKER_PROJECT) raw.store = { ...(raw.store as object | undefined), worker: true };
  if ((raw.attestation as { provider: string }).provider === 'software') raw.dev_mode = true;
  const file = join(dir, 'cmcp.yaml');
  writeFileSync(file, stringify(raw));
  return { dir, file, dbPath, raw };
}

/**
 * Starts a gateway in this process from a written config; `storage` turns SQLite mechanisms off
 * for a test that measures without them (group commit, the WAL checkpoint thread).
 */
export async function startInProcess(cfg: TestConfig, storage?: SqliteStorageOptions): Promise<Gateway> {
  const { loadConfig } = await import('../../src/config/index.js');
  return startGateway(loadConfig(cfg.file), pino({ level: process.env.CMCP_TEST_LOG ?? 'silent' }), storage);
}

export { parseConfig };

export interface ChildGateway {
  proc: ChildProcess;
  url: string;
  stderr: () => string;
  stop(signal?: NodeJS.Signals): Promise<number | null>;
}

/** Starts `node dist/src/cli/main.js start --config FILE` (requires `npm run build`). */
export async function startChild(cfg: TestConfig, env: Record<string, string> = {}): Promise<ChildGateway> {
  const port = (cfg.raw.listen as { port: number }).port;
  if (!port) throw new Error('child gateways need a fixed port (use freePort())');
  const proc = spawn(
    process.execPath,
    [join(REPO_ROOT, 'dist', 'src', 'cli', 'main.js'), 'start', '--config', cfg.file],
    {
      env: { ...process.env, CMCP_LOG_LEVEL: 'info', ...env },
      stdio: ['ignore', 'pipe', 'pipe'],
    },
  );
  let out = '';
  proc.stdout?.on('data', (d) => {
    out += d;
  });
  proc.stderr?.on('data', (d) => {
    out += d;
  });
  const url = `http://127.0.0.1:${port}`;
  const deadline = Date.now() + 30_000;
  for (;;) {
    if (proc.exitCode !== null) throw new Error(`gateway exited ${proc.exitCode}: ${out}`);
    try {
      const r = await fetch(`${url}/healthz`);
      if (r.ok) break;
    } catch {
      // not listening yet
    }
    if (Date.now() > deadline) {
      proc.kill('SIGKILL');
      throw new Error(`gateway did not start: ${out}`);
    }
    await new Promise((r) => setTimeout(r, 100));
  }
  return {
    proc,
    url,
    stderr: () => out,
    stop(signal: NodeJS.Signals = 'SIGTERM') {
      return new Promise((res) => {
        if (proc.exitCode !== null || proc.signalCode !== null) return res(proc.exitCode);
        proc.once('exit', (code) => res(code));
        proc.kill(signal);
      });
    },
  };
}

/** Removes a temp folder (best effort). */
export function cleanup(dir: string): void {
  rmSync(dir, { recursive: true, force: true });
}

/** POSTs a JSON-RPC body to /mcp as an agent; returns status, parsed body and raw text. */
export async function rpc(
  baseUrl: string,
  token: string | null,
  body: unknown,
  headers: Record<string, string> = {},
  // biome-ignore lint/suspicious/noExplicitAny: responses are arbitrary JSON that tests assert field by field
): Promise<{ status: number; body: any; text: string; headers: Headers }> {
  const r = await fetch(`${baseUrl}/mcp`, {
    method: 'POST',
    headers: {
      'content-type': 'application/json',
      accept: 'application/json, text/event-stream',
      ...(token ? { authorization: `Bearer ${token}` } : {}),
      ...headers,
    },
    body: typeof body === 'string' ? body : JSON.stringify(body),
  });
  const text = await r.text();
  let parsed: unknown = null;
  try {
    parsed = text ? JSON.parse(text) : null;
  } catch {
    parsed = null;
  }
  return { status: r.status, body: parsed, text, headers: r.headers };
}

/** A REST call to the gateway as an agent. */
export async function rest(
  baseUrl: string,
  token: string | null,
  method: string,
  path: string,
  body?: unknown,
) {
  const r = await fetch(`${baseUrl}${path}`, {
    method,
    headers: {
      ...(token ? { authorization: `Bearer ${token}` } : {}),
      ...(body !== undefined ? { 'content-type': 'application/json' } : {}),
    },
    body: body !== undefined ? JSON.stringify(body) : undefined,
  });
  const text = await r.text();
  // biome-ignore lint/suspicious/noExplicitAny: responses are arbitrary JSON that tests assert field by field
  return { status: r.status, body: text ? (JSON.parse(text) as any) : null };
}
