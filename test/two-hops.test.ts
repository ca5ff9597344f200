/**
 * An upstream's JSON-RPC error passes through a gateway unchanged — code, and message without
 * the SDK client's "MCP error <code>: " prefix added again at each hop — so two gateways in a
 * row (a real SDK upstream behind gateway A, A as gateway B's upstream, the real SDK client in
 * front of B) show the client the upstream's own message, once prefixed by its own SDK.
 */
import { createServer, type Server as HttpServer } from 'node:http';
import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { StreamableHTTPClientTransport } from '@modelcontextprotocol/sdk/client/streamableHttp.js';
import { Server } from '@modelcontextprotocol/sdk/server/index.js';
import { StreamableHTTPServerTransport } from '@modelcontextprotocol/sdk/server/streamableHttp.js';
import {
  CallToolRequestSchema,
  ErrorCode,
  ListToolsRequestSchema,
  McpError,
} from '@modelcontextprotocol/sdk/types.js';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { Gateway } from '../src/gateway/lifecycle/start.js';
import { cleanup, rpc, startInProcess, type TestConfig, writeConfig } from './harness/gateway.js';

const MESSAGE = 'no such widget: w-42';

let upstream: HttpServer;
const cfgs: TestConfig[] = [];
const gws: Gateway[] = [];

beforeAll(async () => {
  // A low-level SDK server: its tool answers with a JSON-RPC error (not an isError result).
  upstream = createServer(async (req, res) => {
    const s = new Server({ name: 'erring', version: '1.0.0' }, { capabilities: { tools: {} } });
    s.setRequestHandler(ListToolsRequestSchema, async () => ({
      tools: [{ name: 'fail', description: 'always refuses', inputSchema: { type: 'object' } }],
    }));
    // Not an McpError, whose message already carries the prefix: the SDK server sends this
    // error's code, data and message as they are, so the wire message is exactly MESSAGE.
    s.setRequestHandler(CallToolRequestSchema, async () => {
      throw Object.assign(new Error(MESSAGE), { code: ErrorCode.InvalidParams, data: { widget: 'w-42' } });
    });
    const t = new StreamableHTTPServerTransport({ sessionIdGenerator: undefined, enableJsonResponse: true });
    res.on('close', () => {
      void t.close();
      void s.close();
    });
    await s.connect(t);
    await t.handleRequest(req, res);
  });
  await new Promise<void>((r) => upstream.listen(0, '127.0.0.1', r));
  const upstreamUrl = `http://127.0.0.1:${(upstream.address() as { port: number }).port}/mcp`;
  // Dev mode: B reaches A without a token, as agent `dev`.
  const a = await writeConfig({ upstreams: [{ name: 'u', transport: 'http', url: upstreamUrl }] });
  cfgs.push(a);
  gws.push(await startInProcess(a));
  const b = await writeConfig({ upstreams: [{ name: 'a', transport: 'http', url: `${gws[0]?.url}/mcp` }] });
  cfgs.push(b);
  gws.push(await startInProcess(b));
}, 60_000);

afterAll(async () => {
  for (const g of gws.reverse()) await g.close();
  await new Promise((r) => upstream?.close(r));
  for (const c of cfgs) cleanup(c.dir);
});

describe('an upstream error through two gateways', () => {
  it('keeps its code and its own message at every hop', async () => {
    const [a, b] = gws as [Gateway, Gateway];
    const one = await rpc(a.url, 'alice-token', {
      jsonrpc: '2.0',
      id: 1,
      method: 'tools/call',
      params: { name: 'u.fail', arguments: {} },
    });
    expect(one.body.error).toMatchObject({ code: ErrorCode.InvalidParams, message: MESSAGE });
    expect(one.body.error.data).toMatchObject({
      error_code: 'UPSTREAM_RPC_ERROR',
      upstream_data: { widget: 'w-42' },
    });
    const two = await rpc(b.url, 'alice-token', {
      jsonrpc: '2.0',
      id: 2,
      method: 'tools/call',
      params: { name: 'a.u.fail', arguments: {} },
    });
    expect(two.body.error).toMatchObject({ code: ErrorCode.InvalidParams, message: MESSAGE });

    const client = new Client({ name: 'two-hops', version: '1.0.0' });
    await client.connect(
      new StreamableHTTPClientTransport(new URL(`${b.url}/mcp`), {
        requestInit: { headers: { Authorization: 'Bearer alice-token' } },
      }),
    );
    try {
      const thrown = await client.callTool({ name: 'a.u.fail', arguments: {} }).catch((e: unknown) => e);
      expect(thrown).toBeInstanceOf(McpError);
      expect((thrown as McpError).code).toBe(ErrorCode.InvalidParams);
      expect((thrown as McpError).message).toBe(`MCP error ${ErrorCode.InvalidParams}: ${MESSAGE}`);
    } finally {
      await client.close();
    }
  });
});
