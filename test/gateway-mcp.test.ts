/**
 * The gateway in front of real MCP servers, driven over HTTP and with the official SDK
 * client: JSON-RPC envelope rules (C-MCP-1/2/3), metadata passthrough (C-MCP-5), sessions,
 * ownership, and one terminal audit entry per call.
 */
import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { StreamableHTTPClientTransport } from '@modelcontextprotocol/sdk/client/streamableHttp.js';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { Gateway } from '../src/gateway/lifecycle/start.js';
import { type CountingServer, startCountingServer, TINY_PNG } from './fixtures/counting-server.js';
import {
  cleanup,
  everythingUpstream,
  rest,
  rpc,
  startInProcess,
  type TestConfig,
  writeConfig,
} from './harness/gateway.js';

let upstream: CountingServer;
let cfg: TestConfig;
let gw: Gateway;

beforeAll(async () => {
  upstream = await startCountingServer();
  cfg = await writeConfig({
    upstreams: [{ name: 'counter', transport: 'http', url: upstream.url }, everythingUpstream('everything')],
  });
  gw = await startInProcess(cfg);
});

afterAll(async () => {
  await gw?.close();
  await upstream?.close();
  cleanup(cfg.dir);
});

const call = (token: string | null, id: unknown, name: string, args: unknown = {}, cmcp?: unknown) =>
  rpc(gw.url, token, {
    jsonrpc: '2.0',
    id,
    method: 'tools/call',
    params: { name, arguments: args, ...(cmcp ? { _cmcp: cmcp } : {}) },
  });

