/**
 * cmcp's own MCP server for the public conformance scenarios (`@modelcontextprotocol/conformance`
 * server suite), written from the scenario texts: every tool, resource, prompt and utility a
 * server scenario names, over Streamable HTTP with client sessions and SSE answers (the SDK's
 * server transport), DNS-rebinding protection on. It is the upstream that
 * `npm run conformance` tests directly and then behind the gateway.
 *
 * Beyond the scenarios: `test_big_result {bytes}` answers a text of that many bytes (result
 * size cap over SSE), `test_progress_steps {steps}` reports `steps` progress notifications
 * back to back (the bench's relayed-progress latency), and `test_wait_for_cancel` runs until
 * its request is cancelled, noting the cancellation in `FixtureServer.cancelled`.
 */
import { randomUUID } from 'node:crypto';
import { createServer, type Server as HttpServer, type IncomingMessage } from 'node:http';
import type { AddressInfo } from 'node:net';
import { Server } from '@modelcontextprotocol/sdk/server/index.js';
import { StreamableHTTPServerTransport } from '@modelcontextprotocol/sdk/server/streamableHttp.js';
import {
  CallToolRequestSchema,
  type CallToolResult,
  CreateMessageResultSchema,
  ElicitResultSchema,
  ListToolsRequestSchema,
  SetLevelRequestSchema,
} from '@modelcontextprotocol/sdk/types.js';
import { registerResourcesAndPrompts } from './fixture-content.js';
import { ELICIT_DEFAULTS, ELICIT_ENUMS, STATIC_RESULTS, TOOLS, text } from './fixture-tools.js';

export { RED_PIXEL_PNG, SILENT_WAV } from './fixture-tools.js';

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

const LEVELS = ['debug', 'info', 'notice', 'warning', 'error', 'critical', 'alert', 'emergency'];

/** The handler context the SDK passes to a request handler. */
type RequestExtra = Parameters<Parameters<Server['setRequestHandler']>[1]>[1];

/** The tools that send the client a request (sampling, elicitation) and report its answer. */
async function askClient(
  name: string,
  args: Record<string, unknown>,
  extra: RequestExtra,
): Promise<CallToolResult> {
  switch (name) {
    case 'test_sampling': {
      const r = await extra.sendRequest(
        {
          method: 'sampling/createMessage',
          params: {
            messages: [{ role: 'user', content: { type: 'text', text: String(args.prompt) } }],
            maxTokens: 100,
          },
        },
        CreateMessageResultSchema,
      );
      const answer = r.content as { type: string; text?: string };
      return text(`LLM response: ${answer.type === 'text' ? answer.text : JSON.stringify(answer)}`);
    }
    case 'test_elicitation':
    case 'test_elicitation_sep1034_defaults':
    case 'test_elicitation_sep1330_enums': {
      const requestedSchema =
        name === 'test_elicitation'
          ? {
              type: 'object',
              properties: {
                username: { type: 'string', description: "User's response" },
                email: { type: 'string', description: "User's email address" },
              },
              required: ['username', 'email'],
            }
          : name === 'test_elicitation_sep1034_defaults'
            ? ELICIT_DEFAULTS
            : ELICIT_ENUMS;
      const message =
        name === 'test_elicitation' ? String(args.message) : 'Please review and update the form fields';
      const r = await extra.sendRequest(
        { method: 'elicitation/create', params: { message, requestedSchema } as never },
        ElicitResultSchema,
      );
      if (name === 'test_elicitation')
        return text(`User response: action=${r.action}, content=${JSON.stringify(r.content ?? {})}`);
      return text(`Elicitation completed: action=${r.action}, content=${JSON.stringify(r.content ?? {})}`);
    }
    default:
      throw new Error(`not a client-request tool: ${name}`);
  }
}

