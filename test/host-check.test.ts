/**
 * DNS-rebinding protection on a real gateway (docs/operations.md#allowed-hosts): a Host or
 * Origin naming no allowed host is refused with 403 before authentication — on a dev-mode
 * gateway (no token needed) and on one with tokens — on every route, and the refusals are on
 * the record as one aggregated `request_refused` entry per window.
 */
import { request } from 'node:http';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { Gateway } from '../src/gateway/lifecycle/start.js';
import { cleanup, startInProcess, type TestConfig, writeConfig } from './harness/gateway.js';

/** fetch() will not send a forged Host header: node:http does. */
function send(
  base: string,
  path: string,
  headers: Record<string, string>,
  method = 'POST',
  body: unknown = { jsonrpc: '2.0', id: 1, method: 'ping' },
): Promise<{ status: number; body: string }> {
  const u = new URL(base);
  return new Promise((resolve, reject) => {
    const data = method === 'POST' ? JSON.stringify(body) : undefined;
    const req = request(
      {
        host: u.hostname,
        port: u.port,
        path,
        method,
        headers: {
          ...(data ? { 'content-type': 'application/json', 'content-length': Buffer.byteLength(data) } : {}),
          accept: 'application/json, text/event-stream',
          ...headers,
        },
      },
      (res) => {
        let text = '';
        res.on('data', (c) => {
          text += c;
        });
        res.on('end', () => resolve({ status: res.statusCode ?? 0, body: text }));
      },
    );
    req.on('error', reject);
    req.end(data);
  });
}

describe('a dev-mode gateway (no token needed)', () => {
  let cfg: TestConfig;
  let gw: Gateway;
  let own: string;
  beforeAll(async () => {
    cfg = await writeConfig({ dev_mode: true, agents: [] });
    gw = await startInProcess(cfg);
    own = new URL(gw.url).host;
  });
  afterAll(async () => {
    await gw?.close();
    cleanup(cfg.dir);
  });

  it('answers its own address and the loopback names', async () => {
    const port = new URL(gw.url).port;
    for (const host of [own, `localhost:${port}`, `LOCALHOST:${port}`, `[::1]:${port}`, '127.0.0.1']) {
      const r = await send(gw.url, '/mcp', { host, origin: `http://${host}` });
      expect(r.status, host).toBe(200);
      expect(JSON.parse(r.body).result).toEqual({});
    }
  });

  it('a rebound Host is refused with 403 before anything runs, on every route', async () => {
    for (const host of [
      'evil.example.com',
      `evil.example.com:${new URL(gw.url).port}`,
      'evil@127.0.0.1',
      '127.0.0.1.evil.example',
    ]) {
      const r = await send(gw.url, '/mcp', { host });
      expect(r.status, host).toBe(403);
      expect(JSON.parse(r.body).error.data.error_code).toBe('HOST_NOT_ALLOWED');
    }
    const rest = await send(gw.url, '/sessions', { host: 'evil.example.com' }, 'POST', {});
    expect(rest.status).toBe(403);
    expect(JSON.parse(rest.body).error.error_code).toBe('HOST_NOT_ALLOWED');
    for (const path of ['/healthz', '/operator/status', '/mcp', '/no-such-route'])
      expect((await send(gw.url, path, { host: 'evil.example.com' }, 'GET')).status, path).toBe(403);
    // The rebound page drove nothing: no session was opened.
    expect(gw.chain.entries('gateway').some((e) => e.entry_type === 'session_open')).toBe(false);
  });

  it('a foreign Origin is refused even with a good Host (the browser sends the page origin)', async () => {
    for (const origin of ['http://evil.example.com', 'file://', 'http://127.0.0.1.evil.example:80', 'x']) {
      const r = await send(gw.url, '/mcp', { host: own, origin });
      expect(r.status, origin).toBe(403);
      expect(JSON.parse(r.body).error.data.error_code).toBe('HOST_NOT_ALLOWED');
    }
  });

  it('Origin: null (a browser withholding it) names no host: the Host decides', async () => {
    expect((await send(gw.url, '/mcp', { host: own, origin: 'null' })).status).toBe(200);
    const rebound = await send(gw.url, '/mcp', { host: 'evil.example.com', origin: 'null' });
    expect(rebound.status).toBe(403);
  });

  it('refusals are recorded: the first at once, the rest of the window as one counted entry', async () => {
    const before = gw.chain.entries('gateway').filter((e) => e.error_code === 'HOST_NOT_ALLOWED');
    expect(before.length).toBeGreaterThanOrEqual(1);
    expect(before[0]?.detail).toMatchObject({ count: 1 });
    await gw.close(); // flushes the open window
    const { openDatabase } = await import('../src/store/sqlite/db.js');
    const { AuditChain } = await import('../src/store/sqlite/chain.js');
    const db = openDatabase(cfg.dbPath);
    const after = new AuditChain(db).entries('gateway').filter((e) => e.error_code === 'HOST_NOT_ALLOWED');
    db.close();
    expect(after.length).toBe(2);
    // 4 + 1 + 4 + 4 + 1 refused in the tests above; the first was recorded alone.
    expect(after[1]?.detail).toMatchObject({ count: 13 });
    expect((after[1]?.detail as { routes?: string[] } | undefined)?.routes).toContain('POST /mcp');
  });
});

describe('a gateway with tokens and configured allowed hosts', () => {
  let cfg: TestConfig;
  let gw: Gateway;
  beforeAll(async () => {
    cfg = await writeConfig({ attestation: { provider: 'software' } });
    (cfg.raw.listen as Record<string, unknown>).allowed_hosts = ['gw.example.test', '127.0.0.1'];
    const { writeFileSync } = await import('node:fs');
    const { stringify } = await import('yaml');
    writeFileSync(cfg.file, stringify(cfg.raw));
    gw = await startInProcess(cfg);
  });
  afterAll(async () => {
    await gw?.close();
    cleanup(cfg.dir);
  });

  it('403 comes before authentication: a valid token on a rebound Host is still refused, not served', async () => {
    const r = await send(gw.url, '/mcp', { host: 'evil.example.com', authorization: 'Bearer alice-token' });
    expect(r.status).toBe(403);
    const noToken = await send(gw.url, '/mcp', { host: 'evil.example.com' });
    expect(noToken.status).toBe(403);
    // No 401 was recorded for it: the request never reached authentication.
    expect(gw.chain.entries('gateway').some((e) => e.error_code === 'UNAUTHENTICATED')).toBe(false);
  });

  it('the configured list replaces the default: its names pass, localhost does not', async () => {
    const ok = await send(gw.url, '/mcp', {
      host: 'gw.example.test:443',
      origin: 'https://gw.example.test',
      authorization: 'Bearer alice-token',
    });
    expect(ok.status).toBe(200);
    const local = await send(gw.url, '/mcp', { host: 'localhost', authorization: 'Bearer alice-token' });
    expect(local.status).toBe(403);
  });

  it('a config entry that is not a host name is refused at load, naming the field', async () => {
    const { parseConfig } = await import('./harness/gateway.js');
    expect(() =>
      parseConfig(
        { ...cfg.raw, listen: { host: '127.0.0.1', port: 0, allowed_hosts: ['http://x/'] } },
        'x.yaml',
      ),
    ).toThrow(/listen\.allowed_hosts\[0\]/);
  });
});
