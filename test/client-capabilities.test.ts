/**
 * The client's capabilities upstream (docs/spec/mcp.md#client-capabilities-upstream): a client
 * that declares sampling, elicitation (form and URL modes) and roots sees, through cmcp, every
 * tool server-everything shows the same client directly, and each capability-gated tool works:
 * its sampling, elicitation or roots request reaches the client, the answer goes back, and the
 * relay leaves its terminal entry. An upstream's `roots/list` after `initialized` (no request
 * in flight) reaches the client on its standalone stream, and the client's
 * `notifications/roots/list_changed` reaches the upstream. Real gateway, real server-everything
 * over stdio, real SDK clients.
 */
import { join } from 'node:path';
import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { StdioClientTransport } from '@modelcontextprotocol/sdk/client/stdio.js';
import { StreamableHTTPClientTransport } from '@modelcontextprotocol/sdk/client/streamableHttp.js';
import {
  CreateMessageRequestSchema,
  ElicitRequestSchema,
  ListRootsRequestSchema,
  SUPPORTED_PROTOCOL_VERSIONS,
} from '@modelcontextprotocol/sdk/types.js';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { Gateway } from '../src/gateway/lifecycle/start.js';
import { everythingUpstream, REPO_ROOT, startInProcess, writeConfig } from './harness/gateway.js';

const CAPABILITIES = { sampling: {}, elicitation: { form: {}, url: {} }, roots: { listChanged: true } };
const EVERYTHING = join(
  REPO_ROOT,
  'node_modules',
  '@modelcontextprotocol',
  'server-everything',
  'dist',
  'index.js',
);

/** What the test client was asked, and the roots it answers with. */
interface Asked {
  methods: string[];
  roots: { uri: string; name: string }[];
}

/** An SDK client declaring {@link CAPABILITIES} that answers every server-to-client request. */
function capableClient(asked: Asked): Client {
  const c = new Client({ name: 'capabilities-test', version: '1.0.0' }, { capabilities: CAPABILITIES });
  c.setRequestHandler(CreateMessageRequestSchema, async (r) => {
    asked.methods.push(r.method);
    return { role: 'assistant', content: { type: 'text', text: 'sampled answer' }, model: 'test-model' };
  });
  c.setRequestHandler(ElicitRequestSchema, async (r) => {
    asked.methods.push(`${r.method}:${r.params.mode ?? 'form'}`);
    return { action: 'decline' };
  });
  c.setRequestHandler(ListRootsRequestSchema, async (r) => {
    asked.methods.push(r.method);
    return { roots: asked.roots };
  });
  return c;
}

function entriesOfType(gw: Gateway, type: string) {
  const rows = gw.db
    .prepare<[string], { chain_id: string }>(
      'SELECT DISTINCT chain_id FROM audit_entries WHERE entry_type = ?',
    )
    .all(type);
  return rows.flatMap((r) => gw.chain.entries(r.chain_id).filter((e) => e.entry_type === type));
}

async function until(ok: () => boolean, ms = 10_000): Promise<void> {
  const end = Date.now() + ms;
  while (!ok()) {
    if (Date.now() > end) throw new Error('timed out waiting');
    await new Promise((r) => setTimeout(r, 25));
  }
}

function text(r: unknown): string {
  const content = (r as { content?: { type: string; text?: string }[] }).content ?? [];
  return content.map((c) => c.text ?? '').join('\n');
}