/** One MCP server (one per client session). `cancelled` collects what test_wait_for_cancel saw. */
function buildServer(cancelled: string[]): Server {
  const server = new Server(
    { name: 'cmcp-conformance-fixture', version: '1.0.0' },
    {
      capabilities: {
        tools: {},
        resources: { subscribe: true },
        prompts: {},
        logging: {},
        completions: {},
      },
    },
  );
  let level = 'info';
  const subscriptions = new Set<string>();
  server.setRequestHandler(SetLevelRequestSchema, async (req) => {
    level = req.params.level;
    return {};
  });
  server.setRequestHandler(ListToolsRequestSchema, async () => ({ tools: TOOLS as never }));
  server.setRequestHandler(CallToolRequestSchema, async (req, extra) => {
    const args = (req.params.arguments ?? {}) as Record<string, unknown>;
    const token = req.params._meta?.progressToken;
    const log = (data: string) =>
      LEVELS.indexOf('info') >= LEVELS.indexOf(level)
        ? extra.sendNotification({ method: 'notifications/message', params: { level: 'info', data } })
        : Promise.resolve();
    const progress = (p: number, total: number, message?: string) =>
      token === undefined
        ? Promise.resolve()
        : extra.sendNotification({
            method: 'notifications/progress',
            params: { progressToken: token, progress: p, total, ...(message ? { message } : {}) },
          });
    const fixed = STATIC_RESULTS[req.params.name];
    if (fixed) return fixed;
    switch (req.params.name) {
      case 'test_tool_with_logging':
        await log('Tool execution started');
        await sleep(50);
        await log('Tool processing data');
        await sleep(50);
        await log('Tool execution completed');
        return text('Tool with logging executed successfully');
      case 'test_tool_with_progress':
        await progress(0, 100);
        await sleep(50);
        await progress(50, 100);
        await sleep(50);
        await progress(100, 100);
        return text('Tool with progress executed successfully');
      case 'test_progress_steps': {
        const steps = Math.min(1000, Math.max(1, Number(args.steps) || 1));
        // Each notification carries the time it was sent (process.hrtime.bigint(), ns): a
        // client in the same process measures how long it took to arrive.
        for (let i = 1; i <= steps; i++) await progress(i, steps, `sent_ns=${process.hrtime.bigint()}`);
        return text(`progress steps: ${steps}`);
      }
      case 'test_sampling':
      case 'test_elicitation':
      case 'test_elicitation_sep1034_defaults':
      case 'test_elicitation_sep1330_enums':
        return askClient(req.params.name, args, extra);
      case 'json_schema_2020_12_tool':
        return text(`json schema tool called with ${JSON.stringify(args)}`);
      case 'test_wait_for_cancel':
        await progress(0, 1);
        await new Promise<void>((resolve) => {
          const t = setTimeout(resolve, 30_000);
          extra.signal.addEventListener('abort', () => {
            clearTimeout(t);
            cancelled.push(String(extra.signal.reason ?? 'cancelled'));
            resolve();
          });
        });
        return text(extra.signal.aborted ? 'cancelled' : 'not cancelled');
      case 'test_big_result':
        return text('x'.repeat(Math.max(0, Number(args.bytes) || 0)));
      default:
        return { isError: true, content: [{ type: 'text', text: `unknown tool ${req.params.name}` }] };
    }
  });
  registerResourcesAndPrompts(server, subscriptions);
  return server;
}

export interface FixtureServer {
  /** `http://127.0.0.1:<port>/mcp` */
  url: string;
  /** The reasons of cancelled test_wait_for_cancel calls, in order. */
  cancelled: string[];
  close(): Promise<void>;
}

async function readBody(req: IncomingMessage): Promise<unknown> {
  const chunks: Buffer[] = [];
  for await (const c of req) chunks.push(c as Buffer);
  if (chunks.length === 0) return undefined;
  return JSON.parse(Buffer.concat(chunks).toString('utf8'));
}

/**
 * Starts the fixture on 127.0.0.1 (`port` 0: a free one).
 * @param opts.jsonResponse answer every POST as `application/json` (the SDK transport's
 *   `enableJsonResponse`; notifications tied to a request are then dropped), as a server
 *   that never streams: the JSON path of bench/relayed-progress.ts.
 */
export async function startFixtureServer(
  port = 0,
  opts: { jsonResponse?: boolean } = {},
): Promise<FixtureServer> {
  const transports = new Map<string, StreamableHTTPServerTransport>();
  const cancelled: string[] = [];
  let allowedHosts: string[] = [];
  const http: HttpServer = createServer(async (req, res) => {
    if (new URL(req.url ?? '/', 'http://x').pathname !== '/mcp') {
      res.writeHead(404).end();
      return;
    }
    try {
      const body = req.method === 'POST' ? await readBody(req) : undefined;
      const sid = req.headers['mcp-session-id'];
      let transport = typeof sid === 'string' ? transports.get(sid) : undefined;
      if (!transport) {
        if (typeof sid === 'string' || (body as { method?: unknown } | undefined)?.method !== 'initialize') {
          res.writeHead(typeof sid === 'string' ? 404 : 400, { 'content-type': 'application/json' });
          res.end(
            JSON.stringify({
              jsonrpc: '2.0',
              id: null,
              error: { code: -32000, message: 'no valid session' },
            }),
          );
          return;
        }
        const t = new StreamableHTTPServerTransport({
          sessionIdGenerator: () => randomUUID(),
          enableJsonResponse: opts.jsonResponse === true,
          enableDnsRebindingProtection: true,
          allowedHosts,
          onsessioninitialized: (id) => {
            transports.set(id, t);
          },
        });
        t.onclose = () => {
          if (t.sessionId) transports.delete(t.sessionId);
        };
        await buildServer(cancelled).connect(t);
        transport = t;
      }
      await transport.handleRequest(req, res, body);
    } catch (e) {
      if (!res.headersSent) res.writeHead(500, { 'content-type': 'application/json' });
      res.end(
        JSON.stringify({ jsonrpc: '2.0', id: null, error: { code: -32603, message: (e as Error).message } }),
      );
    }
  });
  await new Promise<void>((resolve) => http.listen(port, '127.0.0.1', resolve));
  const actual = (http.address() as AddressInfo).port;
  allowedHosts = [`127.0.0.1:${actual}`, `localhost:${actual}`, `[::1]:${actual}`];
  return {
    url: `http://127.0.0.1:${actual}/mcp`,
    cancelled,
    async close() {
      for (const t of transports.values()) await t.close().catch(() => undefined);
      http.closeAllConnections();
      await new Promise<void>((resolve) => http.close(() => resolve()));
    },
  };
}
