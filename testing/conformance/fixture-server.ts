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
  CompleteRequestSchema,
  GetPromptRequestSchema,
  ListPromptsRequestSchema,
  ListResourcesRequestSchema,
  ListResourceTemplatesRequestSchema,
  ListToolsRequestSchema,
  ReadResourceRequestSchema,
  SetLevelRequestSchema,
  SubscribeRequestSchema,
  UnsubscribeRequestSchema,
} from '@modelcontextprotocol/sdk/types.js';

/** A 1×1 red PNG. */
export const RED_PIXEL_PNG =
  'iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mP8z8DwHwAFBQIAX8jx0gAAAABJRU5ErkJggg==';
/** 8 samples of silence, 8 kHz mono 8-bit PCM WAV. */
export const SILENT_WAV = Buffer.concat([
  Buffer.from('RIFF'),
  Buffer.from([44, 0, 0, 0]),
  Buffer.from('WAVEfmt '),
  Buffer.from([16, 0, 0, 0, 1, 0, 1, 0, 0x40, 0x1f, 0, 0, 0x40, 0x1f, 0, 0, 1, 0, 8, 0]),
  Buffer.from('data'),
  Buffer.from([8, 0, 0, 0]),
  Buffer.alloc(8, 0x80),
]).toString('base64');

const noArgs = { type: 'object', properties: {} } as const;
const text = (t: string): CallToolResult => ({ content: [{ type: 'text', text: t }] });
const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

const TOOLS = [
  { name: 'test_simple_text', description: 'Returns simple text', inputSchema: noArgs },
  { name: 'test_image_content', description: 'Returns an image', inputSchema: noArgs },
  { name: 'test_audio_content', description: 'Returns audio', inputSchema: noArgs },
  { name: 'test_embedded_resource', description: 'Returns an embedded resource', inputSchema: noArgs },
  {
    name: 'test_multiple_content_types',
    description: 'Returns text, image and resource',
    inputSchema: noArgs,
  },
  { name: 'test_tool_with_logging', description: 'Logs three messages while it runs', inputSchema: noArgs },
  { name: 'test_error_handling', description: 'Always fails', inputSchema: noArgs },
  { name: 'test_tool_with_progress', description: 'Reports progress 0, 50, 100', inputSchema: noArgs },
  {
    name: 'test_sampling',
    description: 'Asks the client to sample an LLM',
    inputSchema: { type: 'object', properties: { prompt: { type: 'string' } }, required: ['prompt'] },
  },
  {
    name: 'test_elicitation',
    description: 'Asks the user for input',
    inputSchema: { type: 'object', properties: { message: { type: 'string' } }, required: ['message'] },
  },
  {
    name: 'test_elicitation_sep1034_defaults',
    description: 'Elicitation with defaults',
    inputSchema: noArgs,
  },
  {
    name: 'test_elicitation_sep1330_enums',
    description: 'Elicitation with every enum form',
    inputSchema: noArgs,
  },
  {
    name: 'json_schema_2020_12_tool',
    description: 'Tool with JSON Schema 2020-12 features',
    inputSchema: {
      $schema: 'https://json-schema.org/draft/2020-12/schema',
      type: 'object',
      $defs: {
        address: { type: 'object', properties: { street: { type: 'string' }, city: { type: 'string' } } },
      },
      properties: { name: { type: 'string' }, address: { $ref: '#/$defs/address' } },
      additionalProperties: false,
    },
  },
  {
    name: 'test_reconnection',
    description: 'Answers on its POST stream (SSE polling scenario)',
    inputSchema: noArgs,
  },
  {
    name: 'test_big_result',
    description: 'Returns a text of `bytes` bytes',
    inputSchema: { type: 'object', properties: { bytes: { type: 'integer' } }, required: ['bytes'] },
  },
  { name: 'test_wait_for_cancel', description: 'Runs until cancelled (up to 30 s)', inputSchema: noArgs },
  {
    name: 'test_progress_steps',
    description: 'Reports `steps` progress notifications back to back',
    inputSchema: { type: 'object', properties: { steps: { type: 'integer' } }, required: ['steps'] },
  },
];

