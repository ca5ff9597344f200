/**
 * The processes of bench/relayed-progress.ts: the fixtures (./progress-fixtures.ts) and a
 * gateway (`cmcp start` from a checkout's dist/), each on 127.0.0.1, the CPU time a process
 * has run (Linux /proc/<pid>/schedstat) and the TCP data segments its sockets carried (`ss`).
 */
import { type ChildProcess, execFileSync, spawn } from 'node:child_process';
import { openSync, readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { stringify } from 'yaml';
import { freePort, stopProc, waitHttp } from './compare/subjects.js';
import { REPO_ROOT } from './load/profile.js';

/** ./progress-fixtures.ts in its own process: the SSE and the JSON fixture's URLs. */
export async function startFixtures(): Promise<{ proc: ChildProcess; sse: string; json: string }> {
  const proc = spawn(process.execPath, [join(REPO_ROOT, 'dist', 'bench', 'progress-fixtures.js')], {
    stdio: ['pipe', 'pipe', 'inherit'],
  });
  const line = await new Promise<string>((ok, fail) => {
    let out = '';
    const t = setTimeout(() => fail(new Error('the fixtures did not start in 30 s')), 30_000);
    proc.once('exit', (c) => fail(new Error(`the fixtures exited ${c}`)));
    proc.stdout?.on('data', (d) => {
      out += d;
      const nl = out.indexOf('\n');
      if (nl >= 0) {
        clearTimeout(t);
        ok(out.slice(0, nl));
      }
    });
  });
  proc.removeAllListeners('exit');
  return { proc, ...(JSON.parse(line) as { sse: string; json: string }) };
}

/**
 * `cmcp start` in its own process with upstreams `s` (SSE fixture) and `j` (JSON fixture): dev
 * mode, software attestation, log level info, the per-agent limits out of the way.
 * @param root the checkout whose dist/ runs (another build: an A/B comparison in one run).
 * @param cpuProfDir start it with `--cpu-prof` (the profile is written there at exit).
 */
export async function startGatewayProcess(
  dir: string,
  name: string,
  upstreams: { sse: string; json: string },
  root = REPO_ROOT,
  cpuProfDir?: string,
): Promise<{ proc: ChildProcess; url: string }> {
  const port = await freePort();
  const file = join(dir, `${name}.yaml`);
  writeFileSync(
    file,
    stringify({
      dev_mode: true,
      listen: { host: '127.0.0.1', port },
      database: join(dir, `${name}.db`),
      attestation: { provider: 'software' },
      upstreams: [
        { name: 's', transport: 'http', url: upstreams.sse },
        { name: 'j', transport: 'http', url: upstreams.json },
      ],
      sessions: { default_max_calls: 1_000_000 },
      limits: {
        agent_requests_per_s: 1_000_000,
        agent_request_burst: 1_000_000,
        agent_max_in_flight: 100_000,
      },
    }),
  );
  const log = join(dir, `${name}.log`);
  const fd = openSync(log, 'a');
  const prof = cpuProfDir ? ['--cpu-prof', '--cpu-prof-dir', cpuProfDir] : [];
  const proc = spawn(
    process.execPath,
    [...prof, join(root, 'dist', 'src', 'cli', 'main.js'), 'start', '--config', file],
    {
      stdio: ['ignore', fd, fd],
      env: { ...process.env, CMCP_LOG_LEVEL: 'info' },
    },
  );
  const url = `http://127.0.0.1:${port}`;
  try {
    await waitHttp(`${url}/healthz`, proc, `cmcp (${name})`, log);
  } catch (e) {
    await stopProc(proc);
    throw new Error(`${(e as Error).message}\n${readFileSync(log, 'utf8').slice(-2000)}`);
  }
  return { proc, url };
}

/** CPU time a process has run, µs (/proc/<pid>/schedstat: ns on a CPU), or null off Linux. */
export function cpuUs(pid: number | undefined): number | null {
  try {
    return Number((readFileSync(`/proc/${pid}/schedstat`, 'utf8').split(' ')[0] as string).trim()) / 1000;
  } catch {
    return null;
  }
}

/**
 * TCP data segments carried so far by the established sockets whose local (`sport`) or remote
 * (`dport`) port is `port`, summed over them: the kernel's tcp_info `data_segs_out` and
 * `data_segs_in` as iproute2's `ss -ti` prints them (segments with payload; pure ACKs are not
 * counted). A socket that closes between two readings takes its counts with it.
 * @returns null without `ss` (not Linux, iproute2 not installed).
 */
export function dataSegments(port: number, side: 'sport' | 'dport'): { out: number; in: number } | null {
  try {
    const text = execFileSync('ss', ['-tinH', 'state', 'established', `( ${side} = :${port} )`], {
      encoding: 'utf8',
      stdio: ['ignore', 'pipe', 'ignore'],
    });
    const sum = (re: RegExp) => [...text.matchAll(re)].reduce((a, m) => a + Number(m[1]), 0);
    return { out: sum(/data_segs_out:(\d+)/g), in: sum(/data_segs_in:(\d+)/g) };
  } catch {
    return null;
  }
}