describe('a client that declares sampling, elicitation and roots, through cmcp', () => {
  let gw: Gateway;
  let direct: Client;
  let through: Client;
  const directAsked: Asked = { methods: [], roots: [{ uri: 'file:///srv/direct', name: 'direct' }] };
  const asked: Asked = { methods: [], roots: [{ uri: 'file:///srv/one', name: 'one' }] };

  beforeAll(async () => {
    gw = await startInProcess(await writeConfig({ upstreams: [everythingUpstream('everything')] }));
    direct = capableClient(directAsked);
    await direct.connect(
      new StdioClientTransport({ command: process.execPath, args: [EVERYTHING, 'stdio'] }),
    );
    through = capableClient(asked);
    await through.connect(
      new StreamableHTTPClientTransport(new URL(`${gw.url}/mcp`), {
        requestInit: { headers: { Authorization: 'Bearer alice-token' } },
      }),
    );
  }, 60_000);
  afterAll(async () => {
    await direct?.close().catch(() => undefined);
    await through?.close().catch(() => undefined);
    await gw?.close();
  });

  it('sees every tool the same client sees directly, in the same order, under the prefix', async () => {
    const mine = (await direct.listTools()).tools.map((t) => t.name);
    const theirs = (await through.listTools()).tools.map((t) => t.name);
    expect(mine).toEqual(expect.arrayContaining(['trigger-sampling-request', 'get-roots-list']));
    expect(mine).toEqual(expect.arrayContaining(['trigger-elicitation-request', 'trigger-url-elicitation']));
    expect(theirs).toEqual(mine.map((n) => `everything.${n}`));
  });

  it('relays the sampling request of a gated tool to the client and its answer back, with evidence', async () => {
    const before = entriesOfType(gw, 'sampling_relay').length;
    const r = await through.callTool({
      name: 'everything.trigger-sampling-request',
      arguments: { prompt: 'hello', maxTokens: 5 },
    });
    expect(text(r)).toContain('sampled answer');
    expect(asked.methods).toContain('sampling/createMessage');
    const entries = entriesOfType(gw, 'sampling_relay');
    expect(entries.length).toBe(before + 1);
    expect(entries.at(-1)).toMatchObject({ disposition: 'completed', server_identity: 'everything' });
  });

  it('relays form and URL elicitation to the client, with evidence', async () => {
    const before = entriesOfType(gw, 'elicitation_relay').length;
    const form = await through.callTool({ name: 'everything.trigger-elicitation-request', arguments: {} });
    expect(form.isError ?? false).toBe(false);
    const url = await through.callTool({
      name: 'everything.trigger-url-elicitation',
      arguments: { url: 'https://example.com/consent', message: 'open it' },
    });
    expect(url.isError ?? false).toBe(false);
    expect(asked.methods).toEqual(
      expect.arrayContaining(['elicitation/create:form', 'elicitation/create:url']),
    );
    const entries = entriesOfType(gw, 'elicitation_relay');
    expect(entries.length).toBe(before + 2);
    for (const e of entries.slice(before)) expect(e.disposition).toBe('completed');
  });

  it("gives the upstream the client's roots at any time, and tells it when they change", async () => {
    // server-everything asks for roots shortly after initialized, with no request in flight:
    // the request reached the client on its standalone stream.
    await until(() => asked.methods.includes('roots/list'));
    expect(text(await through.callTool({ name: 'everything.get-roots-list', arguments: {} }))).toContain(
      'file:///srv/one',
    );
    const rootsBefore = asked.methods.filter((m) => m === 'roots/list').length;
    asked.roots = [{ uri: 'file:///srv/two', name: 'two' }];
    await through.sendRootsListChanged();
    await until(() => asked.methods.filter((m) => m === 'roots/list').length > rootsBefore);
    await until(() => entriesOfType(gw, 'roots_relay').length >= 2);
    const r = await through.callTool({ name: 'everything.get-roots-list', arguments: {} });
    expect(text(r)).toContain('file:///srv/two');
    for (const e of entriesOfType(gw, 'roots_relay')) expect(e.disposition).toBe('completed');
  });

  it('a stateless 2026-07-28 request carries its declared capabilities upstream', async () => {
    const meta = {
      'io.modelcontextprotocol/protocolVersion': '2026-07-28',
      'io.modelcontextprotocol/clientCapabilities': { sampling: {}, roots: {} },
    };
    const post = (body: Record<string, unknown>, accept = 'application/json') =>
      fetch(`${gw.url}/mcp`, {
        method: 'POST',
        headers: { Authorization: 'Bearer alice-token', 'content-type': 'application/json', accept },
        body: JSON.stringify({ jsonrpc: '2.0', ...body }),
      });
    const listed = (await (await post({ id: 1, method: 'tools/list', params: { _meta: meta } })).json()) as {
      result: { tools: { name: string }[] };
    };
    const names = listed.result.tools.map((t) => t.name);
    expect(names).toContain('everything.trigger-sampling-request');
    expect(names).not.toContain('everything.trigger-elicitation-request');
    // The call's sampling request reaches this request's stream; the answer POSTed goes back up.
    const res = await post(
      {
        id: 2,
        method: 'tools/call',
        params: { name: 'everything.trigger-sampling-request', arguments: { prompt: 'p' }, _meta: meta },
      },
      'application/json, text/event-stream',
    );
    expect(res.headers.get('content-type')).toBe('text/event-stream');
    const reader = (res.body as ReadableStream<Uint8Array>).getReader();
    const decoder = new TextDecoder();
    let buf = '';
    let result: unknown;
    while (result === undefined) {
      const { value, done } = await reader.read();
      if (done) break;
      buf += decoder.decode(value, { stream: true });
      for (let i = buf.indexOf('\n\n'); i >= 0; i = buf.indexOf('\n\n')) {
        const data = buf
          .slice(0, i)
          .split('\n')
          .filter((l) => l.startsWith('data:'))
          .map((l) => l.slice(5).trim())
          .join('');
        buf = buf.slice(i + 2);
        if (!data) continue;
        const m = JSON.parse(data) as { id?: unknown; method?: string; result?: unknown };
        if (m.method === 'sampling/createMessage')
          await post({
            id: m.id,
            result: { role: 'assistant', content: { type: 'text', text: 'stateless answer' }, model: 'm' },
          });
        else if (m.id === 2) result = m.result;
      }
    }
    expect(JSON.stringify(result)).toContain('stateless answer');
  });

  it('a client that declares nothing still sees only what the shared connection offers', async () => {
    const plain = new Client({ name: 'plain', version: '1.0.0' });
    await plain.connect(
      new StreamableHTTPClientTransport(new URL(`${gw.url}/mcp`), {
        requestInit: { headers: { Authorization: 'Bearer alice-token' } },
      }),
    );
    try {
      const names = (await plain.listTools()).tools.map((t) => t.name);
      expect(names).toContain('everything.echo');
      expect(names).not.toContain('everything.trigger-sampling-request');
      const r = await plain
        .callTool({ name: 'everything.trigger-sampling-request', arguments: { prompt: 'x' } })
        .catch((e: unknown) => e);
      expect((r as { data?: unknown }).data).toMatchObject({ error_code: 'UNKNOWN_TOOL' });
    } finally {
      await plain.close();
    }
  });
});

