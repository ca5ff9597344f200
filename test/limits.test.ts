/**
 * Issue 11 item 6: bounded everything. Per connection: a slow-body client and a slow-header
 * client are cut within their timeouts (408 with their own codes), connections beyond the cap
 * are closed at once. Per agent: request rate, requests in flight and open sessions are each
 * refused with their own code. Every refusal — operator routes included — is in the
 * aggregated refusal record: one entry at once, the rest of its window as one counted entry.
 * Real gateway, real sockets, the real SQLite record. Each test's own time limit is what fails
 * if a socket is held past its timeout.
 */
import { connect, type Socket } from 'node:net';
import Database from 'better-sqlite3';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { Gateway } from '../src/gateway/lifecycle/start.js';
import { type CountingServer, startCountingServer } from './fixtures/counting-server.js';
import {
  cleanup,
  parseConfig,
  rest,
  rpc,
  startInProcess,
  type TestConfig,
  writeConfig,
} from './harness/gateway.js';

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

/** The `request_refused` entries of `code` in a stopped gateway's database, and the refusals they count. */
function refusalRecord(dbPath: string, code: string, agentId: string | null = null) {
  const db = new Database(dbPath, { readonly: true });
  try {
    const rows = db
      .prepare<[string], { canonical: string }>(
        "SELECT canonical FROM audit_entries WHERE chain_id = 'gateway' AND entry_type = 'request_refused' AND json_extract(canonical, '$.error_code') = ? ORDER BY sequence_number",
      )
      .all(code)
      .map((r) => JSON.parse(r.canonical) as { agent_id: string | null; detail: { count: number } })
      .filter((e) => e.agent_id === agentId);
    return { entries: rows.length, refusals: rows.reduce((n, e) => n + e.detail.count, 0) };
  } finally {
    db.close();
  }
}

/** Opens a raw TCP connection to the gateway; resolves once connected. */
function open(url: string): Promise<Socket> {
  const { hostname, port } = new URL(url);
  return new Promise((resolve, reject) => {
    const s = connect(Number(port), hostname, () => resolve(s));
    s.once('error', reject);
  });
}

/** Resolves with everything the server sent once it closed the connection. */
function untilClosed(s: Socket): Promise<string> {
  let got = '';
  s.on('data', (d) => {
    got += d.toString('latin1');
  });
  s.on('error', () => undefined);
  return new Promise((resolve) => s.once('close', () => resolve(got)));
}

describe('the limits section of the config', () => {
  const base = { dev_mode: true, database: 'x.db', attestation: { provider: 'software' } };
  it('has a default for every limit, and refuses a headers timeout longer than the request timeout', () => {
    expect(parseConfig(base).limits).toEqual({
      list_page_size: 100,
      max_request_bytes: 2 * 1024 * 1024,
      max_result_bytes: 2 * 1024 * 1024,
      agent_requests_per_s: 300,
      agent_request_burst: 600,
      agent_max_in_flight: 64,
      agent_max_open_sessions: 256,
      agent_client_sessions_per_min: 60,
      headers_timeout_ms: 10_000,
      request_timeout_ms: 30_000,
      keep_alive_timeout_ms: 5_000,
      max_connections: 1024,
      max_unauthenticated_per_address: 128,
      unauthenticated_timeout_ms: 5_000,
      upstream_notifications_per_s: 100,
      upstream_notification_burst: 500,
      upstream_notification_bytes_per_s: 1024 * 1024,
      upstream_notification_byte_burst: 4 * 1024 * 1024,
    });
    expect(parseConfig({ ...base, limits: { agent_max_in_flight: 8 } }).limits.agent_max_open_sessions).toBe(
      256,
    );
    expect(() =>
      parseConfig({ ...base, limits: { headers_timeout_ms: 60_000, request_timeout_ms: 30_000 } }),
    ).toThrow(/limits\.headers_timeout_ms: must not exceed/);
    expect(() => parseConfig({ ...base, limits: { max_connections: 0 } })).toThrow(/limits\.max_connections/);
  });
});