describe('MCP envelope', () => {
  it('C-MCP-2 a notification gets 202 and an empty body', async () => {
    const r = await rpc(gw.url, 'alice-token', { jsonrpc: '2.0', method: 'notifications/initialized' });
    expect(r.status).toBe(202);
    expect(r.text).toBe('');
  });

  it('C-MCP-2 a ping with id null is answered with Invalid Request', async () => {
    const r = await rpc(gw.url, 'alice-token', { jsonrpc: '2.0', id: null, method: 'ping' });
    expect(r.body.error.code).toBe(-32600);
    expect(r.body.id).toBeNull();
  });

  it('answers ping', async () => {
    const r = await rpc(gw.url, 'alice-token', { jsonrpc: '2.0', id: 7, method: 'ping' });
    expect(r.status).toBe(200);
    expect(r.body).toEqual({ jsonrpc: '2.0', id: 7, result: {} });
  });

  it('C-MCP-3 a batch is one Invalid Request error (id null), HTTP 400, and one audit record', async () => {
    const before = gw.chain.entries('gateway').filter((e) => e.error_code === 'BATCH_NOT_SUPPORTED').length;
    const r = await rpc(gw.url, 'alice-token', [
      { jsonrpc: '2.0', id: 1, method: 'ping' },
      { jsonrpc: '2.0', id: 2, method: 'ping' },
    ]);
    expect(r.status).toBe(400);
    expect(Array.isArray(r.body)).toBe(false);
    expect(r.body.id).toBeNull();
    expect(r.body.error.code).toBe(-32600);
    const after = gw.chain.entries('gateway').filter((e) => e.error_code === 'BATCH_NOT_SUPPORTED');
    expect(after.length).toBe(before + 1);
    expect(after.at(-1)?.agent_id).toBe('alice');
  });

  it('malformed JSON is a parse error with HTTP 400', async () => {
    const r = await rpc(gw.url, 'alice-token', '{"jsonrpc":');
    expect(r.status).toBe(400);
    expect(r.body.error.code).toBe(-32700);
  });

  it('a body that is not valid UTF-8 is a parse error, never replaced with U+FFFD and forwarded (C-JCS-1)', async () => {
    const before = gw.chain.entries('gateway').length;
    const bytes = Buffer.concat([
      Buffer.from(
        '{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"counter.record","arguments":{"a":"a',
      ),
      Buffer.from([0xff, 0xfe]),
      Buffer.from('b"}}}'),
    ]);
    const res = await fetch(`${gw.url}/mcp`, {
      method: 'POST',
      headers: {
        authorization: 'Bearer alice-token',
        'content-type': 'application/json',
        accept: 'application/json, text/event-stream',
      },
      body: bytes,
    });
    expect(res.status).toBe(400);
    expect(((await res.json()) as { error: { code: number } }).error.code).toBe(-32700);
    // Nothing reached a session chain: no terminal entry hashes the replaced text.
    expect(
      gw.chain
        .entries('gateway')
        .slice(before)
        .filter((e) => e.entry_type === 'tool_call'),
    ).toEqual([]);
  });

  it('refuses an unknown token with 401 and WWW-Authenticate, and records it', async () => {
    const r = await rpc(gw.url, 'nope', { jsonrpc: '2.0', id: 1, method: 'ping' });
    expect(r.status).toBe(401);
    expect(r.headers.get('www-authenticate')).toMatch(/^Bearer/);
    expect(gw.chain.entries('gateway').some((e) => e.error_code === 'UNAUTHENTICATED')).toBe(true);
  });

  it('dev mode maps a request without a token to the dev agent', async () => {
    const r = await call(null, 1, 'counter.record', { a: 'dev' });
    const ev = r.body.result._meta['dev.cmcp/evidence'];
    expect(gw.chain.entries(ev.session_id)[0]?.agent_id).toBe('dev');
  });

  it('initialize negotiates 2025-06-18 and 2025-11-25, and serves stateless 2026-07-28 requests', async () => {
    for (const v of ['2025-06-18', '2025-11-25']) {
      const r = await rpc(gw.url, 'alice-token', {
        jsonrpc: '2.0',
        id: 1,
        method: 'initialize',
        params: { protocolVersion: v, capabilities: {}, clientInfo: { name: 't', version: '1' } },
      });
      expect(r.body.result.protocolVersion).toBe(v);
    }
    const meta = {
      'io.modelcontextprotocol/protocolVersion': '2026-07-28',
      'io.modelcontextprotocol/clientCapabilities': {},
    };
    const list = await rpc(
      gw.url,
      'alice-token',
      { jsonrpc: '2.0', id: 'l', method: 'tools/list', params: { _meta: meta } },
      { 'mcp-protocol-version': '2026-07-28' },
    );
    expect(list.status).toBe(200);
    expect(list.body.result.tools.map((t: { name: string }) => t.name)).toContain('counter.record');
    const c = await rpc(
      gw.url,
      'alice-token',
      {
        jsonrpc: '2.0',
        id: 'c',
        method: 'tools/call',
        params: { _meta: meta, name: 'counter.record', arguments: { a: 1 } },
      },
      { 'mcp-protocol-version': '2026-07-28' },
    );
    expect(c.body.result.content[0].text).toMatch(/^count=/);
    const bad = await rpc(gw.url, 'alice-token', {
      jsonrpc: '2.0',
      id: 'b',
      method: 'tools/list',
      params: { _meta: { ...meta, 'io.modelcontextprotocol/protocolVersion': '2099-01-01' } },
    });
    expect(bad.status).toBe(400);
  });
});

describe('C-MCP-1 shared ids', () => {
  it('two agents using id 1 at once each get their own response', async () => {
    const [a, b] = await Promise.all([
      call('alice-token', 1, 'counter.rich', { city: 'alice-city' }),
      call('bob-token', 1, 'counter.rich', { city: 'bob-city' }),
    ]);
    expect(a.body.id).toBe(1);
    expect(b.body.id).toBe(1);
    expect(a.body.result.structuredContent.city).toBe('alice-city');
    expect(b.body.result.structuredContent.city).toBe('bob-city');
  });

  it('1 and "1" from one agent are different ids', async () => {
    const [n, s] = await Promise.all([
      call('alice-token', 1, 'counter.rich', { city: 'numeric' }),
      call('alice-token', '1', 'counter.rich', { city: 'string' }),
    ]);
    expect(n.body.id).toBe(1);
    expect(s.body.id).toBe('1');
    expect(n.body.result.structuredContent.city).toBe('numeric');
    expect(s.body.result.structuredContent.city).toBe('string');
  });
});

