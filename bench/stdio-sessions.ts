/**
 * Memory of many client sessions against one stdio upstream: `sessions` client sessions
 * (default 200), each a raw Streamable HTTP client (`initialize`, `notifications/initialized`,
 * `tools/list`, one plain `tools/call` of `everything.echo`), against one gateway (`cmcp start`,
 * dev mode) whose one upstream is @modelcontextprotocol/server-everything over stdio. After the
 * sessions, the RSS of the gateway and every process under it (VmRSS of /proc/<pid>/status,
 * summed over the process tree) and the number of upstream processes are read. The sessions
 * are left open without DELETE, as a client that vanishes leaves them.
 *
 * Run: `npm run build && bash scripts/with-node.sh node dist/bench/stdio-sessions.js
 * [--sessions N] [--root DIR]`. `--root` names another checkout whose built
 * `dist/src/cli/main.js` is run (to measure an older tree); default this one. Linux only
 * (/proc). Bounded: at most 1,000 sessions, 8 at a time, 127.0.0.1 only.
 */
import { type ChildProcess, spawn } from 'node:child_process';
import { createHash } from 'node:crypto';
import { mkdtempSync, readdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { createServer } from 'node:net';
import { tmpdir } from 'node:os';
import { join, resolve } from 'node:path';

const HERE = resolve(import.meta.dirname, '..', '..');

/** The parent pid of a process, or null when it is gone. */
function ppidOf(pid: number): number | null {
  try {
    const stat = readFileSync(`/proc/${pid}/stat`, 'utf8');
    // pid (comm) state ppid …: comm may hold spaces, so read after its closing parenthesis.
    return Number(stat.slice(stat.lastIndexOf(')') + 2).split(' ')[1]);
  } catch {
    return null;
  }
}

/** VmRSS of one process, kB (0 when gone). */
function rssKb(pid: number): number {
  try {
    const m = /VmRSS:\s+(\d+) kB/.exec(readFileSync(`/proc/${pid}/status`, 'utf8'));
    return m ? Number(m[1]) : 0;
  } catch {
    return 0;
  }
}

/** `root` and every process under it. */
export function processTree(root: number): number[] {
  const children = new Map<number, number[]>();
  for (const d of readdirSync('/proc')) {
    const pid = Number(d);
    if (!Number.isInteger(pid)) continue;
    const pp = ppidOf(pid);
    if (pp !== null) children.set(pp, [...(children.get(pp) ?? []), pid]);
  }
  const out: number[] = [];
  const todo = [root];
  while (todo.length) {
    const p = todo.pop() as number;
    out.push(p);
    todo.push(...(children.get(p) ?? []));
  }
  return out;
}

function freePort(): Promise<number> {
  return new Promise((ok, fail) => {
    const s = createServer();
    s.once('error', fail);
    s.listen(0, '127.0.0.1', () => {
      const port = (s.address() as { port: number }).port;
      s.close(() => ok(port));
    });
  });
}

export interface StdioSessionsResult {
  root: string;
  sessions: number;
  failed: number;
  gatewayRssMb: number;
  upstreamProcesses: number;
  upstreamRssMb: number;
  totalRssMb: number;
}

/** One client session: initialize, initialized, tools/list, tools/call. @returns false on any failure. */
async function session(url: string, token: string): Promise<boolean> {
  const headers: Record<string, string> = {
    authorization: `Bearer ${token}`,
    'content-type': 'application/json',
    accept: 'application/json, text/event-stream',
  };
  const post = async (body: Record<string, unknown>) => {
    const r = await fetch(`${url}/mcp`, { method: 'POST', headers, body: JSON.stringify(body) });
    return { r, text: await r.text() };
  };
  const init = await post({
    jsonrpc: '2.0',
    id: 1,
    method: 'initialize',
    params: { protocolVersion: '2025-11-25', capabilities: {}, clientInfo: { name: 'bench', version: '1' } },
  });
  const sid = init.r.headers.get('mcp-session-id');
  if (!sid || !init.text.includes('"result"')) return false;
  headers['mcp-session-id'] = sid;
  headers['mcp-protocol-version'] = '2025-11-25';
  await post({ jsonrpc: '2.0', method: 'notifications/initialized' });
  const list = await post({ jsonrpc: '2.0', id: 2, method: 'tools/list', params: {} });
  const call = await post({
    jsonrpc: '2.0',
    id: 3,
    method: 'tools/call',
    params: { name: 'everything.echo', arguments: { message: 'hi' } },
  });
  return list.text.includes('"tools"') && call.text.includes('Echo: hi');
}

/** Runs the measurement against the gateway of checkout `root`. */
export async function runStdioSessions(root: string, sessions: number): Promise<StdioSessionsResult> {
  const dir = mkdtempSync(join(tmpdir(), 'cmcp-stdio-sessions-'));
  const port = await freePort();
  const token = 'bench-token';
  const config = {
    dev_mode: true,
    listen: { host: '127.0.0.1', port },
    database: join(dir, 'cmcp.db'),
    attestation: { provider: 'software' },
    agents: [{ agent_id: 'bench', token_sha256: createHash('sha256').update(token).digest('hex') }],
    upstreams: [
      {
        name: 'everything',
        transport: 'stdio',
        command: process.execPath,
        args: [
          join(HERE, 'node_modules', '@modelcontextprotocol', 'server-everything', 'dist', 'index.js'),
          'stdio',
        ],
      },
    ],
    limits: { agent_client_sessions_per_min: 100_000 },
  };
  writeFileSync(join(dir, 'cmcp.yaml'), JSON.stringify(config));
  const gw: ChildProcess = spawn(
    process.execPath,
    [join(root, 'dist', 'src', 'cli', 'main.js'), 'start', '--config', join(dir, 'cmcp.yaml')],
    { stdio: 'ignore', env: { ...process.env, CMCP_LOG_LEVEL: 'warn' } },
  );
  const url = `http://127.0.0.1:${port}`;
  try {
    const deadline = Date.now() + 60_000;
    for (;;) {
      if (gw.exitCode !== null) throw new Error(`gateway exited ${gw.exitCode}`);
      if (Date.now() > deadline) throw new Error('gateway not ready in 60 s');
      const ok = await fetch(`${url}/readyz`).then(
        (r) => r.ok,
        () => false,
      );
      if (ok) break;
      await new Promise((r) => setTimeout(r, 200));
    }
    let next = 0;
    let failed = 0;
    await Promise.all(
      Array.from({ length: 8 }, async () => {
        while (next < sessions) {
          next++;
          if (!(await session(url, token).catch(() => false))) failed++;
        }
      }),
    );
    // Let started processes settle (a stdio server reaches its resident size after start-up).
    await new Promise((r) => setTimeout(r, 3000));
    const pid = gw.pid as number;
    const tree = processTree(pid);
    const upstream = tree.filter((p) => p !== pid);
    const gwKb = rssKb(pid);
    const upKb = upstream.reduce((a, p) => a + rssKb(p), 0);
    const mb = (kb: number) => Math.round(kb / 102.4) / 10;
    return {
      root,
      sessions,
      failed,
      gatewayRssMb: mb(gwKb),
      upstreamProcesses: upstream.length,
      upstreamRssMb: mb(upKb),
      totalRssMb: mb(gwKb + upKb),
    };
  } finally {
    gw.kill('SIGTERM');
    await new Promise((r) => (gw.exitCode !== null ? r(null) : gw.once('exit', r)));
    rmSync(dir, { recursive: true, force: true });
  }
}

function arg(name: string): string | undefined {
  const i = process.argv.indexOf(`--${name}`);
  return i >= 0 ? process.argv[i + 1] : undefined;
}

if (process.argv[1] && resolve(process.argv[1]) === resolve(import.meta.filename)) {
  const sessions = Math.min(1000, Math.max(1, Number(arg('sessions') ?? 200)));
  const root = resolve(arg('root') ?? HERE);
  const r = await runStdioSessions(root, sessions);
  process.stdout.write(`${JSON.stringify(r, null, 2)}\n`);
}
