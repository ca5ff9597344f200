/**
 * The client-facing MCP edge (docs/spec/mcp.md#inbound), driven by the official SDK client:
 * answers on an SSE stream when something must reach the client before the result
 * (notifications, server-to-client requests answered by the client), JSON otherwise;
 * notifications/cancelled and a disconnect abort the request; client sessions
 * (Mcp-Session-Id: 404 when unknown, DELETE ends one, GET opens the standalone stream).
 *
 * The `/mcp` routes run on a fastify app with the real McpEndpoint, ClientSessions and
 * InflightRequests; the methods that use the channel are fixtures here (the relayed methods
 * come from the upstream side), and the gateway-level checks at the end use a real gateway.
 */
import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { StreamableHTTPClientTransport } from '@modelcontextprotocol/sdk/client/streamableHttp.js';
import {
  CreateMessageRequestSchema,
  ResourceUpdatedNotificationSchema,
} from '@modelcontextprotocol/sdk/types.js';
import Fastify, { type FastifyInstance } from 'fastify';
import pino from 'pino';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { z } from 'zod';
import type { CallOrchestrator } from '../src/call/orchestrator.js';
import { ClientSessions } from '../src/gateway/agent/mcp/client-sessions.js';
import { McpEndpoint } from '../src/gateway/agent/mcp/endpoint.js';
import { InflightRequests } from '../src/gateway/agent/mcp/inflight.js';
import { agentMcpPlugin } from '../src/gateway/agent/mcp/plugin.js';
import type { MethodHandler } from '../src/relay/channel.js';
import { UpstreamPool } from '../src/upstream/pool.js';

const anyResult = z.object({}).passthrough();
const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

/** What the `test/wait` fixture saw when its request ended. */
const aborted: { id: unknown; code: unknown }[] = [];

const methods = new Map<string, MethodHandler>([
  [
    'test/progress',
    async ({ params, channel }) => {
      const token = (params?._meta as { progressToken?: unknown } | undefined)?.progressToken;
      for (const progress of [0, 50, 100]) {
        if (token !== undefined)
          channel.notify({
            method: 'notifications/progress',
            params: { progressToken: token, progress, total: 100 },
          });
        await sleep(10);
      }
      return { result: { done: true, streamed: channel.streaming } };
    },
  ],
  [
    'test/sample',
    async ({ params, channel }) => {
      try {
        const answer = await channel.request({
          method: 'sampling/createMessage',
          params: {
            messages: [{ role: 'user', content: { type: 'text', text: String(params?.prompt) } }],
            maxTokens: 10,
          },
        });
        return { result: { answer } };
      } catch (e) {
        return {
          error: {
            code: -32603,
            message: (e as Error).message,
            data: { code: (e as { code?: unknown }).code },
          },
        };
      }
    },
  ],
  [
    'test/wait',
    async ({ id, channel }) => {
      channel.notify({ method: 'notifications/message', params: { level: 'info', data: 'waiting' } });
      await new Promise<void>((resolve) => {
        if (channel.signal.aborted) resolve();
        channel.signal.addEventListener('abort', () => resolve(), { once: true });
        setTimeout(resolve, 10_000).unref();
      });
      aborted.push({ id, code: (channel.signal.reason as { code?: unknown } | undefined)?.code });
      return { result: { aborted: channel.signal.aborted } };
    },
  ],
  [
    'test/big',
    async ({ params, channel }) => {
      channel.notify({ method: 'notifications/message', params: { level: 'info', data: 'big' } });
      return { result: { text: 'x'.repeat(Number(params?.bytes)) } };
    },
  ],
  ['test/plain', async ({ channel }) => ({ result: { streaming: channel.streaming } })],
]);

let app: FastifyInstance;
let url: string;
const sessions = new ClientSessions({ idleMs: 60_000 });
const inflight = new InflightRequests();