describe('C-MCP-5 metadata survives', () => {
  it('tool title, annotations, outputSchema and _meta reach the client; names are prefixed', async () => {
    const r = await rpc(gw.url, 'alice-token', { jsonrpc: '2.0', id: 1, method: 'tools/list' });
    const rich = r.body.result.tools.find((t: { name: string }) => t.name === 'counter.rich');
    expect(rich.title).toBe('Rich result');
    expect(rich.annotations).toEqual({ readOnlyHint: true, openWorldHint: false });
    expect(rich.outputSchema.properties.temperature.type).toBe('number');
    expect(rich._meta).toEqual({ 'example.com/tool-meta': { tier: 'gold' } });
    expect(r.body.result.tools.some((t: { name: string }) => t.name === 'everything.echo')).toBe(true);
  });

  it('structuredContent, image and _meta pass through; evidence names the terminal entry', async () => {
    const r = await call('alice-token', 2, 'counter.rich', { city: 'Oslo' });
    const res = r.body.result;
    expect(res.structuredContent).toEqual({ city: 'Oslo', temperature: 21.5 });
    expect(res.content[1]).toEqual({ type: 'image', data: TINY_PNG, mimeType: 'image/png' });
    expect(res._meta['example.com/result-meta']).toEqual({ trace: 'abc' });
    const ev = res._meta['dev.cmcp/evidence'];
    const entries = gw.chain.entries(ev.session_id);
    const terminal = entries.find((e) => e.entry_hash === ev.entry_hash);
    expect(terminal?.entry_type).toBe('tool_call');
    expect(terminal?.sequence_number).toBe(ev.sequence_number);
    expect(terminal?.call_id).toBe(ev.call_id);
    expect(terminal?.disposition).toBe('completed');
  });

  it('isError results pass through as results', async () => {
    const r = await call('alice-token', 3, 'counter.fail');
    expect(r.body.result.isError).toBe(true);
    expect(r.body.result.content[0].text).toBe('it failed');
  });
});