describe('per-connection limits', () => {
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
          headers_timeout_ms: 1000,
          request_timeout_ms: 2000,
          keep_alive_timeout_ms: 1000,
          max_connections: 40,
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

  it('the timeouts bound receiving a request, not answering it: a call longer than them is answered', async () => {
    const r = await rpc(gw.url, 'alice-token', {
      jsonrpc: '2.0',
      id: 1,
      method: 'tools/call',
      params: { name: 'counting.hold', arguments: { ms: 3000 } },
    });
    expect(r.body.result.content[0].text).toBe('released');
  }, 10_000);

  it('slow-body clients are cut within the request timeout, answered 408 REQUEST_BODY_TIMEOUT', async () => {
    const sockets = await Promise.all(Array.from({ length: 20 }, () => open(gw.url)));
    const closed = sockets.map(untilClosed);
    const drip = setInterval(() => {
      for (const s of sockets) if (!s.destroyed) s.write('x');
    }, 200);
    for (const s of sockets)
      s.write(
        'POST /sessions HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: Bearer alice-token\r\n' +
          'Content-Type: application/json\r\nContent-Length: 100000\r\n\r\n',
      );
    try {
      const answers = await Promise.all(closed);
      for (const a of answers) {
        expect(a).toMatch(/^HTTP\/1\.1 408 /);
        expect(a).toContain('"error_code":"REQUEST_BODY_TIMEOUT"');
      }
    } finally {
      clearInterval(drip);
    }
  }, 8000);

  it('slow-header clients are cut within the headers timeout, answered 408 REQUEST_HEADERS_TIMEOUT', async () => {
    const partial = await open(gw.url);
    const silent = await open(gw.url);
    const [a, b] = [untilClosed(partial), untilClosed(silent)];
    partial.write('POST /mcp HTTP/1.1\r\nHost: 127.0.0.1\r\n');
    const drip = setInterval(() => !partial.destroyed && partial.write('X-Slow: 1\r\n'), 200);
    try {
      expect(await a).toContain('"error_code":"REQUEST_HEADERS_TIMEOUT"');
      // A connection that never sends a byte is cut as well.
      expect(await b).toMatch(/^(HTTP\/1\.1 408 |$)/);
    } finally {
      clearInterval(drip);
    }
  }, 6000);

  it('connections beyond the cap are closed at once; the cap and the timeouts are in the aggregated record', async () => {
    // The cap is reached with 10 authenticated connections (calls held by the upstream) and 30
    // idle ones: unauthenticated connections may fill three quarters of it, no more.
    const calls = Array.from({ length: 10 }, (_, i) =>
      rpc(gw.url, 'alice-token', {
        jsonrpc: '2.0',
        id: i,
        method: 'tools/call',
        params: { name: 'counting.hold', arguments: { marker: `cap${i}` } },
      }),
    );
    while (up.invocations.filter((i) => String(i.args.marker).startsWith('cap')).length < 10) await sleep(20);
    const held = await Promise.all(Array.from({ length: 30 }, () => open(gw.url)));
    const heldClosed = held.map(untilClosed);
    // The 41st to 44th connections: accepted by the kernel, closed by the gateway unanswered.
    for (let i = 0; i < 4; i++) {
      const extra = await open(gw.url);
      expect(await untilClosed(extra)).toBe('');
    }
    up.release();
    for (const r of await Promise.all(calls)) expect(r.body.result.content[0].text).toBe('released');
    // The held ones are cut by the headers timeout, and the gateway serves again.
    await Promise.all(heldClosed);
    expect((await fetch(`${gw.url}/healthz`)).status).toBe(200);
    await gw.close();
    stopped = true;
    expect(refusalRecord(cfg.dbPath, 'CONNECTION_LIMIT_REACHED')).toEqual({ entries: 2, refusals: 4 });
    const body = refusalRecord(cfg.dbPath, 'REQUEST_BODY_TIMEOUT');
    expect(body).toEqual({ entries: 2, refusals: 20 });
    const headers = refusalRecord(cfg.dbPath, 'REQUEST_HEADERS_TIMEOUT');
    expect(headers.entries).toBe(2);
    expect(headers.refusals).toBeGreaterThanOrEqual(32);
  }, 10_000);
});

