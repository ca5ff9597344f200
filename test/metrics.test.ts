/**
 * GET /metrics (docs/operations.md#metrics-traces-readiness) against a real gateway, a real
 * Streamable HTTP upstream (counting-server) and real SQLite: the counters move with real
 * calls, the route is behind the operator token, and the separate listener serves it alone.
 */
import { request } from 'node:http';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { Gateway } from '../src/gateway/lifecycle/start.js';
import { type CountingServer, startCountingServer } from './fixtures/counting-server.js';
import {
  cleanup,
  freePort,
  rest,
  rpc,
  startInProcess,
  type TestConfig,
  writeConfig,
} from './harness/gateway.js';

const OP = 'metrics-operator-token';

/** One sample's value from the exposition text; 0 when the series is absent. */
function sample(text: string, name: string, labels: Record<string, string> = {}): number {
  for (const line of text.split('\n')) {
    if (line.startsWith('#') || !line.startsWith(name)) continue;
    const m = /^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{(.*)\})? (\S+)$/.exec(line);
    if (!m || m[1] !== name) continue;
    const got = Object.fromEntries(
      [...(m[3] ?? '').matchAll(/([a-zA-Z_]+)="((?:[^"\\]|\\.)*)"/g)].map((x) => [x[1], x[2]]),
    );
    if (Object.entries(labels).every(([k, v]) => got[k] === v)) return Number(m[4]);
  }
  return 0;
}

async function scrape(url: string, token: string | null = OP) {
  const r = await fetch(`${url}/metrics`, { headers: token ? { authorization: `Bearer ${token}` } : {} });
  return { status: r.status, type: r.headers.get('content-type'), text: await r.text() };
}

/** A GET with the given Host/Origin headers (fetch() will not send a forged Host: node:http does). */
function getWith(
  base: string,
  path: string,
  headers: Record<string, string>,
): Promise<{ status: number; text: string }> {
  const u = new URL(base);
  return new Promise((resolve, reject) => {
    const req = request({ host: u.hostname, port: u.port, path, method: 'GET', headers }, (res) => {
      let text = '';
      res.on('data', (c) => {
        text += c;
      });
      res.on('end', () => resolve({ status: res.statusCode ?? 0, text }));
    });
    req.on('error', reject);
    req.end();
  });
}

const call = (url: string, id: number, name: string, args: Record<string, unknown>) =>
  rpc(url, 'alice-token', { jsonrpc: '2.0', id, method: 'tools/call', params: { name, arguments: args } });