describe('sessions', () => {
  it('a session belongs to its agent; others get "unknown session"', async () => {
    const s = await rest(gw.url, 'alice-token', 'POST', '/sessions', {});
    expect(s.status).toBe(201);
    expect(s.body.chain_root).toMatch(/^[0-9a-f]{64}$/);
    const mine = await call('alice-token', 1, 'counter.record', { a: 1 }, { session_id: s.body.session_id });
    expect(mine.body.result._meta['dev.cmcp/evidence'].session_id).toBe(s.body.session_id);
    const theirs = await call('bob-token', 1, 'counter.record', { a: 1 }, { session_id: s.body.session_id });
    expect(theirs.body.error.data.error_code).toBe('UNKNOWN_SESSION');
    expect(theirs.body.error.message).toBe('unknown session');
    for (const path of ['claim', 'audit']) {
      const r = await rest(gw.url, 'bob-token', 'GET', `/sessions/${s.body.session_id}/${path}`);
      expect(r.status).toBe(404);
      expect(r.body.error.error_code).toBe('UNKNOWN_SESSION');
    }
    const close = await rest(gw.url, 'bob-token', 'POST', `/sessions/${s.body.session_id}/close`);
    expect(close.status).toBe(404);
    // Closed by its agent, it is still unknown to another: a second close answers only its own
    // agent, with the stored text.
    const closed = await rest(gw.url, 'alice-token', 'POST', `/sessions/${s.body.session_id}/close`);
    expect(closed.status).toBe(200);
    const again = await rest(gw.url, 'bob-token', 'POST', `/sessions/${s.body.session_id}/close`);
    expect(again.status).toBe(404);
    expect(again.body.error.error_code).toBe('UNKNOWN_SESSION');
    const mineAgain = await rest(gw.url, 'alice-token', 'POST', `/sessions/${s.body.session_id}/close`);
    expect(mineAgain.status).toBe(200);
    expect(mineAgain.body).toEqual(closed.body);
  });

  it('every call, allowed, refused or faulted, has exactly one terminal tool_call entry with execution_id null', async () => {
    const s = await rest(gw.url, 'alice-token', 'POST', '/sessions', {});
    const sid = s.body.session_id;
    await call('alice-token', 1, 'counter.record', { a: 2 }, { session_id: sid });
    await call('alice-token', 2, 'no.such.tool', {}, { session_id: sid });
    // 2^53 + 1 as JSON text: JavaScript cannot hold it exactly, so the gateway refuses it.
    await rpc(
      gw.url,
      'alice-token',
      `{"jsonrpc":"2.0","id":3,"method":"tools/call","params":{"name":"counter.record","arguments":{"a":9007199254740993},"_cmcp":{"session_id":"${sid}"}}}`,
    );
    await call('alice-token', 4, 'counter.fail', {}, { session_id: sid });
    const closed = await rest(gw.url, 'alice-token', 'POST', `/sessions/${sid}/close`);
    expect(closed.status).toBe(200);
    const rows = gw.db
      .prepare<[string], { canonical: string; entry_type: string }>(
        'SELECT canonical, entry_type FROM audit_entries WHERE chain_id = ? ORDER BY sequence_number',
      )
      .all(sid);
    const calls = rows.filter((r) => r.entry_type === 'tool_call');
    expect(calls).toHaveLength(4);
    for (const r of calls) expect(r.canonical).toContain('"execution_id":null');
    const parsed = calls.map((r) => JSON.parse(r.canonical));
    expect(parsed.map((e) => [e.disposition, e.error_code])).toEqual([
      ['completed', null],
      ['refused', 'UNKNOWN_TOOL'],
      ['refused', 'INVALID_PARAMS'],
      ['completed', null],
    ]);
    expect(closed.body.transcript).toHaveLength(4);
    expect(closed.body.audit_chain.length).toBe(rows.length);
    expect(JSON.stringify(closed.body)).not.toContain('9007199254740993');
  });

  it('a default session is used when none is given, and rotated with a claim after max calls', async () => {
    const r1 = await call('bob-token', 1, 'counter.record', { a: 'd1' });
    const sid = r1.body.result._meta['dev.cmcp/evidence'].session_id;
    const r2 = await call('bob-token', 2, 'counter.record', { a: 'd2' });
    expect(r2.body.result._meta['dev.cmcp/evidence'].session_id).toBe(sid);
  });
});

describe('the official SDK client through the gateway', () => {
  it('connects, lists tools and calls them', async () => {
    const client = new Client({ name: 'sdk-test', version: '1.0.0' });
    const transport = new StreamableHTTPClientTransport(new URL(`${gw.url}/mcp`), {
      requestInit: { headers: { authorization: 'Bearer alice-token' } },
    });
    await client.connect(transport);
    const tools = await client.listTools();
    expect(tools.tools.map((t) => t.name)).toContain('everything.echo');
    const echo = await client.callTool({ name: 'everything.echo', arguments: { message: 'hi there' } });
    expect(JSON.stringify(echo.content)).toContain('hi there');
    const sc = await client.callTool({
      name: 'everything.get-structured-content',
      arguments: { location: 'Chicago' },
    });
    expect(sc.structuredContent).toEqual({
      temperature: 36,
      conditions: 'Light rain / drizzle',
      humidity: 82,
    });
    await client.close();
  });
});

