/**
 * One client cannot starve the others: connections that have not authenticated have their own
 * budget (in total, below the global cap, and per source address), and one that has not
 * authenticated within its deadline is closed. A flood of idle unauthenticated sockets larger
 * than the global cap leaves a real agent (the official SDK client) every call.
 * Real gateway, real sockets on 127.0.0.0/8, the real SQLite record.
 */
import { connect, type Socket } from 'node:net';
import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { StreamableHTTPClientTransport } from '@modelcontextprotocol/sdk/client/streamableHttp.js';
import Database from 'better-sqlite3';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import { addressKey } from '../src/gateway/edge/connections.js';
import type { Gateway } from '../src/gateway/lifecycle/start.js';
import { type CountingServer, startCountingServer } from './fixtures/counting-server.js';
import {
  cleanup,
  parseConfig,
  rpc,
  startInProcess,
  type TestConfig,
  writeConfig,
} from './harness/gateway.js';

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

/** Waits (up to a wide 10 s, for a loaded machine) until `done()` holds, for the closes to arrive. */
async function until(done: () => boolean): Promise<void> {
  for (const t = Date.now(); !done() && Date.now() - t < 10_000; ) await sleep(20);
}

/** Refusals of `code` counted in a stopped gateway's aggregated refusal record. */
function refusals(dbPath: string, code: string): number {
  const db = new Database(dbPath, { readonly: true });
  try {
    return db
      .prepare<[string], { canonical: string }>(
        "SELECT canonical FROM audit_entries WHERE chain_id = 'gateway' AND entry_type = 'request_refused' AND json_extract(canonical, '$.error_code') = ?",
      )
      .all(code)
      .reduce((n, r) => n + (JSON.parse(r.canonical) as { detail: { count: number } }).detail.count, 0);
  } finally {
    db.close();
  }
}

/** A raw TCP connection from `from` (a 127.0.0.x address) that sends nothing; resolves once connected. */
function open(url: string, from = '127.0.0.1'): Promise<Socket> {
  const { port } = new URL(url);
  return new Promise((resolve, reject) => {
    const s = connect({ port: Number(port), host: '127.0.0.1', localAddress: from }, () => resolve(s));
    s.once('error', reject);
  });
}

/** Opens `n` idle sockets from `from`, a bounded number at a time; each one's close is tracked. */
async function flood(url: string, n: number, from = '127.0.0.1') {
  const sockets: Socket[] = [];
  const closed = new Set<Socket>();
  for (let i = 0; i < n; i += 50) {
    const batch = await Promise.all(Array.from({ length: Math.min(50, n - i) }, () => open(url, from)));
    for (const s of batch) {
      s.on('error', () => undefined);
      s.once('close', () => closed.add(s));
      sockets.push(s);
    }
  }
  return { sockets, closed, open: () => sockets.length - closed.size };
}

/** The official SDK client as alice: connects, then makes `calls` tools/calls; returns how many succeeded. */
async function agentCalls(url: string, calls: number): Promise<{ ok: number; errors: string[] }> {
  const client = new Client({ name: 'agent', version: '1.0.0' });
  const transport = new StreamableHTTPClientTransport(new URL(`${url}/mcp`), {
    requestInit: { headers: { authorization: 'Bearer alice-token' } },
  });
  const errors: string[] = [];
  let ok = 0;
  try {
    await client.connect(transport);
  } catch (e) {
    return { ok: 0, errors: [`connect: ${(e as Error).message}`] };
  }
  for (let i = 0; i < calls; i++) {
    try {
      const r = await client.callTool({ name: 'counting.record', arguments: { i } });
      if (!r.isError) ok++;
      else errors.push(JSON.stringify(r.content));
    } catch (e) {
      errors.push((e as Error).message);
    }
  }
  await client.close().catch(() => undefined);
  return { ok, errors };
}

describe('the unauthenticated-connection settings', () => {
  const base = { dev_mode: true, database: 'x.db', attestation: { provider: 'software' } };
  it('default below the global cap, and refuse a budget that leaves no headroom', () => {
    const l = parseConfig(base).limits;
    expect(l.unauthenticated_timeout_ms).toBe(5000);
    expect(l.max_unauthenticated_connections).toBeUndefined(); // three quarters of max_connections
    expect(l.max_unauthenticated_per_address).toBe(128);
    expect(() =>
      parseConfig({ ...base, limits: { max_connections: 100, max_unauthenticated_connections: 100 } }),
    ).toThrow(/limits\.max_unauthenticated_connections: must be below limits\.max_connections/);
  });
});