describe('protocol versions', () => {
  it('negotiates every version the SDK supports as asked, and records it', async () => {
    const gw = await startInProcess(await writeConfig({ upstreams: [everythingUpstream('everything')] }));
    try {
      for (const version of SUPPORTED_PROTOCOL_VERSIONS) {
        const res = await fetch(`${gw.url}/mcp`, {
          method: 'POST',
          headers: {
            Authorization: 'Bearer alice-token',
            'content-type': 'application/json',
            accept: 'application/json',
          },
          body: JSON.stringify({
            jsonrpc: '2.0',
            id: 1,
            method: 'initialize',
            params: { protocolVersion: version, capabilities: {}, clientInfo: { name: 'v', version: '1' } },
          }),
        });
        const body = (await res.json()) as { result: { protocolVersion: string } };
        expect(body.result.protocolVersion).toBe(version);
        const sid = res.headers.get('mcp-session-id');
        expect(sid).toBeTruthy();
        await until(() =>
          entriesOfType(gw, 'client_session_open').some(
            (e) => (e.detail as Record<string, unknown>).client_session_id === sid,
          ),
        );
        const open = entriesOfType(gw, 'client_session_open').find(
          (e) => (e.detail as Record<string, unknown>).client_session_id === sid,
        );
        expect(open?.detail).toMatchObject({ protocol_version: version });
      }
    } finally {
      await gw.close();
    }
  });
});