describe('gateway chain and list changes', () => {
  it('start-up and the attestation provider are on the gateway chain', () => {
    const types = gw.chain.entries('gateway').map((e) => e.entry_type);
    expect(types.slice(0, 2)).toEqual(['gateway_start', 'attestation_provider']);
  });

  it('C-MCP-5 an upstream notifications/tools/list_changed reaches the gateway tool list', async () => {
    const { join } = await import('node:path');
    const cfg2 = await writeConfig({
      upstreams: [
        {
          name: 'grow',
          transport: 'stdio',
          command: process.execPath,
          args: [join(import.meta.dirname, 'fixtures', 'list-changing-server.mjs')],
        },
      ],
    });
    const g2 = await startInProcess(cfg2);
    try {
      const names = async () =>
        (
          await rpc(g2.url, 'alice-token', { jsonrpc: '2.0', id: 1, method: 'tools/list' })
        ).body.result.tools.map((t: { name: string }) => t.name);
      expect(await names()).toEqual(['grow.grow', 'grow.big', 'grow.pid', 'grow.slow']);
      const r = await rpc(g2.url, 'alice-token', {
        jsonrpc: '2.0',
        id: 2,
        method: 'tools/call',
        params: { name: 'grow.grow', arguments: {} },
      });
      expect(r.body.result.content[0].text).toBe('added_1');
      let listed: string[] = [];
      for (let i = 0; i < 50 && !listed.includes('grow.added_1'); i++) {
        await new Promise((res) => setTimeout(res, 50));
        listed = await names();
      }
      expect(listed).toContain('grow.added_1');
    } finally {
      await g2.close();
      cleanup(cfg2.dir);
    }
  });
});

describe('default session rotation', () => {
  it('closes the default session with a claim after max calls, and after max age', async () => {
    const cfg2 = await writeConfig({
      upstreams: [{ name: 'counter', transport: 'http', url: upstream.url }],
      sessions: { default_max_calls: 2, default_max_age_s: 1 },
    });
    const g2 = await startInProcess(cfg2);
    try {
      const sid = async () =>
        (
          await rpc(g2.url, 'alice-token', {
            jsonrpc: '2.0',
            id: 1,
            method: 'tools/call',
            params: { name: 'counter.record', arguments: {} },
          })
        ).body.result._meta['dev.cmcp/evidence'].session_id as string;
      const s1 = await sid();
      expect(await sid()).toBe(s1);
      const s2 = await sid(); // third call: s1 reached 2 calls
      expect(s2).not.toBe(s1);
      const claim = await rest(g2.url, 'alice-token', 'GET', `/sessions/${s1}/claim`);
      expect(claim.status).toBe(200);
      expect(claim.body.transcript).toHaveLength(2);
      const closeEntry = g2.chain.entries(s1).at(-1);
      expect(closeEntry?.entry_type).toBe('session_close');
      expect(closeEntry?.detail?.reason).toBe('rotated');
      await new Promise((res) => setTimeout(res, 1100));
      const s3 = await sid();
      expect(s3).not.toBe(s2);
      expect((await rest(g2.url, 'alice-token', 'GET', `/sessions/${s2}/claim`)).status).toBe(200);
      const open = await rest(g2.url, 'alice-token', 'GET', `/sessions/${s3}/claim`);
      expect(open.body.error.error_code).toBe('SESSION_OPEN');
    } finally {
      await g2.close();
      cleanup(cfg2.dir);
    }
  });
});

describe('closing a session while a call runs', () => {
  it('the claim stays valid: the late terminal entry goes to the gateway chain, naming the session', async () => {
    const { verifyClaim } = await import('@cmcp/verify');
    const s = await rest(gw.url, 'alice-token', 'POST', '/sessions', {});
    const sid = s.body.session_id;
    const pending = call('alice-token', 1, 'counter.hold', { ms: 400 }, { session_id: sid });
    await new Promise((r) => setTimeout(r, 150));
    const claim = await rest(gw.url, 'alice-token', 'POST', `/sessions/${sid}/close`);
    const r = await pending;
    const ev = r.body.result._meta['dev.cmcp/evidence'];
    expect(ev.chain_id).toBe('gateway');
    expect(ev.session_id).toBe(sid);
    const bundle = await rest(gw.url, 'alice-token', 'GET', `/sessions/${sid}/audit`);
    const report = verifyClaim(claim.body, { bundle: bundle.body });
    expect(report.checks.filter((c) => c.status === 'fail')).toEqual([]);
  });
});