describe('the per-address key', () => {
  it('is an IPv4 address as is (also IPv4-mapped) and an IPv6 address’s /64', () => {
    expect(addressKey('127.0.0.1')).toBe('127.0.0.1');
    expect(addressKey('::ffff:192.0.2.7')).toBe('192.0.2.7');
    expect(addressKey('::ffff:c000:207')).toBe('192.0.2.7');
    expect(addressKey('2001:db8:1:2:aaaa::1')).toBe('2001:db8:1:2::/64');
    expect(addressKey('2001:0DB8:1:2:ffff:ffff:ffff:ffff')).toBe('2001:db8:1:2::/64');
    expect(addressKey('2001:db8::1')).toBe('2001:db8:0:0::/64');
    expect(addressKey('fe80::1%eth0')).toBe('fe80:0:0:0::/64');
    expect(addressKey('::1')).toBe('0:0:0:0::/64');
    expect(addressKey('64:ff9b::192.0.2.7')).toBe('64:ff9b:0:0::/64');
  });
});

describe('a flood of idle unauthenticated sockets', () => {
  let cfg: TestConfig;
  let gw: Gateway;
  let up: CountingServer;
  let stopped = false;
  const held: Socket[] = [];
  beforeAll(async () => {
    up = await startCountingServer();
    // The default limits, but timeouts long enough that only the budget, not a timeout, frees
    // the flood's sockets while the agent works.
    cfg = await writeConfig({
      upstreams: [{ name: 'counting', transport: 'http', url: up.url }],
      extra: {
        limits: {
          headers_timeout_ms: 60_000,
          request_timeout_ms: 60_000,
          unauthenticated_timeout_ms: 60_000,
        },
      },
    });
    gw = await startInProcess(cfg);
  });
  afterEach(() => {
    for (const s of held.splice(0)) s.destroy();
  });
  afterAll(async () => {
    if (!stopped) await gw?.close();
    await up?.close();
    if (cfg) cleanup(cfg.dir);
  });

  it('1,100 idle sockets (more than max_connections) leave a real agent all of its 25 calls', async () => {
    const f = await flood(gw.url, 1100);
    held.push(...f.sockets);
    const r = await agentCalls(gw.url, 25);
    expect(r.errors).toEqual([]);
    expect(r.ok).toBe(25);
    // One address: held to its own budget (128), its oldest idle sockets closed, not the agent's
    // (each of whose new connections, unauthenticated until its first request, closed one more).
    await until(() => f.open() <= 128);
    expect(f.open()).toBeLessThanOrEqual(128);
    expect(f.open()).toBeGreaterThanOrEqual(118);
    for (const s of f.sockets.slice(-100)) expect(f.closed.has(s)).toBe(false);
  }, 60_000);

  it('the same flood from 11 addresses is held to the total budget, below the cap; the agent keeps its 25 calls', async () => {
    const floods: Awaited<ReturnType<typeof flood>>[] = [];
    for (let a = 1; a <= 11; a++) floods.push(await flood(gw.url, 100, `127.0.1.${a}`));
    for (const f of floods) held.push(...f.sockets);
    const r = await agentCalls(gw.url, 25);
    expect(r.errors).toEqual([]);
    expect(r.ok).toBe(25);
    // At most three quarters of max_connections (768 of 1024) stay open: the oldest were closed.
    const total = () => floods.reduce((n, f) => n + f.open(), 0);
    await until(() => total() <= 768);
    const open = floods.reduce((n, f) => n + f.open(), 0);
    expect(open).toBeLessThanOrEqual(768);
    expect(open).toBeGreaterThanOrEqual(758);
    expect(floods[0]?.open()).toBe(0);
    expect(floods[10]?.open()).toBe(100);
  }, 60_000);

  it('a flood from one address is held to its own budget and does not close another address’s sockets', async () => {
    const a = await flood(gw.url, 300, '127.0.0.2');
    const b = await flood(gw.url, 100, '127.0.0.3');
    held.push(...a.sockets, ...b.sockets);
    // 127.0.0.2 keeps its 128 newest; 127.0.0.3's 100 are all still open.
    await until(() => a.open() <= 128);
    expect(a.open()).toBe(128);
    for (const s of a.sockets.slice(-128)) expect(f(s)).toBe(false);
    expect(b.open()).toBe(100);
    // More from 127.0.0.2 evicts only its own.
    const a2 = await flood(gw.url, 50, '127.0.0.2');
    held.push(...a2.sockets);
    await until(() => a.open() + a2.open() <= 128);
    expect(b.open()).toBe(100);
    expect(a.open() + a2.open()).toBe(128);
    // And an agent from a third address is served.
    const r = await agentCalls(gw.url, 3);
    expect(r.ok).toBe(3);
    function f(s: Socket) {
      return a.closed.has(s);
    }
  }, 60_000);

  it('every eviction is in the aggregated refusal record', async () => {
    await gw.close();
    stopped = true;
    // 1,100 − 128 from one address, 1,100 − 768 from 11, 172 + 50 from 127.0.0.2.
    // (and one for each of the agents' connections accepted at a full budget).
    const evicted = refusals(cfg.dbPath, 'UNAUTHENTICATED_CONNECTION_LIMIT');
    expect(evicted).toBeGreaterThanOrEqual(972 + 332 + 222);
    expect(evicted).toBeLessThanOrEqual(972 + 332 + 222 + 30);
    expect(refusals(cfg.dbPath, 'CONNECTION_LIMIT_REACHED')).toBe(0);
  });
});