const ELICIT_ENUMS = {
  type: 'object',
  properties: {
    untitledSingle: { type: 'string', enum: ['option1', 'option2', 'option3'] },
    titledSingle: {
      type: 'string',
      oneOf: [
        { const: 'value1', title: 'First Option' },
        { const: 'value2', title: 'Second Option' },
        { const: 'value3', title: 'Third Option' },
      ],
    },
    legacyEnum: {
      type: 'string',
      enum: ['opt1', 'opt2', 'opt3'],
      enumNames: ['Option One', 'Option Two', 'Option Three'],
    },
    untitledMulti: { type: 'array', items: { type: 'string', enum: ['option1', 'option2', 'option3'] } },
    titledMulti: {
      type: 'array',
      items: {
        anyOf: [
          { const: 'value1', title: 'First Choice' },
          { const: 'value2', title: 'Second Choice' },
          { const: 'value3', title: 'Third Choice' },
        ],
      },
    },
  },
};

const ELICIT_DEFAULTS = {
  type: 'object',
  properties: {
    name: { type: 'string', default: 'John Doe' },
    age: { type: 'integer', default: 30 },
    score: { type: 'number', default: 95.5 },
    status: { type: 'string', enum: ['active', 'inactive', 'pending'], default: 'active' },
    verified: { type: 'boolean', default: true },
  },
};

