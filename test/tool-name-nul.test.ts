/**
 * An upstream tool whose name holds U+0000 is not exposed, on either engine: PostgreSQL text
 * cannot hold the character, so its `call_attempts` row could not be written, and no call runs
 * without one (before this, such a call on a replica failed with AUDIT_WRITE_FAILED, the store
 * blamed for an upstream's name). SEP-986 tool names never hold it. The rest of that upstream's
 * tools are served; a call naming the hidden tool is UNKNOWN_TOOL and never reaches the upstream.
 * A name with a lone surrogate (which JCS cannot carry, so the call path refuses it) is not listed
 * either. A real MCP server (official SDK, Streamable HTTP) behind the gateway, the SDK client in front.
 */
import { createHash } from 'node:crypto';
import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { StreamableHTTPClientTransport } from '@modelcontextprotocol/sdk/client/streamableHttp.js';
import { McpServer } from '@modelcontextprotocol/sdk/server/mcp.js';
import { StreamableHTTPServerTransport } from '@modelcontextprotocol/sdk/server/streamableHttp.js';
import pino from 'pino';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { parseConfig } from '../src/config/index.js';
import { startReplicaGateway } from '../src/gateway/lifecycle/start.js';
import { createDatabase, type PostgresInstance, startPostgres } from '../testing/postgres.js';
import { cleanup, startInProcess, writeConfig } from './harness/gateway.js';
import { hasPostgres } from './harness/postgres.js';

const NUL_NAME = 'a\u0000b';
/** Refused by the call path anyway (call/ingress.ts: JCS cannot carry it), so not listed either. */
const LONE_SURROGATE_NAME = 'c\ud800d';
const invoked: string[] = [];
let upstream: Server;
let upstreamUrl = '';

beforeAll(async () => {
  upstream = createServer(async (req, res) => {
    if (req.method !== 'POST') {
      res.writeHead(405).end();
      return;
    }
    const server = new McpServer({ name: 'nul-named', version: '1.0.0' });
    for (const name of [NUL_NAME, LONE_SURROGATE_NAME, 'ok'])
      server.registerTool(name, { description: `the tool ${JSON.stringify(name)}` }, async () => {
        invoked.push(name);
        return { content: [{ type: 'text', text: `${JSON.stringify(name)} ran` }] };
      });
    const transport = new StreamableHTTPServerTransport({ sessionIdGenerator: undefined });
    await server.connect(transport);
    let body = '';
    for await (const c of req) body += c;
    await transport.handleRequest(req, res, JSON.parse(body));
  });
  await new Promise<void>((r) => upstream.listen(0, '127.0.0.1', r));
  upstreamUrl = `http://127.0.0.1:${(upstream.address() as AddressInfo).port}/mcp`;
});
afterAll(() => new Promise<void>((r) => upstream.close(() => r())));

type Started = { url: string; close(): Promise<void> };
const engines: { name: string; skip: boolean; start(): Promise<Started> }[] = [
  {
    name: 'sqlite',
    skip: false,
    async start() {
      const cfg = await writeConfig({
        upstreams: [{ name: 'u', transport: 'http', url: upstreamUrl }],
        agents: [{ agent_id: 'alice', token: 'alice-token' }],
      });
      const gw = await startInProcess(cfg);
      return {
        url: gw.url,
        async close() {
          await gw.close();
          cleanup(cfg.dir);
        },
      };
    },
  },
  {
    name: 'postgres',
    skip: !hasPostgres(),
    async start() {
      const server: PostgresInstance = await startPostgres();
      try {
        const gw = await startReplicaGateway(
          parseConfig({
            dev_mode: true,
            instance_id: 'replica-0',
            listen: { host: '127.0.0.1', port: 0 },
            database: await createDatabase(server, 'nul_name'),
            upstreams: [{ name: 'u', transport: 'http', url: upstreamUrl }],
            attestation: { provider: 'software' },
            agents: [
              { agent_id: 'alice', token_sha256: createHash('sha256').update('alice-token').digest('hex') },
            ],
          }),
          pino({ level: process.env.CMCP_TEST_LOG ?? 'silent' }),
        );
        return {
          url: gw.url,
          async close() {
            await gw.close();
            await server.stop();
          },
        };
      } catch (e) {
        await server.stop();
        throw e;
      }
    },
  },
];

describe.each(engines)('an upstream tool named with U+0000 on $name', (engine) => {
  let gw: Started;
  let client: Client;
  beforeAll(async () => {
    if (engine.skip) return;
    gw = await engine.start();
    client = new Client({ name: 'nul-test', version: '1.0.0' });
    await client.connect(
      new StreamableHTTPClientTransport(new URL(`${gw.url}/mcp`), {
        requestInit: { headers: { authorization: 'Bearer alice-token' } },
      }),
    );
  });
  afterAll(async () => {
    if (engine.skip) return;
    await client.close();
    await gw.close();
  });

  it.skipIf(engine.skip)('is not listed; its sibling is listed and served', async () => {
    const { tools } = await client.listTools();
    expect(tools.map((t) => t.name)).toEqual(['u.ok']);
    invoked.length = 0;
    const r = await client.callTool({ name: 'u.ok', arguments: {} });
    expect(r.content).toEqual([{ type: 'text', text: '"ok" ran' }]);
    expect(invoked).toEqual(['ok']);
  });

  it.skipIf(engine.skip)('a call naming it is UNKNOWN_TOOL and never reaches the upstream', async () => {
    invoked.length = 0;
    const err = await client.callTool({ name: `u.${NUL_NAME}`, arguments: {} }).then(
      () => null,
      (e: unknown) => e as { code?: number; data?: { error_code?: string } },
    );
    expect(err?.data?.error_code).toBe('UNKNOWN_TOOL');
    expect(invoked).toEqual([]);
  });
});
