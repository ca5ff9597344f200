/**
 * The crash test's upstream: a real MCP server (official SDK, Streamable HTTP, stateless) on
 * 127.0.0.1, living in the harness process so it outlives every gateway it serves. Its one tool,
 * `work`, logs the arguments it ran with before it sleeps: the log is what reached the upstream,
 * counted independently of the gateway's own record.
 */
import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { McpServer } from '@modelcontextprotocol/sdk/server/mcp.js';
import { StreamableHTTPServerTransport } from '@modelcontextprotocol/sdk/server/streamableHttp.js';
import { z } from 'zod';

/** Arguments of one `work` invocation as the upstream received them. */
export interface WorkArgs {
  op: string;
  ms: number;
}

export interface LoggingUpstream {
  /** `http://127.0.0.1:port/mcp`. */
  url: string;
  /** Every invocation, in the order the upstream ran them. */
  ran: WorkArgs[];
  close(): Promise<void>;
}

function buildServer(ran: WorkArgs[]): McpServer {
  const server = new McpServer({ name: 'crash-upstream', version: '1.0.0' });
  server.registerTool(
    'work',
    {
      description: 'Logs the call, then sleeps ms milliseconds',
      inputSchema: { op: z.string(), ms: z.number().int().min(0).max(60_000) },
    },
    async (args) => {
      ran.push({ op: args.op, ms: args.ms });
      await new Promise((r) => setTimeout(r, args.ms));
      return { content: [{ type: 'text', text: `done ${args.op}` }] };
    },
  );
  return server;
}

/** Starts the upstream on a free loopback port. */
export async function startLoggingUpstream(): Promise<LoggingUpstream> {
  const ran: WorkArgs[] = [];
  const http: Server = createServer(async (req, res) => {
    if (req.method !== 'POST') {
      res.writeHead(405).end();
      return;
    }
    const server = buildServer(ran);
    const transport = new StreamableHTTPServerTransport({
      sessionIdGenerator: undefined,
      enableJsonResponse: true,
    });
    res.on('close', () => {
      void transport.close();
      void server.close();
    });
    try {
      await server.connect(transport);
      const chunks: Buffer[] = [];
      for await (const c of req) chunks.push(c as Buffer);
      await transport.handleRequest(req, res, JSON.parse(Buffer.concat(chunks).toString('utf8')));
    } catch {
      if (!res.headersSent) res.writeHead(400).end();
    }
  });
  await new Promise<void>((r) => http.listen(0, '127.0.0.1', r));
  const { port } = http.address() as AddressInfo;
  return {
    url: `http://127.0.0.1:${port}/mcp`,
    ran,
    close: () =>
      new Promise((r) => {
        http.closeAllConnections();
        http.close(() => r());
      }),
  };
}