describe('per-agent limits', () => {
  let cfg: TestConfig;
  let gw: Gateway;
  let up: CountingServer;
  const OP = 'operator-token';
  beforeAll(async () => {
    up = await startCountingServer();
    cfg = await writeConfig({
      agents: [
        { agent_id: 'alice', token: 'alice-token' },
        { agent_id: 'bob', token: 'bob-token' },
        { agent_id: 'carol', token: 'carol-token' },
      ],
      operators: [{ operator_id: 'root', token: OP }],
      upstreams: [{ name: 'counting', transport: 'http', url: up.url }],
      extra: {
        limits: {
          agent_requests_per_s: 2,
          agent_request_burst: 5,
          agent_max_in_flight: 2,
          agent_max_open_sessions: 3,
        },
      },
    });
    gw = await startInProcess(cfg);
  });
  afterAll(async () => {
    await gw?.close();
    await up?.close();
    if (cfg) cleanup(cfg.dir);
  });

  it('request rate: beyond the burst, AGENT_RATE_LIMITED with the JSON-RPC id and Retry-After', async () => {
    const answers = [];
    for (let i = 0; i < 9; i++)
      answers.push(await rpc(gw.url, 'alice-token', { jsonrpc: '2.0', id: i, method: 'ping' }));
    const ok = answers.filter((a) => a.status === 200);
    const refused = answers.filter((a) => a.status === 429);
    expect(ok.length).toBeGreaterThanOrEqual(5);
    expect(refused.length).toBeGreaterThanOrEqual(3);
    for (const r of refused) {
      expect(r.body.error.data.error_code).toBe('AGENT_RATE_LIMITED');
      expect(typeof r.body.id).toBe('number');
      expect(Number(r.headers.get('retry-after'))).toBeGreaterThanOrEqual(1);
    }
    // REST routes too, in their own error format; bob is not affected.
    const s = await rest(gw.url, 'alice-token', 'GET', '/executions/none');
    expect(s.body.error.error_code).toBe('AGENT_RATE_LIMITED');
    expect((await rpc(gw.url, 'bob-token', { jsonrpc: '2.0', id: 1, method: 'ping' })).status).toBe(200);
  });

  it('requests in flight: a third concurrent call is refused with AGENT_TOO_MANY_IN_FLIGHT', async () => {
    const hold = (id: number) =>
      rpc(gw.url, 'bob-token', {
        jsonrpc: '2.0',
        id,
        method: 'tools/call',
        params: { name: 'counting.hold', arguments: { marker: `h${id}` } },
      });
    const held = [hold(1), hold(2)];
    while (up.invocations.filter((i) => i.tool === 'hold').length < 2) await sleep(20);
    const third = await hold(3);
    expect(third.status).toBe(429);
    expect(third.body).toMatchObject({ id: 3, error: { data: { error_code: 'AGENT_TOO_MANY_IN_FLIGHT' } } });
    expect(up.invocations.filter((i) => i.tool === 'hold')).toHaveLength(2);
    up.release();
    for (const r of await Promise.all(held)) expect(r.body.result.content[0].text).toBe('released');
    // Slots come back when calls end.
    await sleep(600);
    expect((await rpc(gw.url, 'bob-token', { jsonrpc: '2.0', id: 4, method: 'ping' })).status).toBe(200);
  });

  it('open sessions: beyond the limit, AGENT_TOO_MANY_SESSIONS; closing one makes room', async () => {
    const ids: string[] = [];
    for (let i = 0; i < 3; i++) {
      const s = await rest(gw.url, 'carol-token', 'POST', '/sessions', {});
      expect(s.status).toBe(201);
      ids.push(s.body.session_id);
    }
    const over = await rest(gw.url, 'carol-token', 'POST', '/sessions', {});
    expect(over.status).toBe(429);
    expect(over.body.error.error_code).toBe('AGENT_TOO_MANY_SESSIONS');
    expect((await rest(gw.url, 'carol-token', 'POST', `/sessions/${ids[0]}/close`, {})).status).toBe(200);
    await sleep(600); // carol's rate: 2 per second after a burst of 5
    expect((await rest(gw.url, 'carol-token', 'POST', '/sessions', {})).status).toBe(201);
  });

  it('each refusal is recorded once in the aggregated record, operator routes included', async () => {
    for (let i = 0; i < 6; i++)
      expect((await rest(gw.url, null, 'GET', '/operator/status')).status).toBe(401);
    for (let i = 0; i < 3; i++)
      expect((await rest(gw.url, 'bob-token', 'GET', '/operator/status')).status).toBe(401);
    const carolOver = await rest(gw.url, 'carol-token', 'POST', '/sessions', {});
    expect(carolOver.body.error.error_code).toMatch(/^AGENT_TOO_MANY_SESSIONS|AGENT_RATE_LIMITED$/);
    await gw.close();
    // Unauthenticated operator requests: one entry at once, one counted entry for the rest.
    expect(refusalRecord(cfg.dbPath, 'OPERATOR_UNAUTHENTICATED')).toEqual({ entries: 2, refusals: 6 });
    expect(refusalRecord(cfg.dbPath, 'OPERATOR_UNAUTHENTICATED', 'bob')).toEqual({ entries: 2, refusals: 3 });
    const rate = refusalRecord(cfg.dbPath, 'AGENT_RATE_LIMITED', 'alice');
    expect(rate.entries).toBe(2);
    expect(rate.refusals).toBeGreaterThanOrEqual(4);
    expect(refusalRecord(cfg.dbPath, 'AGENT_TOO_MANY_IN_FLIGHT', 'bob')).toEqual({ entries: 1, refusals: 1 });
    expect(refusalRecord(cfg.dbPath, 'AGENT_TOO_MANY_SESSIONS', 'carol').entries).toBeGreaterThanOrEqual(1);
  });
});