describe('the unauthenticated deadline', () => {
  let cfg: TestConfig;
  let gw: Gateway;
  let up: CountingServer;
  let stopped = false;
  beforeAll(async () => {
    up = await startCountingServer();
    cfg = await writeConfig({
      upstreams: [{ name: 'counting', transport: 'http', url: up.url }],
      extra: {
        limits: {
          headers_timeout_ms: 30_000,
          unauthenticated_timeout_ms: 1000,
          keep_alive_timeout_ms: 30_000,
        },
      },
    });
    gw = await startInProcess(cfg);
  });
  afterAll(async () => {
    if (!stopped) await gw?.close();
    await up?.close();
    if (cfg) cleanup(cfg.dir);
  });

  it('closes idle sockets that never sent a request, and keeps an authenticated keep-alive connection', async () => {
    const f = await flood(gw.url, 20);
    // An authenticated keep-alive connection: one request with a token, then idle.
    const agent = await open(gw.url);
    let agentGot = '';
    agent.on('data', (d) => {
      agentGot += d.toString('latin1');
    });
    const body = JSON.stringify({ jsonrpc: '2.0', id: 1, method: 'ping' });
    agent.write(
      'POST /mcp HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: Bearer alice-token\r\n' +
        `Content-Type: application/json\r\nAccept: application/json, text/event-stream\r\nContent-Length: ${body.length}\r\n\r\n${body}`,
    );
    const started = Date.now();
    // Closed by the deadline (1 s), long before the 30 s headers timeout; wide margin for a loaded machine.
    while (f.open() > 0 && Date.now() - started < 15_000) await sleep(50);
    expect(f.open()).toBe(0);
    expect(agentGot).toMatch(/^HTTP\/1\.1 200 /);
    expect(agent.destroyed).toBe(false);
    agent.destroy();
    // The gateway still serves.
    expect((await rpc(gw.url, 'bob-token', { jsonrpc: '2.0', id: 2, method: 'ping' })).status).toBe(200);
  }, 30_000);

  it('a connection that made unauthenticated requests is answered Connection: close after the deadline', async () => {
    const probe = await open(gw.url);
    const closed = new Promise((r) => probe.once('close', r));
    let got = '';
    probe.on('data', (d) => {
      got += d.toString('latin1');
    });
    const get = 'GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n';
    probe.write(get);
    while (!got.includes('"ok"')) await sleep(20);
    expect(got).toMatch(/^HTTP\/1\.1 200 /);
    expect(got).not.toMatch(/connection: close/i);
    // Past the deadline (1 s; wide margin): kept open, not cut under the client, but its next
    // answer closes it.
    await sleep(4000);
    expect(probe.destroyed).toBe(false);
    got = '';
    probe.write(get);
    await closed;
    expect(got).toMatch(/^HTTP\/1\.1 200 /);
    expect(got).toMatch(/connection: close/i);
  }, 30_000);

  it('each closure at the deadline is in the aggregated refusal record', async () => {
    await gw.close();
    stopped = true;
    expect(refusals(cfg.dbPath, 'UNAUTHENTICATED_CONNECTION_TIMEOUT')).toBe(20);
  });
});

/** What each slow socket was answered. */
const got = new WeakMap<Socket, string>();

/**
 * A request whose headers promise `length` body bytes, of which one is sent, from `from`; the
 * socket stays open until the gateway closes it. Resolves once connected and written.
 */
async function slowPost(url: string, from: string, path: string, length: number): Promise<Socket> {
  const s = await open(url, from);
  s.on('error', () => undefined);
  s.on('data', (d: Buffer) => got.set(s, (got.get(s) ?? '') + d.toString('latin1')));
  s.write(
    `POST ${path} HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/x-www-form-urlencoded\r\n` +
      `Content-Length: ${length}\r\n\r\nt`,
  );
  return s;
}

