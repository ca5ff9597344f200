/**
 * Credentials for HTTP upstreams (issue 11 item 5; docs/operations.md#upstream-credentials): a
 * bearer token from an environment variable and an API key from a file reach a real MCP
 * upstream over mutual TLS (test CA; a pinned CA and a pinned server certificate), and appear
 * nowhere else: not in the gateway's log output, the database file, claims, bundles, error
 * bodies, metrics or the exported traces (OTLP/HTTP JSON received on 127.0.0.1).
 */
import { randomUUID } from 'node:crypto';
import { existsSync, mkdtempSync, readFileSync, writeFileSync } from 'node:fs';
import { createServer as createHttpServer } from 'node:http';
import { createServer, type Server } from 'node:https';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import type { TLSSocket } from 'node:tls';
import { McpServer } from '@modelcontextprotocol/sdk/server/mcp.js';
import { StreamableHTTPServerTransport } from '@modelcontextprotocol/sdk/server/streamableHttp.js';
import pino from 'pino';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { loadConfig, parseConfig } from '../src/config/index.js';
import { type Gateway, startGateway } from '../src/gateway/lifecycle/start.js';
import { makeTlsPki, type TlsPki } from '../testing/tls-pki.js';
import { cleanup, rest, rpc, type TestConfig, writeConfig } from './harness/gateway.js';

const TOKEN = `tok-${randomUUID()}`;
const API_KEY = `key-${randomUUID()}`;
const ENV = 'CMCP_TEST_UPSTREAM_TOKEN';
const OP = 'op-token-credentials';

let pki: TlsPki;
let other: TlsPki;
let server: Server;
let url: string;
/** What the upstream saw: requests with the right credentials and a verified client certificate. */
const seen = { good: 0, bad: 0 };
let cfg: TestConfig;
let gw: Gateway;
let logText = '';
const bodies: string[] = [];
/** OTLP/HTTP JSON export bodies the gateway sent. */
const traces: string[] = [];
const otlp = createHttpServer(async (req, res) => {
  const chunks: Buffer[] = [];
  for await (const c of req) chunks.push(c as Buffer);
  traces.push(Buffer.concat(chunks).toString('utf8'));
  res.writeHead(200, { 'content-type': 'application/json' }).end('{}');
});

function mcpServer(): McpServer {
  const s = new McpServer({ name: 'secure', version: '1.0.0' });
  s.registerTool('whoami', { description: 'Says the caller was let in' }, async () => ({
    content: [{ type: 'text', text: 'authorized caller' }],
  }));
  return s;
}

function upstreams(keyFile: string, certs: TlsPki) {
  const headers = {
    Authorization: { env: ENV, prefix: 'Bearer ' },
    'X-Api-Key': { file: keyFile },
  };
  const client = { client_cert: certs.client.certPath, client_key: certs.client.keyPath };
  return [
    { name: 'secure', transport: 'http', url, headers, tls: { ca: certs.ca.certPath, ...client } },
    {
      name: 'pinned',
      transport: 'http',
      url,
      headers,
      tls: { server_cert: certs.server.certPath, ...client },
    },
    // Pinned to another certificate: the connection is refused before any header leaves.
    {
      name: 'wrongpin',
      transport: 'http',
      url,
      headers,
      tls: { server_cert: other.server.certPath, ca: certs.ca.certPath, ...client },
    },
  ];
}

beforeAll(async () => {
  const dir = mkdtempSync(join(tmpdir(), 'cmcp-upcred-'));
  pki = await makeTlsPki(dir);
  other = await makeTlsPki(mkdtempSync(join(tmpdir(), 'cmcp-upcred-other-')), 'another CA');
  server = createServer(
    {
      cert: pki.server.cert,
      key: pki.server.key,
      ca: pki.ca.cert,
      requestCert: true,
      rejectUnauthorized: true,
    },
    async (req, res) => {
      const ok =
        (req.socket as TLSSocket).authorized &&
        req.headers.authorization === `Bearer ${TOKEN}` &&
        req.headers['x-api-key'] === API_KEY;
      if (!ok) {
        seen.bad++;
        res.writeHead(401, { 'content-type': 'application/json' }).end('{"error":"unauthorized"}');
        return;
      }
      seen.good++;
      if (req.method !== 'POST') {
        res.writeHead(405).end();
        return;
      }
      const s = mcpServer();
      const t = new StreamableHTTPServerTransport({
        sessionIdGenerator: undefined,
        enableJsonResponse: true,
      });
      res.on('close', () => {
        void t.close();
        void s.close();
      });
      await s.connect(t);
      await t.handleRequest(req, res);
    },
  );
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
  url = `https://127.0.0.1:${(server.address() as { port: number }).port}/mcp`;
  const keyFile = join(dir, 'api-key');
  writeFileSync(keyFile, `${API_KEY}\n`, { mode: 0o600 });
  process.env[ENV] = TOKEN;
  await new Promise<void>((r) => otlp.listen(0, '127.0.0.1', r));
  const otlpUrl = `http://127.0.0.1:${(otlp.address() as { port: number }).port}/v1/traces`;
  cfg = await writeConfig({
    dir,
    upstreams: upstreams(keyFile, pki),
    operators: [{ operator_id: 'root', token: OP }],
    extra: { tracing: { enabled: true, otlp_endpoint: otlpUrl } },
  });
  const log = pino(
    { level: 'trace' },
    {
      write: (s: string) => {
        logText += s;
      },
    },
  );
  gw = await startGateway(loadConfig(cfg.file), log);
}, 60_000);

