/**
 * `@modelcontextprotocol/server-everything` served over MCP Streamable HTTP on 127.0.0.1 (its own
 * `streamableHttp` mode listens on every interface, which tests and benches here must not do).
 * Stateful, as that mode is: one server-everything per MCP session (`Mcp-Session-Id`).
 *
 * Usage: `node dist/bench/load/everything-http.js [PORT]` (0 or absent: a free port). Prints one
 * line `listening <port>` on stdout once it accepts connections; stops on SIGTERM/SIGINT.
 */
import { randomUUID } from 'node:crypto';
import { createServer } from 'node:http';
import type { AddressInfo } from 'node:net';
import { dirname, join, resolve } from 'node:path';
import { fileURLToPath, pathToFileURL } from 'node:url';
import { StreamableHTTPServerTransport } from '@modelcontextprotocol/sdk/server/streamableHttp.js';

/** dist/bench/load → the repository root. */
const REPO_ROOT = resolve(dirname(fileURLToPath(import.meta.url)), '..', '..', '..');
const FACTORY = join(
  REPO_ROOT,
  'node_modules',
  '@modelcontextprotocol',
  'server-everything',
  'dist',
  'server',
  'index.js',
);

interface EverythingServer {
  server: { connect(t: StreamableHTTPServerTransport): Promise<void>; close(): Promise<void> };
  cleanup: (sessionId?: string) => void;
}

// server-everything ships no type declarations; its factory is `createServer(): {server, cleanup}`.
const { createServer: createEverything } = (await import(pathToFileURL(FACTORY).href)) as {
  createServer: () => EverythingServer;
};

const sessions = new Map<string, StreamableHTTPServerTransport>();

const http = createServer(async (req, res) => {
  try {
    const sid = req.headers['mcp-session-id'];
    const existing = typeof sid === 'string' ? sessions.get(sid) : undefined;
    if (existing) {
      await existing.handleRequest(req, res);
      return;
    }
    if (sid !== undefined || req.method !== 'POST') {
      res
        .writeHead(404, { 'content-type': 'application/json' })
        .end(
          JSON.stringify({ jsonrpc: '2.0', error: { code: -32001, message: 'unknown session' }, id: null }),
        );
      return;
    }
    const { server, cleanup } = createEverything();
    const transport = new StreamableHTTPServerTransport({
      sessionIdGenerator: () => randomUUID(),
      onsessioninitialized: (id) => {
        sessions.set(id, transport);
      },
    });
    transport.onclose = () => {
      const id = transport.sessionId;
      if (id) sessions.delete(id);
      cleanup(id);
    };
    await server.connect(transport);
    await transport.handleRequest(req, res);
  } catch (e) {
    if (!res.headersSent) res.writeHead(500).end(String((e as Error).message));
  }
});

const port = Number(process.argv[2] ?? 0);
http.listen(port, '127.0.0.1', () => {
  process.stdout.write(`listening ${(http.address() as AddressInfo).port}\n`);
});
const stop = () => {
  for (const t of sessions.values()) void t.close();
  http.closeAllConnections();
  http.close(() => process.exit(0));
};
process.on('SIGTERM', stop);
process.on('SIGINT', stop);