describe('metrics on the main listener (operator token)', () => {
  let up: CountingServer;
  let cfg: TestConfig;
  let gw: Gateway;
  beforeAll(async () => {
    up = await startCountingServer();
    cfg = await writeConfig({
      upstreams: [{ name: 'counting', transport: 'http', url: up.url }],
      operators: [{ operator_id: 'root', token: OP }],
    });
    gw = await startInProcess(cfg);
  });
  afterAll(async () => {
    await gw?.close();
    await up?.close();
    cleanup(cfg.dir);
  });

  it('refuses a scrape without the operator token, and with an agent token', async () => {
    const none = await scrape(gw.url, null);
    expect(none.status).toBe(401);
    expect(JSON.parse(none.text).error.error_code).toBe('OPERATOR_UNAUTHENTICATED');
    expect(none.text).not.toContain('cmcp_calls_total');
    const agent = await scrape(gw.url, 'alice-token');
    expect(agent.status).toBe(401);
    // The refusal is recorded like any operator-route misuse.
    const refusals = gw.chain.entries('gateway').filter((e) => e.error_code === 'OPERATOR_UNAUTHENTICATED');
    expect(refusals.length).toBeGreaterThanOrEqual(2);
  });

  it('counts a completed call, a refused call and an open session; no argument value appears', async () => {
    const before = await scrape(gw.url);
    expect(before.status).toBe(200);
    expect(before.type).toMatch(/^text\/plain; version=0\.0\.4/);
    const done = { method: 'tools/call', upstream: 'counting', disposition: 'completed' };
    const refusedUnknown = { method: 'tools/call', upstream: 'none', disposition: 'refused' };

    const ok = await call(gw.url, 1, 'counting.record', { a: 'secret-argument-value-1234' });
    expect(ok.body.result).toBeDefined();
    expect(up.invocations).toHaveLength(1);
    const bad = await call(gw.url, 2, 'counting.no_such_tool', {});
    expect(bad.body.error.data.error_code).toBe('UNKNOWN_TOOL');
    const session = await rest(gw.url, 'alice-token', 'POST', '/sessions', {});
    expect(session.status).toBe(201);

    const after = await scrape(gw.url);
    const t0 = before.text;
    const t1 = after.text;
    expect(sample(t1, 'cmcp_calls_total', done) - sample(t0, 'cmcp_calls_total', done)).toBe(1);
    expect(
      sample(t1, 'cmcp_calls_total', refusedUnknown) - sample(t0, 'cmcp_calls_total', refusedUnknown),
    ).toBe(1);
    expect(
      sample(t1, 'cmcp_refusals_total', { code: 'UNKNOWN_TOOL' }) -
        sample(t0, 'cmcp_refusals_total', { code: 'UNKNOWN_TOOL' }),
    ).toBe(1);
    expect(
      sample(t1, 'cmcp_mcp_requests_total', { method: 'tools/call' }) -
        sample(t0, 'cmcp_mcp_requests_total', { method: 'tools/call' }),
    ).toBe(2);
    // Latency histograms: one total per call, one upstream round trip, a commit per terminal entry.
    const count = (t: string, n: string, l: Record<string, string> = {}) => sample(t, `${n}_count`, l);
    expect(
      count(t1, 'cmcp_call_duration_seconds', { disposition: 'completed' }) -
        count(t0, 'cmcp_call_duration_seconds', { disposition: 'completed' }),
    ).toBe(1);
    expect(
      count(t1, 'cmcp_upstream_duration_seconds', { upstream: 'counting' }) -
        count(t0, 'cmcp_upstream_duration_seconds', { upstream: 'counting' }),
    ).toBe(1);
    expect(
      count(t1, 'cmcp_audit_commit_duration_seconds') - count(t0, 'cmcp_audit_commit_duration_seconds'),
    ).toBe(2);
    expect(sample(t1, 'cmcp_upstream_duration_seconds_sum', { upstream: 'counting' })).toBeGreaterThan(0);
    // Open sessions: the default session of the first call and the named one, from the database.
    const open = gw.db.prepare("SELECT count(*) AS n FROM sessions WHERE status = 'open'").get() as {
      n: number;
    };
    expect(open.n).toBeGreaterThanOrEqual(2);
    expect(sample(t1, 'cmcp_open_sessions')).toBe(open.n);
    expect(sample(t1, 'cmcp_open_sessions') - sample(t0, 'cmcp_open_sessions')).toBeGreaterThanOrEqual(1);
    // Execution states are always exported; the WAL is a real file under load.
    expect(t1).toMatch(/^cmcp_executions\{state="in_flight"\} 0$/m);
    expect(sample(t1, 'cmcp_sqlite_wal_bytes')).toBeGreaterThan(0);
    expect(t1).toMatch(/^nodejs_eventloop_lag_seconds \d/m);
    expect(t1).toContain('cmcp_attestation_binding_failures_total');
    // Nothing the agent sent, nor its token, reaches the exposition.
    expect(t1).not.toContain('secret-argument-value-1234');
    expect(t1).not.toContain('alice-token');
    expect(t1).not.toContain('no_such_tool');
  });

  it('counts every refusal by code, whether or not the aggregated record writes an entry for it', async () => {
    const before = (await scrape(gw.url)).text;
    // Three unauthenticated scrapes: one request_refused entry for the window, three counted.
    for (let i = 0; i < 3; i++) expect((await scrape(gw.url, null)).status).toBe(401);
    // An MCP envelope refusal, a relayed method's refusal, a DNS-rebinding refusal.
    const batch = await rpc(gw.url, 'alice-token', [{ jsonrpc: '2.0', id: 1, method: 'ping' }]);
    expect(batch.body.error.data.error_code).toBe('BATCH_NOT_SUPPORTED');
    const read = await rpc(gw.url, 'alice-token', {
      jsonrpc: '2.0',
      id: 2,
      method: 'resources/read',
      params: { uri: 'nowhere://nothing' },
    });
    const readCode = read.body.error.data.error_code as string;
    expect(readCode).toMatch(/^[A-Z_]+$/);
    const host = await getWith(gw.url, '/healthz', { host: 'rebound.example' });
    expect(host.status).toBe(403);
    const after = (await scrape(gw.url)).text;
    const counted = (code: string) =>
      sample(after, 'cmcp_refusals_total', { code }) - sample(before, 'cmcp_refusals_total', { code });
    expect(counted('OPERATOR_UNAUTHENTICATED')).toBe(3);
    expect(counted('BATCH_NOT_SUPPORTED')).toBe(1);
    expect(counted(readCode)).toBe(1);
    expect(counted('HOST_NOT_ALLOWED')).toBe(1);
  });

  it('counts an execution by state and a session binding failure by provider', async () => {
    const before = await scrape(gw.url);
    const r = await rpc(gw.url, 'alice-token', {
      jsonrpc: '2.0',
      id: 3,
      method: 'tools/call',
      params: { name: 'counting.record', arguments: {}, _cmcp: { execution_id: 'metrics-exec-1' } },
    });
    expect(r.body.result).toBeDefined();
    const after = await scrape(gw.url);
    expect(
      sample(after.text, 'cmcp_executions', { state: 'completed' }) -
        sample(before.text, 'cmcp_executions', { state: 'completed' }),
    ).toBe(1);
    // The software provider produces no evidence: every new session's binding fails.
    await rest(gw.url, 'alice-token', 'POST', '/sessions', {});
    const later = await scrape(gw.url);
    expect(
      sample(later.text, 'cmcp_attestation_binding_failures_total', { provider: 'software' }) -
        sample(after.text, 'cmcp_attestation_binding_failures_total', { provider: 'software' }),
    ).toBe(1);
  });
});