afterAll(async () => {
  await gw?.close();
  await new Promise((r) => server?.close(r));
  await new Promise((r) => otlp.close(r));
  delete process.env[ENV];
  if (cfg) cleanup(cfg.dir);
});

const call = async (name: string, session?: string) => {
  const r = await rpc(gw.url, 'alice-token', {
    jsonrpc: '2.0',
    id: 1,
    method: 'tools/call',
    params: { name, arguments: {}, ...(session ? { _cmcp: { session_id: session } } : {}) },
  });
  bodies.push(r.text);
  return r;
};

describe('HTTP upstream credentials', () => {
  it('the bearer token and the API key reach the upstream over mutual TLS (pinned CA, pinned certificate)', async () => {
    const s = await rest(gw.url, 'alice-token', 'POST', '/sessions', {});
    bodies.push(JSON.stringify(s.body));
    for (const name of ['secure.whoami', 'pinned.whoami']) {
      const r = await call(name, s.body.session_id);
      expect(r.body.result.content[0].text).toBe('authorized caller');
    }
    expect(seen.good).toBeGreaterThan(0);
    expect(seen.bad).toBe(0);
    const wrong = await call('wrongpin.whoami', s.body.session_id);
    expect(wrong.body.error.data.error_code).toMatch(/^UPSTREAM_(OFFLINE|UNAVAILABLE)$/);
    expect(seen.bad).toBe(0); // refused at the TLS handshake: nothing reached the server
    const unknown = await call('nope.whoami', s.body.session_id);
    expect(unknown.body.error).toBeDefined();
    const closed = await rest(gw.url, 'alice-token', 'POST', `/sessions/${s.body.session_id}/close`, {});
    bodies.push(JSON.stringify(closed.body));
    const bundle = await rest(gw.url, 'alice-token', 'GET', `/sessions/${s.body.session_id}/audit`);
    bodies.push(JSON.stringify(bundle.body));
    const metrics = await fetch(`${gw.url}/metrics`, { headers: { authorization: `Bearer ${OP}` } });
    expect(metrics.status).toBe(200);
    bodies.push(await metrics.text());
    const ops = await rest(gw.url, OP, 'GET', '/operator/status');
    bodies.push(JSON.stringify(ops.body));
  });

  it('the secrets appear nowhere else: log output, database file, claim, bundle, error bodies, metrics, traces', async () => {
    await gw.close(); // flushes the trace exporter and the database
    expect(traces.join('')).toContain('cmcp.tools_call'); // the spans were exported
    expect(logText).toContain('wrongpin'); // the log did record the failed upstream
    const db = [cfg.dbPath, `${cfg.dbPath}-wal`]
      .filter(existsSync)
      .map((f) => readFileSync(f).toString('latin1'))
      .join('');
    expect(db).toContain('secure.whoami'); // the database did record the calls
    for (const secret of [TOKEN, API_KEY]) {
      expect(logText).not.toContain(secret);
      expect(db).not.toContain(secret);
      for (const b of [...bodies, ...traces]) expect(b).not.toContain(secret);
    }
  });
});

describe('credential configuration', () => {
  it('a missing variable refuses the start, naming the variable and never a value', async () => {
    const c = loadConfig(cfg.file);
    delete process.env[ENV];
    try {
      await expect(
        startGateway({ ...c, listen: { host: '127.0.0.1', port: 0 } }, pino({ level: 'silent' })),
      ).rejects.toMatchObject({
        code: 'UPSTREAM_CREDENTIAL_UNAVAILABLE',
        message: expect.stringContaining(ENV),
      });
    } finally {
      process.env[ENV] = TOKEN;
    }
  });

  it('refuses credentials over plain http to a remote host, reserved headers, and a client cert without its key', () => {
    const base = { database: '/tmp/x.db', attestation: { provider: 'tpm', tcti: 'x' }, agents: [] };
    const up = (u: Record<string, unknown>) =>
      parseConfig({
        ...base,
        oauth: undefined,
        agents: [{ agent_id: 'a', token_sha256: 'a'.repeat(64) }],
        upstreams: [{ name: 'u', transport: 'http', ...u }],
      });
    expect(() => up({ url: 'http://example.com/mcp', headers: { Authorization: { env: 'X' } } })).toThrow(
      /only over https/,
    );
    expect(() =>
      up({ url: 'http://127.0.0.1:1/mcp', headers: { Authorization: { env: 'X' } } }),
    ).not.toThrow();
    expect(() => up({ url: 'https://example.com/mcp', headers: { 'Mcp-Session-Id': { env: 'X' } } })).toThrow(
      /set by the gateway/,
    );
    expect(() =>
      up({ url: 'https://example.com/mcp', headers: { Authorization: 'Bearer literal' } }),
    ).toThrow(/headers/);
    expect(() => up({ url: 'https://example.com/mcp', tls: { client_cert: 'c.pem' } })).toThrow(
      /go together/,
    );
    expect(() => up({ url: 'http://127.0.0.1:1/mcp', tls: { ca: 'ca.pem' } })).toThrow(/needs an https/);
  });
});