beforeAll(async () => {
  app = Fastify();
  app.decorateRequest('agentId', '');
  app.decorateRequest('agentBlocked', false);
  app.decorateRequest('startedAt', 0n);
  // The agent authentication hook's outcome (its own tests are in gateway-mcp.test.ts).
  app.addHook('onRequest', async (req) => {
    req.agentId = typeof req.headers['x-agent'] === 'string' ? req.headers['x-agent'] : 'alice';
    req.startedAt = process.hrtime.bigint();
  });
  const log = pino({ level: 'silent' });
  // tools/call is not exercised here: the orchestrator is never reached.
  const mcp = new McpEndpoint({} as CallOrchestrator, new UpstreamPool([], log), () => undefined, {
    methods,
  });
  await app.register(agentMcpPlugin, { mcp, clientSessions: sessions, inflight });
  url = `${await app.listen({ host: '127.0.0.1', port: 0 })}/mcp`;
});

afterAll(async () => {
  sessions.close();
  await app?.close();
});

async function connect(headers: Record<string, string> = {}) {
  const client = new Client({ name: 'edge-test', version: '1.0.0' }, { capabilities: { sampling: {} } });
  const transport = new StreamableHTTPClientTransport(new URL(url), { requestInit: { headers } });
  await client.connect(transport);
  return { client, transport };
}

describe('answers on SSE when the client accepts it', () => {
  it('progress notifications reach the SDK client before the result; the session id is kept', async () => {
    const { client, transport } = await connect();
    expect(transport.sessionId).toMatch(/^[0-9a-f-]{36}$/);
    const seen: number[] = [];
    const r = await client.request({ method: 'test/progress', params: {} }, anyResult, {
      onprogress: (p) => seen.push(p.progress),
    });
    expect(seen).toEqual([0, 50, 100]);
    expect(r).toMatchObject({ done: true, streamed: true });
    await client.close();
  });

  it('a request with nothing to stream is answered application/json, and JSON-only clients always are', async () => {
    const init = await fetch(url, {
      method: 'POST',
      headers: { 'content-type': 'application/json', accept: 'application/json, text/event-stream' },
      body: JSON.stringify({ jsonrpc: '2.0', id: 1, method: 'test/plain' }),
    });
    expect(init.headers.get('content-type')).toMatch(/^application\/json/);
    expect(((await init.json()) as { result: unknown }).result).toEqual({ streaming: true });
    const jsonOnly = await fetch(url, {
      method: 'POST',
      headers: { 'content-type': 'application/json', accept: 'application/json' },
      body: JSON.stringify({
        jsonrpc: '2.0',
        id: 2,
        method: 'test/progress',
        params: { _meta: { progressToken: 7 } },
      }),
    });
    expect(jsonOnly.headers.get('content-type')).toMatch(/^application\/json/);
    expect(((await jsonOnly.json()) as { result: unknown }).result).toEqual({ done: true, streamed: false });
  });

  it('a client that accepts only text/event-stream gets the result on a stream', async () => {
    const r = await fetch(url, {
      method: 'POST',
      headers: { 'content-type': 'application/json', accept: 'text/event-stream' },
      body: JSON.stringify({ jsonrpc: '2.0', id: 'p', method: 'test/plain' }),
    });
    expect(r.headers.get('content-type')).toBe('text/event-stream');
    const text = await r.text();
    expect(text).toBe(
      `event: message\ndata: ${JSON.stringify({ jsonrpc: '2.0', id: 'p', result: { streaming: true } })}\n\n`,
    );
  });

  it('a server-to-client request reaches the client, and its answer, POSTed back, reaches the waiting request', async () => {
    const { client } = await connect();
    client.setRequestHandler(CreateMessageRequestSchema, async (req) => ({
      role: 'assistant',
      model: 'test-model',
      content: {
        type: 'text',
        text: `echo: ${(req.params.messages[0]?.content as { text?: string } | undefined)?.text}`,
      },
    }));
    const r = await client.request({ method: 'test/sample', params: { prompt: 'hello' } }, anyResult);
    expect(r.answer).toMatchObject({ model: 'test-model', content: { text: 'echo: hello' } });
    await client.close();
  });

  it("the client's JSON-RPC error answer rejects the waiting request with its code", async () => {
    const { client } = await connect();
    client.setRequestHandler(CreateMessageRequestSchema, async () => {
      throw new Error('user declined');
    });
    await expect(
      client.request({ method: 'test/sample', params: { prompt: 'x' } }, anyResult),
    ).rejects.toThrow(/user declined/);
    await client.close();
  });

  it('another agent cannot answer a server-to-client request it did not receive', async () => {
    // One raw SSE request as alice; bob POSTs an answer to the id alice was sent.
    const res = await fetch(url, {
      method: 'POST',
      headers: { 'content-type': 'application/json', accept: 'application/json, text/event-stream' },
      body: JSON.stringify({ jsonrpc: '2.0', id: 9, method: 'test/sample', params: { prompt: 'p' } }),
    });
    const reader = (res.body as ReadableStream<Uint8Array>).getReader();
    const first = new TextDecoder().decode((await reader.read()).value);
    const request = JSON.parse(first.split('data: ')[1] as string);
    expect(request.method).toBe('sampling/createMessage');
    const answer = (agent: string, text: string) =>
      fetch(url, {
        method: 'POST',
        headers: { 'content-type': 'application/json', 'x-agent': agent },
        body: JSON.stringify({
          jsonrpc: '2.0',
          id: request.id,
          result: { role: 'assistant', model: agent, content: { type: 'text', text } },
        }),
      });
    expect((await answer('bob', 'forged')).status).toBe(202);
    expect((await answer('alice', 'real')).status).toBe(202);
    let rest = '';
    for (;;) {
      const { done, value } = await reader.read();
      if (done) break;
      rest += new TextDecoder().decode(value);
    }
    expect(JSON.parse(rest.split('data: ')[1] as string).result.answer.model).toBe('alice');
  });

  it('a large result passes intact as one long SSE line', async () => {
    const { client } = await connect();
    const r = await client.request({ method: 'test/big', params: { bytes: 3_000_000 } }, anyResult);
    expect((r.text as string).length).toBe(3_000_000);
    expect(r.text).toBe('x'.repeat(3_000_000));
    await client.close();
  });
});

