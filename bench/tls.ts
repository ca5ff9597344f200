/**
 * `npm run bench -- --tls`: what TLS on the agent listener costs (docs/operations.md#tls). Two
 * in-process gateways on one local Streamable HTTP upstream, one plain HTTP and one with a
 * generated TLS 1.3 certificate (software provider: the evidence check runs once per
 * connection at the client, not per call, so it is not in these numbers). Reports the p50 of a
 * `tools/call` at concurrency 1 (interleaved, so drift hits both) and calls/s at concurrency 64
 * over keep-alive connections.
 */
import { createHash } from 'node:crypto';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import pino from 'pino';
import { Agent, fetch } from 'undici';
import { parseConfig } from '../src/config/index.js';
import { type Gateway, startGateway } from '../src/gateway/lifecycle/start.js';
import { stats, upstreamServer } from './execution-id.js';

const TOKEN = 'bench-tls-token';
const fmt = (us: number) => `${(us / 1000).toFixed(3)} ms`;

/**
 * An in-process bench gateway (software provider, dev mode) on the HTTP upstream `upstream` as
 * `b`, with the agent of `token` at full speed; `extra` adds or replaces config sections.
 */
export async function benchGateway(
  dir: string,
  name: string,
  upstream: string,
  token: string,
  extra: Record<string, unknown> = {},
): Promise<Gateway> {
  return startGateway(
    parseConfig({
      dev_mode: true,
      listen: { host: '127.0.0.1', port: 0 },
      database: join(dir, `${name}.db`),
      upstreams: [{ name: 'b', transport: 'http', url: upstream }],
      attestation: { provider: 'software' },
      // An authenticated agent: dev mode's unauthenticated requests would have their keep-alive
      // connections closed after limits.unauthenticated_timeout_ms.
      agents: [{ agent_id: 'bench', token_sha256: createHash('sha256').update(token).digest('hex') }],
      sessions: { default_max_calls: 10_000_000 },
      // One agent at full speed: the per-agent limits would refuse most calls (bench/compare/subjects.ts).
      limits: {
        agent_requests_per_s: 1_000_000,
        agent_request_burst: 1_000_000,
        agent_max_in_flight: 100_000,
      },
      ...extra,
    }),
    pino({ level: 'silent' }),
  );
}

const gateway = (dir: string, name: string, upstream: string, tls: boolean) =>
  benchGateway(
    dir,
    name,
    upstream,
    TOKEN,
    tls ? { tls: { certificate: 'generated', rotation_interval_s: 0 } } : {},
  );

/** One tools/call over `dispatcher`; microseconds. */
async function call(url: string, dispatcher: Agent, i: number): Promise<number> {
  const t0 = process.hrtime.bigint();
  const r = await fetch(`${url}/mcp`, {
    method: 'POST',
    headers: { 'content-type': 'application/json', authorization: `Bearer ${TOKEN}` },
    body: JSON.stringify({
      jsonrpc: '2.0',
      id: i,
      method: 'tools/call',
      params: { name: 'b.noop', arguments: {} },
    }),
    dispatcher,
  });
  const text = await r.text();
  let body: { result?: unknown } = {};
  try {
    body = JSON.parse(text);
  } catch {
    throw new Error(`call failed: ${r.status} ${text.slice(0, 200)}`);
  }
  if (!body.result) throw new Error(`call failed: ${JSON.stringify(body)}`);
  return Number(process.hrtime.bigint() - t0) / 1000;
}

/** Calls per second with `concurrency` callers for `ms`. */
async function throughput(url: string, dispatcher: Agent, concurrency: number, ms: number): Promise<number> {
  let done = 0;
  const end = Date.now() + ms;
  await Promise.all(
    Array.from({ length: concurrency }, async (_, w) => {
      for (let i = 0; Date.now() < end; i++) {
        await call(url, dispatcher, w * 1_000_000 + i).catch((e: Error) => {
          throw new Error(`${url}: ${e.message} ${String((e.cause as Error | undefined)?.message)}`);
        });
        done++;
      }
    }),
  );
  return done / (ms / 1000);
}

/** Runs the section; `n` interleaved pairs at concurrency 1, `ms` per throughput run. */
export async function runTlsBench(n = 1000, ms = 5000): Promise<void> {
  const dir = mkdtempSync(join(tmpdir(), 'cmcp-bench-tls-'));
  const up = await upstreamServer();
  const plain = await gateway(dir, 'plain', up.url, false);
  const tls = await gateway(dir, 'tls', up.url, true);
  // The client trusts the generated certificate without checking its evidence: per-call cost only.
  const agents = {
    plain: new Agent({ connections: 64 }),
    tls: new Agent({ connections: 64, connect: { rejectUnauthorized: false } }),
  };
  try {
    console.log('== TLS on the agent listener: tools/call, plain HTTP against TLS 1.3 ==');
    for (let i = 0; i < 100; i++) {
      await call(plain.url, agents.plain, i);
      await call(tls.url, agents.tls, i);
    }
    const p: number[] = [];
    const t: number[] = [];
    for (let i = 0; i < n; i++) {
      if (i % 2) {
        p.push(await call(plain.url, agents.plain, i));
        t.push(await call(tls.url, agents.tls, i));
      } else {
        t.push(await call(tls.url, agents.tls, i));
        p.push(await call(plain.url, agents.plain, i));
      }
    }
    const sp = stats(p);
    const st = stats(t);
    console.log(`c=1   plain p50 ${fmt(sp.p50)}  p99 ${fmt(sp.p99)}  (n=${sp.n})`);
    console.log(`c=1   TLS   p50 ${fmt(st.p50)}  p99 ${fmt(st.p99)}  (n=${st.n})`);
    console.log(`c=1   added p50 ${fmt(st.p50 - sp.p50)}`);
    const rp = await throughput(plain.url, agents.plain, 64, ms);
    const rt = await throughput(tls.url, agents.tls, 64, ms);
    console.log(
      `c=64  plain ${rp.toFixed(0)} calls/s   TLS ${rt.toFixed(0)} calls/s   (${((rt / rp) * 100).toFixed(0)} %)`,
    );
  } finally {
    await agents.plain.close();
    await agents.tls.close();
    await plain.close();
    await tls.close();
    up.http.closeAllConnections();
    up.http.close();
    rmSync(dir, { recursive: true, force: true });
  }
}