describe('metrics on a listener of their own', () => {
  it('serves /metrics there without a token, and not on the main listener', async () => {
    const port = await freePort();
    const cfg = await writeConfig({ extra: { metrics: { listen: { host: '127.0.0.1', port } } } });
    const gw = await startInProcess(cfg);
    try {
      expect(gw.metricsUrl).toBe(`http://127.0.0.1:${port}`);
      const r = await scrape(gw.metricsUrl as string, null);
      expect(r.status).toBe(200);
      expect(r.text).toContain('# TYPE cmcp_calls_total counter');
      // The main listener has no /metrics route then (the agent routes' not-found answers).
      const main = await scrape(gw.url);
      expect(main.status).not.toBe(200);
      expect(main.text).not.toContain('cmcp_calls_total');
    } finally {
      await gw.close();
      cleanup(cfg.dir);
    }
    // Closed with the gateway.
    await expect(fetch(`http://127.0.0.1:${port}/metrics`)).rejects.toThrow();
  });

  it('applies the Host/Origin check there: a rebinding page gets 403 HOST_NOT_ALLOWED, on the record', async () => {
    const port = await freePort();
    const cfg = await writeConfig({ extra: { metrics: { listen: { host: '127.0.0.1', port } } } });
    const gw = await startInProcess(cfg);
    try {
      const base = gw.metricsUrl as string;
      const ok = await getWith(base, '/metrics', { host: `127.0.0.1:${port}` });
      expect(ok.status).toBe(200);
      expect(ok.text).toContain('cmcp_calls_total');
      const rebinding: Record<string, string>[] = [
        { host: `rebound.example:${port}` },
        { host: `localhost:${port}`, origin: 'http://rebound.example' },
      ];
      for (const headers of rebinding) {
        const r = await getWith(base, '/metrics', headers);
        expect(r.status).toBe(403);
        expect(JSON.parse(r.text).error.error_code).toBe('HOST_NOT_ALLOWED');
        expect(r.text).not.toContain('cmcp_calls_total');
      }
      await new Promise((r) => setTimeout(r, 50)); // the refusal's entry is written awaited
      const refused = gw.chain
        .entries('gateway')
        .filter((e) => e.entry_type === 'request_refused' && e.error_code === 'HOST_NOT_ALLOWED');
      expect(refused.length).toBeGreaterThanOrEqual(1);
      expect(JSON.stringify(refused[0]?.detail)).toContain('GET /metrics');
    } finally {
      await gw.close();
      cleanup(cfg.dir);
    }
  });

  it('refuses a metrics listener beyond loopback unless allowed, and metrics can be turned off', async () => {
    const cfg = await writeConfig({ extra: { metrics: { listen: { host: '0.0.0.0', port: 9464 } } } });
    await expect(startInProcess(cfg)).rejects.toThrow(
      /metrics\.listen\.host: the metrics listener has no authentication/,
    );
    cleanup(cfg.dir);
    const off = await writeConfig({
      operators: [{ operator_id: 'root', token: OP }],
      extra: { metrics: { enabled: false } },
    });
    const gw = await startInProcess(off);
    try {
      const r = await scrape(gw.url);
      expect(r.status).not.toBe(200);
      expect(r.text).not.toContain('cmcp_calls_total');
    } finally {
      await gw.close();
      cleanup(off.dir);
    }
  });
});