describe('C-JCS-1 and malformed params through the gateway', () => {
  const cases: [string, string][] = [
    ['lone surrogate in an argument value', '"arguments":{"a":"\\uD800"}'],
    ['lone surrogate in an argument key', '"arguments":{"\\uDC00":1}'],
    ['lone surrogate in the tool name', '"name":"counter.record\\uD800"'],
    ['lone surrogate in workflow_id', '"_cmcp":{"workflow_id":"\\uDBFF"}'],
    ['lone surrogate in action_timestamp', '"_cmcp":{"execution_id":"x-jcs","action_timestamp":"\\uD800"}'],
    ['nesting 2000 deep', `"arguments":{"a":${'['.repeat(2000)}${']'.repeat(2000)}}`],
  ];
  for (const [label, member] of cases) {
    it(`${label}: INVALID_PARAMS before the upstream, one terminal entry, the caller's id`, async () => {
      const before = upstream.invocations.length;
      const body =
        `{"jsonrpc":"2.0","id":"jcs-1","method":"tools/call","params":{"name":"counter.record",${member}}}`.replace(
          '"name":"counter.record","name":',
          '"name":',
        );
      const r = await rpc(gw.url, 'alice-token', body);
      expect(r.status).toBe(200);
      expect(r.body.id).toBe('jcs-1');
      expect(r.body.error.data.error_code).toBe('INVALID_PARAMS');
      expect(upstream.invocations.length).toBe(before);
      const ev = r.body.error.data.evidence;
      const entry = gw.chain.entries(ev.chain_id).find((e) => e.entry_hash === ev.entry_hash);
      expect(entry).toMatchObject({
        entry_type: 'tool_call',
        disposition: 'refused',
        error_code: 'INVALID_PARAMS',
        execution_id: null,
      });
    });
  }

  it('a tools/call refused by the MCP layer still has its terminal tool_call entry', async () => {
    for (const body of [
      { jsonrpc: '2.0', id: 'env-1', method: 'tools/call', params: 'x' },
      {
        jsonrpc: '2.0',
        id: 'env-2',
        method: 'tools/call',
        params: {
          name: 'counter.record',
          _meta: { 'io.modelcontextprotocol/protocolVersion': '1999-01-01' },
        },
      },
    ]) {
      const r = await rpc(gw.url, 'alice-token', body);
      expect(r.body.id).toBe(body.id);
      const ev = r.body.error.data.evidence;
      const entry = gw.chain.entries(ev.chain_id).find((e) => e.entry_hash === ev.entry_hash);
      expect(entry).toMatchObject({ entry_type: 'tool_call', disposition: 'refused', agent_id: 'alice' });
    }
  });

  it('the Bearer scheme is case-insensitive (RFC 7235 §2.1)', async () => {
    const r = await rpc(
      gw.url,
      null,
      { jsonrpc: '2.0', id: 1, method: 'ping' },
      { authorization: 'bearer alice-token' },
    );
    expect(r.status).toBe(200);
  });

  it('a client JSON-RPC response gets 202; text/plain gets 415', async () => {
    const resp = await rpc(gw.url, 'alice-token', { jsonrpc: '2.0', id: 5, result: {} });
    expect(resp.status).toBe(202);
    const r = await fetch(`${gw.url}/mcp`, {
      method: 'POST',
      headers: { 'content-type': 'text/plain' },
      body: '{}',
    });
    expect(r.status).toBe(415);
  });

  it('a malformed URL gets cmcp’s own 400, without echoing it', async () => {
    const r = await fetch(`${gw.url}/executions/%ZZ-secret`);
    expect(r.status).toBe(400);
    const text = await r.text();
    expect(JSON.parse(text).error.error_code).toBe('INVALID_REQUEST');
    expect(text).not.toContain('secret');
  });
});