describe('cancellation', () => {
  it("the client's notifications/cancelled aborts the request it names", async () => {
    const { client } = await connect();
    const ctl = new AbortController();
    const p = client.request({ method: 'test/wait', params: {} }, anyResult, { signal: ctl.signal });
    await sleep(100);
    const before = aborted.length;
    ctl.abort('changed my mind');
    await expect(p).rejects.toThrow();
    for (let i = 0; i < 50 && aborted.length === before; i++) await sleep(20);
    expect(aborted.at(-1)?.code).toBe('REQUEST_CANCELLED');
    await client.close();
  });

  it('a cancellation from another agent aborts nothing', async () => {
    const waiting = fetch(url, {
      method: 'POST',
      headers: { 'content-type': 'application/json', accept: 'application/json, text/event-stream' },
      body: JSON.stringify({ jsonrpc: '2.0', id: 'w1', method: 'test/wait' }),
    });
    const res = await waiting;
    const cancel = (agent: string) =>
      fetch(url, {
        method: 'POST',
        headers: { 'content-type': 'application/json', 'x-agent': agent },
        body: JSON.stringify({
          jsonrpc: '2.0',
          method: 'notifications/cancelled',
          params: { requestId: 'w1' },
        }),
      });
    const before = aborted.length;
    expect((await cancel('bob')).status).toBe(202);
    await sleep(100);
    expect(aborted.length).toBe(before);
    expect((await cancel('alice')).status).toBe(202);
    const text = await res.text();
    expect(text).toContain('"aborted":true');
    expect(aborted.at(-1)).toEqual({ id: 'w1', code: 'REQUEST_CANCELLED' });
  });

  it('a client that disconnects aborts its request', async () => {
    const ctl = new AbortController();
    const res = await fetch(url, {
      method: 'POST',
      headers: { 'content-type': 'application/json', accept: 'application/json, text/event-stream' },
      body: JSON.stringify({ jsonrpc: '2.0', id: 'gone', method: 'test/wait' }),
      signal: ctl.signal,
    });
    expect(res.headers.get('content-type')).toBe('text/event-stream');
    const before = aborted.length;
    ctl.abort();
    for (let i = 0; i < 50 && aborted.length === before; i++) await sleep(20);
    expect(aborted.at(-1)).toEqual({ id: 'gone', code: 'REQUEST_CANCELLED' });
  });
});

