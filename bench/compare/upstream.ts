/**
 * The one MCP server every subject of the comparison fronts (bench/compare/run.ts): two tools,
 * `noop` (answers `ok`) and `blob` (answers ~100 KB of text), both `readOnlyHint` so that the
 * example Cedar bundle permits them. Served over stdio or over Streamable HTTP on 127.0.0.1
 * (stateless, JSON responses: one SDK transport per request, as the SDK documents for
 * stateless servers).
 *
 * Usage: `node dist/bench/compare/upstream.js stdio` or `… http` (prints `listening <port>`).
 */
import { createServer } from 'node:http';
import type { AddressInfo } from 'node:net';
import { McpServer } from '@modelcontextprotocol/sdk/server/mcp.js';
import { StdioServerTransport } from '@modelcontextprotocol/sdk/server/stdio.js';
import { StreamableHTTPServerTransport } from '@modelcontextprotocol/sdk/server/streamableHttp.js';

/** Size of the `blob` tool's text result (bytes, ASCII). */
export const BLOB_BYTES = 100 * 1024;
const BLOB = 'x'.repeat(BLOB_BYTES);
const READ_ONLY = { readOnlyHint: true, openWorldHint: false };

function server(): McpServer {
  const s = new McpServer({ name: 'bench-upstream', version: '1' });
  s.registerTool('noop', { description: 'answers ok at once', annotations: READ_ONLY }, async () => ({
    content: [{ type: 'text', text: 'ok' }],
  }));
  s.registerTool(
    'blob',
    { description: 'answers about 100 KB of text', annotations: READ_ONLY },
    async () => ({
      content: [{ type: 'text', text: BLOB }],
    }),
  );
  return s;
}

if (process.argv[2] === 'stdio') {
  await server().connect(new StdioServerTransport());
} else if (process.argv[2] === 'http') {
  const http = createServer(async (req, res) => {
    if (req.method !== 'POST') {
      res.writeHead(405).end();
      return;
    }
    const chunks: Buffer[] = [];
    for await (const c of req) chunks.push(c as Buffer);
    const s = server();
    const transport = new StreamableHTTPServerTransport({
      sessionIdGenerator: undefined,
      enableJsonResponse: true,
    });
    res.on('close', () => {
      void transport.close();
      void s.close();
    });
    await s.connect(transport);
    await transport.handleRequest(req, res, JSON.parse(Buffer.concat(chunks).toString('utf8')));
  });
  http.keepAliveTimeout = 60_000;
  http.listen(0, '127.0.0.1', () => {
    process.stdout.write(`listening ${(http.address() as AddressInfo).port}\n`);
  });
  const stop = () => {
    http.closeAllConnections();
    http.close(() => process.exit(0));
  };
  process.on('SIGTERM', stop);
  process.on('SIGINT', stop);
}