const LEVELS = ['debug', 'info', 'notice', 'warning', 'error', 'critical', 'alert', 'emergency'];

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
    switch (req.params.name) {
      case 'test_simple_text':
        return text('This is a simple text response for testing.');
      case 'test_image_content':
        return { content: [{ type: 'image', data: RED_PIXEL_PNG, mimeType: 'image/png' }] };
      case 'test_audio_content':
        return { content: [{ type: 'audio', data: SILENT_WAV, mimeType: 'audio/wav' }] };
      case 'test_embedded_resource':
        return {
          content: [
            {
              type: 'resource',
              resource: {
                uri: 'test://embedded-resource',
                mimeType: 'text/plain',
                text: 'This is an embedded resource content.',
              },
            },
          ],
        };
      case 'test_multiple_content_types':
        return {
          content: [
            { type: 'text', text: 'Multiple content types test:' },
            { type: 'image', data: RED_PIXEL_PNG, mimeType: 'image/png' },
            {
              type: 'resource',
              resource: {
                uri: 'test://mixed-content-resource',
                mimeType: 'application/json',
                text: JSON.stringify({ test: 'data', value: 123 }),
              },
            },
          ],
        };
      case 'test_tool_with_logging':
        await log('Tool execution started');
        await sleep(50);
        await log('Tool processing data');
        await sleep(50);
        await log('Tool execution completed');
        return text('Tool with logging executed successfully');
      case 'test_error_handling':
        return {
          isError: true,
          content: [{ type: 'text', text: 'This tool intentionally returns an error for testing' }],
        };
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
      case 'test_sampling': {
        const r = await extra.sendRequest(
          {
            method: 'sampling/createMessage',
            params: {
              messages: [{ role: 'user', content: { type: 'text', text: String(args.prompt) } }],
              maxTokens: 100,
            },
          },
          (await import('@modelcontextprotocol/sdk/types.js')).CreateMessageResultSchema,
        );
        const answer = r.content as { type: string; text?: string };
        return text(`LLM response: ${answer.type === 'text' ? answer.text : JSON.stringify(answer)}`);
      }
      case 'test_elicitation':
      case 'test_elicitation_sep1034_defaults':
      case 'test_elicitation_sep1330_enums': {
        const requestedSchema =
          req.params.name === 'test_elicitation'
            ? {
                type: 'object',
                properties: {
                  username: { type: 'string', description: "User's response" },
                  email: { type: 'string', description: "User's email address" },
                },
                required: ['username', 'email'],
              }
            : req.params.name === 'test_elicitation_sep1034_defaults'
              ? ELICIT_DEFAULTS
              : ELICIT_ENUMS;
        const message =
          req.params.name === 'test_elicitation'
            ? String(args.message)
            : 'Please review and update the form fields';
        const r = await extra.sendRequest(
          { method: 'elicitation/create', params: { message, requestedSchema } as never },
          (await import('@modelcontextprotocol/sdk/types.js')).ElicitResultSchema,
        );
        if (req.params.name === 'test_elicitation')
          return text(`User response: action=${r.action}, content=${JSON.stringify(r.content ?? {})}`);
        return text(`Elicitation completed: action=${r.action}, content=${JSON.stringify(r.content ?? {})}`);
      }
      case 'json_schema_2020_12_tool':
        return text(`json schema tool called with ${JSON.stringify(args)}`);
      case 'test_reconnection':
        return text('reconnection test completed');
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

function registerResourcesAndPrompts(server: Server, subscriptions: Set<string>): void {
  server.setRequestHandler(ListResourcesRequestSchema, async () => ({
    resources: [
      {
        uri: 'test://static-text',
        name: 'Static text',
        description: 'A static text resource',
        mimeType: 'text/plain',
      },
      {
        uri: 'test://static-binary',
        name: 'Static binary',
        description: 'A static PNG',
        mimeType: 'image/png',
      },
      {
        uri: 'test://watched-resource',
        name: 'Watched',
        description: 'A resource to subscribe to',
        mimeType: 'text/plain',
      },
    ],
  }));
  server.setRequestHandler(ListResourceTemplatesRequestSchema, async () => ({
    resourceTemplates: [
      {
        uriTemplate: 'test://template/{id}/data',
        name: 'Template data',
        description: 'Data for one id',
        mimeType: 'application/json',
      },
    ],
  }));
  server.setRequestHandler(ReadResourceRequestSchema, async (req) => {
    const uri = req.params.uri;
    if (uri === 'test://static-text')
      return {
        contents: [{ uri, mimeType: 'text/plain', text: 'This is the content of the static text resource.' }],
      };
    if (uri === 'test://static-binary')
      return { contents: [{ uri, mimeType: 'image/png', blob: RED_PIXEL_PNG }] };
    if (uri === 'test://watched-resource')
      return { contents: [{ uri, mimeType: 'text/plain', text: 'watched' }] };
    const m = /^test:\/\/template\/([^/]+)\/data$/.exec(uri);
    if (m) {
      const id = decodeURIComponent(m[1] as string);
      return {
        contents: [
          {
            uri,
            mimeType: 'application/json',
            text: JSON.stringify({ id, templateTest: true, data: `Data for ID: ${id}` }),
          },
        ],
      };
    }
    throw Object.assign(new Error(`resource not found: ${uri}`), { code: -32002 });
  });
  server.setRequestHandler(SubscribeRequestSchema, async (req) => {
    subscriptions.add(req.params.uri);
    return {};
  });
  server.setRequestHandler(UnsubscribeRequestSchema, async (req) => {
    subscriptions.delete(req.params.uri);
    return {};
  });
  server.setRequestHandler(ListPromptsRequestSchema, async () => ({
    prompts: [
      { name: 'test_simple_prompt', description: 'A simple prompt' },
      {
        name: 'test_prompt_with_arguments',
        description: 'A prompt with two arguments',
        arguments: [
          { name: 'arg1', description: 'First test argument', required: true },
          { name: 'arg2', description: 'Second test argument', required: true },
        ],
      },
      {
        name: 'test_prompt_with_embedded_resource',
        description: 'A prompt embedding a resource',
        arguments: [{ name: 'resourceUri', description: 'URI of the resource to embed', required: true }],
      },
      { name: 'test_prompt_with_image', description: 'A prompt with an image' },
    ],
  }));
  server.setRequestHandler(GetPromptRequestSchema, async (req) => {
    const a = req.params.arguments ?? {};
    switch (req.params.name) {
      case 'test_simple_prompt':
        return {
          messages: [
            { role: 'user', content: { type: 'text', text: 'This is a simple prompt for testing.' } },
          ],
        };
      case 'test_prompt_with_arguments':
        return {
          messages: [
            {
              role: 'user',
              content: { type: 'text', text: `Prompt with arguments: arg1='${a.arg1}', arg2='${a.arg2}'` },
            },
          ],
        };
      case 'test_prompt_with_embedded_resource':
        return {
          messages: [
            {
              role: 'user',
              content: {
                type: 'resource',
                resource: {
                  uri: String(a.resourceUri),
                  mimeType: 'text/plain',
                  text: 'Embedded resource content for testing.',
                },
              },
            },
            { role: 'user', content: { type: 'text', text: 'Please process the embedded resource above.' } },
          ],
        };
      case 'test_prompt_with_image':
        return {
          messages: [
            { role: 'user', content: { type: 'image', data: RED_PIXEL_PNG, mimeType: 'image/png' } },
            { role: 'user', content: { type: 'text', text: 'Please analyze the image above.' } },
          ],
        };
      default:
        throw Object.assign(new Error(`unknown prompt ${req.params.name}`), { code: -32602 });
    }
  });
  server.setRequestHandler(CompleteRequestSchema, async (req) => {
    const value = req.params.argument.value;
    const values = ['paris', 'park', 'party'].filter((v) => v.startsWith(value));
    return { completion: { values, total: values.length, hasMore: false } };
  });
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

/** Starts the fixture on 127.0.0.1 (`port` 0: a free one). */
export async function startFixtureServer(port = 0): Promise<FixtureServer> {
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