describe('client sessions', () => {
  it('an unknown Mcp-Session-Id gets 404; DELETE ends a session and its id then gets 404', async () => {
    const unknown = await fetch(url, {
      method: 'POST',
      headers: { 'content-type': 'application/json', 'mcp-session-id': 'no-such-session' },
      body: JSON.stringify({ jsonrpc: '2.0', id: 3, method: 'ping' }),
    });
    expect(unknown.status).toBe(404);
    expect(
      ((await unknown.json()) as { error: { data: { error_code: string } } }).error.data.error_code,
    ).toBe('UNKNOWN_CLIENT_SESSION');

    const { client, transport } = await connect();
    const sid = transport.sessionId as string;
    await client.ping();
    // Another agent does not see this session.
    const asBob = await fetch(url, {
      method: 'POST',
      headers: { 'content-type': 'application/json', 'mcp-session-id': sid, 'x-agent': 'bob' },
      body: JSON.stringify({ jsonrpc: '2.0', id: 4, method: 'ping' }),
    });
    expect(asBob.status).toBe(404);
    await transport.terminateSession();
    const after = await fetch(url, {
      method: 'POST',
      headers: { 'content-type': 'application/json', 'mcp-session-id': sid },
      body: JSON.stringify({ jsonrpc: '2.0', id: 5, method: 'ping' }),
    });
    expect(after.status).toBe(404);
    await client.close();
  });

  it('an unsupported MCP-Protocol-Version in a client session is HTTP 400, not an error on a 200 stream', async () => {
    const { client, transport } = await connect();
    const r = await fetch(url, {
      method: 'POST',
      headers: {
        'content-type': 'application/json',
        accept: 'application/json, text/event-stream',
        'mcp-session-id': transport.sessionId as string,
        'mcp-protocol-version': '1999-01-01',
      },
      body: JSON.stringify({ jsonrpc: '2.0', id: 6, method: 'ping' }),
    });
    expect(r.status).toBe(400);
    expect(r.headers.get('content-type')).toMatch(/^application\/json/);
    expect(((await r.json()) as { error: { code: number } }).error.code).toBe(-32600);
    await client.close();
  });

  it('remembers the negotiated protocol version and offers it to the methods', async () => {
    const { client, transport } = await connect();
    const s = sessions.get(transport.sessionId as string, 'alice');
    expect(s?.protocolVersion).toBe(transport.protocolVersion);
    expect(['2025-11-25', '2025-06-18']).toContain(s?.protocolVersion);
    await client.close();
  });

  it('GET /mcp is the standalone stream: a notification that belongs to no request reaches the client', async () => {
    const { client, transport } = await connect();
    const got = new Promise<string>((resolve) =>
      client.setNotificationHandler(ResourceUpdatedNotificationSchema, (n) => resolve(n.params.uri)),
    );
    const sid = transport.sessionId as string;
    let delivered = false;
    for (let i = 0; i < 100 && !delivered; i++) {
      delivered = sessions.notify(sid, {
        method: 'notifications/resources/updated',
        params: { uri: 'test://r' },
      });
      if (!delivered) await sleep(20);
    }
    expect(delivered).toBe(true);
    expect(await got).toBe('test://r');
    const ended: string[] = [];
    sessions.onEnd(sid, () => ended.push(sid));
    await transport.terminateSession();
    expect(ended).toEqual([sid]);
    await client.close();
  });

  it('a session unused past its idle time expires (404)', async () => {
    const short = new ClientSessions({ idleMs: 50 });
    const s = short.open('alice', '2025-11-25');
    expect(short.get(s.id, 'alice')).not.toBeNull();
    await sleep(120);
    expect(short.get(s.id, 'alice')).toBeNull();
    short.close();
  });
});