/** 10 slow requests from each of the addresses; each socket's close is tracked. */
async function slowFlood(
  url: string,
  requests: Array<{ from: string; path: string; length: number; trickle?: boolean }>,
) {
  const sockets: Socket[] = [];
  const closed = new Set<Socket>();
  for (const r of requests)
    for (let i = 0; i < 10; i++) {
      const s = await slowPost(url, r.from, r.path, r.length);
      // A trickle sends one more body byte a second, so the socket is never idle for long.
      const t = r.trickle ? setInterval(() => s.write('t'), 1000) : undefined;
      s.once('close', () => {
        clearInterval(t);
        closed.add(s);
      });
      sockets.push(s);
    }
  // Give the gateway a moment to read the headers: every socket is then a request in progress.
  await sleep(300);
  return { sockets, closed, open: () => sockets.length - closed.size };
}

describe('slow unauthenticated requests', () => {
  let cfg: TestConfig;
  let gw: Gateway;
  let up: CountingServer;
  let stopped = false;
  const held: Socket[] = [];
  beforeAll(async () => {
    up = await startCountingServer();
    // 40 connections, so 30 unauthenticated, 10 per address; the default deadline (5 s) and
    // request timeout (30 s).
    cfg = await writeConfig({
      upstreams: [{ name: 'counting', transport: 'http', url: up.url }],
      extra: { limits: { max_connections: 40, max_unauthenticated_per_address: 10 } },
    });
    gw = await startInProcess(cfg);
  });
  afterEach(() => {
    for (const s of held.splice(0)) s.destroy();
  });
  afterAll(async () => {
    if (!stopped) await gw?.close();
    await up?.close();
    if (cfg) cleanup(cfg.dir);
  });

  it('30 login POSTs promising 100,000 body bytes from three addresses leave a real agent its calls', async () => {
    const login = '/operator/ui/login';
    const f = await slowFlood(gw.url, [
      { from: '127.0.2.1', path: login, length: 100_000 },
      { from: '127.0.2.2', path: login, length: 100_000 },
      { from: '127.0.2.3', path: login, length: 100_000 },
    ]);
    held.push(...f.sockets);
    const r = await agentCalls(gw.url, 5);
    expect(r.errors).toEqual([]);
    expect(r.ok).toBe(5);
    // Longer than a login form: refused unread (413) and closed, long before the request timeout.
    await until(() => f.open() === 0);
    expect(f.open()).toBe(0);
    for (const s of f.sockets) expect(got.get(s)).toMatch(/^HTTP\/1\.1 413 [\s\S]*connection: close/i);
  }, 60_000);

  it('30 slow login bodies under the form’s limit leave the agent its calls and are closed at the deadline', async () => {
    const started = Date.now();
    const login = '/operator/ui/login';
    const f = await slowFlood(gw.url, [
      { from: '127.0.3.1', path: login, length: 1000 },
      { from: '127.0.3.2', path: login, length: 1000 },
      { from: '127.0.3.3', path: login, length: 1000 },
    ]);
    held.push(...f.sockets);
    // Every unauthenticated connection busy, none of them new: the oldest busy ones make room.
    await sleep(1500);
    const r = await agentCalls(gw.url, 5);
    expect(r.errors).toEqual([]);
    expect(r.ok).toBe(5);
    // The agent's connections closed the oldest few; the deadline (5 s) closes the rest, long
    // before the request timeout (30 s) would. Wide margin for a loaded machine.
    await until(() => f.open() === 0);
    expect(f.open()).toBe(0);
    expect(Date.now() - started).toBeLessThan(25_000);
  }, 60_000);

  it('trickling bodies of requests refused on their headers (401) are closed at the deadline, not left to drain', async () => {
    const started = Date.now();
    const f = await slowFlood(gw.url, [
      { from: '127.0.4.1', path: '/operator/policy/reload', length: 1000, trickle: true },
    ]);
    held.push(...f.sockets);
    await until(() => f.open() === 0);
    expect(f.open()).toBe(0);
    expect(Date.now() - started).toBeLessThan(25_000);
    for (const s of f.sockets) expect(got.get(s)).toMatch(/^HTTP\/1\.1 401 /);
  }, 60_000);

  it('each closure is in the aggregated refusal record', async () => {
    await gw.close();
    stopped = true;
    const timeouts = refusals(cfg.dbPath, 'UNAUTHENTICATED_CONNECTION_TIMEOUT');
    const evicted = refusals(cfg.dbPath, 'UNAUTHENTICATED_CONNECTION_LIMIT');
    // 30 slow login bodies (a few evicted for the agent's connections), 10 refused ones.
    expect(timeouts + evicted).toBeGreaterThanOrEqual(40);
    expect(timeouts).toBeGreaterThanOrEqual(30);
  });
});
