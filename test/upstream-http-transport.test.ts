/**
 * The gateway's own Streamable HTTP client transport (src/upstream/http-transport.ts,
 * event-stream.ts). The event-stream reader is fed bytes cut exactly where a read can cut them
 * (inside an event, inside a UTF-8 sequence, between CR and LF); the transport talks to a real
 * HTTP server on 127.0.0.1 that writes its answers by hand, so the bytes on the wire are the
 * test's: session and protocol headers, a 1.5 MB event in 64 KiB writes, keep-alive comments,
 * the cap, a stream that ends before its response, the standalone GET stream, DELETE on close.
 */
import { createServer, type IncomingMessage, type Server, type ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';
import { Readable } from 'node:stream';
import { StreamableHTTPError } from '@modelcontextprotocol/sdk/client/streamableHttp.js';
import type { JSONRPCMessage } from '@modelcontextprotocol/sdk/types.js';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { readEventStream } from '../src/upstream/event-stream.js';
import { UpstreamHttpTransport } from '../src/upstream/http-transport.js';
import { type CallContext, callContext, ResultTooLargeError } from '../src/upstream/result-cap.js';

/** Every message readEventStream delivers from `chunks`, read as separate chunks. */
async function events(chunks: (string | Buffer)[]): Promise<{ messages: unknown[]; invalid: Error[] }> {
  const messages: unknown[] = [];
  const invalid: Error[] = [];
  const body = Readable.from(chunks.map((c) => (typeof c === 'string' ? Buffer.from(c) : c)));
  const how = await readEventStream(body, {
    message: (m) => messages.push(m),
    invalid: (e) => invalid.push(e),
  });
  expect(how).toEqual({ end: 'ended' });
  return { messages, invalid };
}

const note = (text: string) => ({
  jsonrpc: '2.0',
  method: 'notifications/message',
  params: { level: 'info', data: text },
});
const event = (m: object) => `data: ${JSON.stringify(m)}\n\n`;

describe('readEventStream', () => {
  it('an event cut inside its data line and inside a UTF-8 sequence arrives whole', async () => {
    const text = 'grüße 🦊 end';
    const bytes = Buffer.from(event(note(text)));
    const fox = bytes.indexOf(Buffer.from('🦊'));
    const u = bytes.indexOf(Buffer.from('ü'));
    // Cuts: after "da", inside ü (2 bytes), inside 🦊 (4 bytes: after its 1st and 3rd byte), before the blank line.
    const cuts = [2, u + 1, fox + 1, fox + 3, bytes.length - 1];
    const parts = cuts.map((c, i) => bytes.subarray(i === 0 ? 0 : (cuts[i - 1] as number), c));
    parts.push(bytes.subarray(bytes.length - 1));
    expect(Buffer.concat(parts).equals(bytes)).toBe(true);
    const { messages, invalid } = await events(parts);
    expect(invalid).toEqual([]);
    expect(messages).toEqual([note(text)]);
  });

  it('CRLF and CR line endings, a CR and its LF in different reads', async () => {
    const a = `data: ${JSON.stringify(note('a'))}\r\n\r\n`;
    const b = `data: ${JSON.stringify(note('b'))}\r\r`;
    const c = `data: ${JSON.stringify(note('c'))}\r\n\r\n`;
    const { messages } = await events([
      a.slice(0, -3),
      a.slice(-3, -2),
      a.slice(-2),
      b,
      c.slice(0, -1),
      c.slice(-1),
    ]);
    expect(messages).toEqual([note('a'), note('b'), note('c')]);
  });

  it('comments, keep-alives, events without data and events of another type deliver nothing', async () => {
    const { messages, invalid } = await events([
      ': keep-alive\n\n',
      'id: 7\n\n',
      'retry: 500\n\n',
      `event: other\ndata: ${JSON.stringify(note('other'))}\n\n`,
      `: before\n${event(note('one'))}`,
      `event: message\nid: 8\ndata: ${JSON.stringify(note('two'))}\n\n`,
    ]);
    expect(invalid).toEqual([]);
    expect(messages).toEqual([note('one'), note('two')]);
  });

  it('data that is not a JSON-RPC message is reported and the stream goes on', async () => {
    const { messages, invalid } = await events([
      'data: {not json\n\n',
      'data: {"jsonrpc":"1.0"}\n\n',
      event(note('after')),
    ]);
    expect(invalid).toHaveLength(2);
    expect(messages).toEqual([note('after')]);
  });
});

type Handler = (req: IncomingMessage, body: Record<string, unknown> | null, res: ServerResponse) => void;

/** A hand-written upstream: each request goes to `handler`; every request is logged. */
let handler: Handler;
const seen: { method: string; headers: IncomingMessage['headers']; body: Record<string, unknown> | null }[] =
  [];
let server: Server;
let url: URL;

beforeAll(async () => {
  server = createServer(async (req, res) => {
    const chunks: Buffer[] = [];
    for await (const c of req) chunks.push(c as Buffer);
    const text = Buffer.concat(chunks).toString('utf8');
    const body = text ? (JSON.parse(text) as Record<string, unknown>) : null;
    seen.push({ method: req.method ?? '', headers: req.headers, body });
    handler(req, body, res);
  });
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
  url = new URL(`http://127.0.0.1:${(server.address() as AddressInfo).port}/mcp`);
});
afterAll(async () => {
  server.closeAllConnections();
  await new Promise<void>((r) => server.close(() => r()));
});

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

/** A started transport with its messages and errors collected. */
async function open(maxResultBytes = 2 * 1024 * 1024) {
  const messages: JSONRPCMessage[] = [];
  const errors: Error[] = [];
  const overflows: (CallContext | undefined)[] = [];
  const t = new UpstreamHttpTransport(url, {
    headers: { Authorization: 'Bearer up-token' },
    maxResultBytes,
    onOverflow: (ctx) => overflows.push(ctx),
  });
  t.onmessage = (m) => void messages.push(m);
  t.onerror = (e) => void errors.push(e);
  await t.start();
  return { t, messages, errors, overflows };
}

/** Resolves once `pred` holds (polled), or fails after `ms`. */
async function until(pred: () => boolean, ms = 5000): Promise<void> {
  const end = Date.now() + ms;
  while (!pred()) {
    if (Date.now() > end) throw new Error('condition not reached');
    await sleep(5);
  }
}

const sse = (res: ServerResponse, extra: Record<string, string> = {}) =>
  res.writeHead(200, { 'content-type': 'text/event-stream', ...extra });

describe('UpstreamHttpTransport', () => {
  it('takes the session id, then sends it with the protocol version and the configured headers; JSON answers', async () => {
    seen.length = 0;
    handler = (req, body, res) => {
      if (body?.method === 'notifications/initialized') return void res.writeHead(202).end();
      if (req.method === 'GET') return void res.writeHead(405).end();
      res.writeHead(200, { 'content-type': 'application/json; charset=utf-8', 'mcp-session-id': 'sess-1' });
      res.end(JSON.stringify({ jsonrpc: '2.0', id: body?.id, result: { echoed: body?.method } }));
    };
    const { t, messages, errors } = await open();
    await t.send({ jsonrpc: '2.0', id: 1, method: 'initialize', params: {} });
    expect(t.sessionId).toBe('sess-1');
    t.setProtocolVersion('2025-11-25');
    await t.send({ jsonrpc: '2.0', method: 'notifications/initialized' });
    await t.send({ jsonrpc: '2.0', id: 2, method: 'tools/list' });
    expect(messages).toEqual([
      { jsonrpc: '2.0', id: 1, result: { echoed: 'initialize' } },
      { jsonrpc: '2.0', id: 2, result: { echoed: 'tools/list' } },
    ]);
    await until(() => seen.some((s) => s.method === 'GET'));
    const [init, initialized, list] = seen.filter((s) => s.method === 'POST');
    expect(init?.headers['mcp-session-id']).toBeUndefined();
    expect(init?.headers.accept).toBe('application/json, text/event-stream');
    expect(init?.headers.authorization).toBe('Bearer up-token');
    expect(initialized?.headers['mcp-session-id']).toBe('sess-1');
    expect(list?.headers['mcp-protocol-version']).toBe('2025-11-25');
    // The upstream offers no standalone stream (405): nothing is reported.
    const get = seen.find((s) => s.method === 'GET');
    expect(get?.headers.accept).toBe('text/event-stream');
    expect(get?.headers['mcp-session-id']).toBe('sess-1');
    await sleep(50);
    expect(errors).toEqual([]);
    seen.length = 0;
    handler = (_req, _body, res) => void res.writeHead(200).end();
    await t.close();
    expect(seen.map((s) => [s.method, s.headers['mcp-session-id'], s.headers.authorization])).toEqual([
      ['DELETE', 'sess-1', 'Bearer up-token'],
    ]);
  });

  it('a 1.5 MB event written in 64 KiB pieces with keep-alives before it arrives intact; past the cap the read stops', async () => {
    const text = 'x€'.repeat(500_000); // 2 million bytes of UTF-8 in one data line
    handler = (_req, body, res) => {
      sse(res);
      res.write(': keep-alive\n\n');
      const bytes = Buffer.from(event({ jsonrpc: '2.0', id: body?.id, result: { text } }));
      let at = 0;
      res.on('error', () => undefined);
      const next = () => {
        if (res.destroyed) return;
        if (at >= bytes.length) return void res.end();
        const piece = bytes.subarray(at, at + 65_536);
        at += piece.length;
        res.write(piece, () => setImmediate(next));
      };
      next();
    };
    const big = await open(3 * 1024 * 1024);
    await big.t.send({ jsonrpc: '2.0', id: 5, method: 'tools/call', params: {} });
    await until(() => big.messages.length === 1);
    expect((big.messages[0] as unknown as { result: { text: string } }).result.text === text).toBe(true);
    expect(big.errors).toEqual([]);
    await big.t.close();

    const small = await open(1024 * 1024);
    const ctx: CallContext = { overflowed: false, cutOff: false };
    await callContext.run(ctx, () =>
      small.t.send({ jsonrpc: '2.0', id: 6, method: 'tools/call', params: {} }),
    );
    await until(() => small.overflows.length === 1);
    expect(small.overflows[0]).toBe(ctx);
    expect(small.messages).toEqual([]);
    await small.t.close();
  });

  it('the cap bounds each event, not the stream: many progress events and a small result pass; one big event is cut', async () => {
    const progress = (i: number) =>
      event({
        jsonrpc: '2.0',
        method: 'notifications/progress',
        params: { progressToken: 1, progress: i, message: 'p'.repeat(100) },
      });
    handler = (_req, body, res) => {
      sse(res);
      let out = '';
      for (let i = 0; i < 3000; i++) out += progress(i);
      res.write(out);
      const size = body?.id === 11 ? 30_000 : 10;
      res.end(event({ jsonrpc: '2.0', id: body?.id, result: { text: 'r'.repeat(size) } }));
    };
    const { t, messages, overflows } = await open(20_000);
    const ok: CallContext = { overflowed: false, cutOff: false };
    await callContext.run(ok, () => t.send({ jsonrpc: '2.0', id: 10, method: 'tools/call', params: {} }));
    await until(() => messages.length === 3001);
    expect(messages.at(-1)).toEqual({ jsonrpc: '2.0', id: 10, result: { text: 'r'.repeat(10) } });
    expect(overflows).toEqual([]);
    const big: CallContext = { overflowed: false, cutOff: false };
    await callContext.run(big, () => t.send({ jsonrpc: '2.0', id: 11, method: 'tools/call', params: {} }));
    await until(() => overflows.length === 1);
    expect(overflows[0]).toBe(big);
    expect(messages.filter((m) => 'id' in m && m.id === 11)).toEqual([]);
    await t.close();
  });

  it('an event that never completes is cut once its bytes pass the cap', async () => {
    handler = (_req, _body, res) => {
      sse(res);
      res.on('error', () => undefined);
      res.write(`data: {"jsonrpc":"2.0","id":12,"result":{"text":"${'z'.repeat(64_000)}`);
    };
    const { t, overflows } = await open(20_000);
    const ctx: CallContext = { overflowed: false, cutOff: false };
    await callContext.run(ctx, () => t.send({ jsonrpc: '2.0', id: 12, method: 'tools/call', params: {} }));
    await until(() => overflows.length === 1);
    expect(overflows[0]).toBe(ctx);
    await t.close();
  });

  it('a JSON answer over the cap fails the send with ResultTooLargeError', async () => {
    handler = (_req, body, res) => {
      res.writeHead(200, { 'content-type': 'application/json' });
      res.end(JSON.stringify({ jsonrpc: '2.0', id: body?.id, result: { text: 'y'.repeat(5000) } }));
    };
    const { t, overflows } = await open(4096);
    const ctx: CallContext = { overflowed: false, cutOff: false };
    const e = await callContext
      .run(ctx, () => t.send({ jsonrpc: '2.0', id: 7, method: 'tools/call', params: {} }))
      .catch((x) => x);
    expect(e).toBeInstanceOf(ResultTooLargeError);
    expect(overflows).toEqual([ctx]);
    await t.close();
  });

  it('an event stream that ends before its response fails the call at once; one with it does not', async () => {
    handler = (_req, body, res) => {
      sse(res);
      res.write(
        event({
          jsonrpc: '2.0',
          method: 'notifications/progress',
          params: { progressToken: 1, progress: 1 },
        }),
      );
      if (body?.id === 9) res.write(event({ jsonrpc: '2.0', id: 9, result: {} }));
      res.end();
    };
    const { t, messages } = await open();
    const reasons: string[] = [];
    const ctx: CallContext = { overflowed: false, cutOff: false, fail: (r) => reasons.push(r) };
    await callContext.run(ctx, () => t.send({ jsonrpc: '2.0', id: 8, method: 'tools/call', params: {} }));
    await until(() => reasons.length === 1);
    expect(reasons).toEqual(['the upstream ended its event stream before the response']);
    expect(messages).toHaveLength(1);
    const answered: CallContext = { overflowed: false, cutOff: false, fail: (r) => reasons.push(r) };
    await callContext.run(answered, () =>
      t.send({ jsonrpc: '2.0', id: 9, method: 'tools/call', params: {} }),
    );
    await until(() => messages.length === 3);
    await sleep(50);
    expect(reasons).toHaveLength(1);
    await t.close();
  });

  it('an expired session (404) is a StreamableHTTPError 404, its id kept (never sent session-less), not ended again on close', async () => {
    handler = (_req, body, res) => {
      if (body?.method === 'initialize') {
        res.writeHead(200, { 'content-type': 'application/json', 'mcp-session-id': 'gone' });
        return void res.end(JSON.stringify({ jsonrpc: '2.0', id: body.id, result: {} }));
      }
      res.writeHead(404, { 'content-type': 'application/json' }).end('{"error":"unknown session"}');
    };
    const { t } = await open();
    await t.send({ jsonrpc: '2.0', id: 1, method: 'initialize', params: {} });
    const e = await t.send({ jsonrpc: '2.0', id: 2, method: 'tools/list' }).catch((x) => x);
    expect(e).toBeInstanceOf(StreamableHTTPError);
    expect((e as StreamableHTTPError).code).toBe(404);
    // The owner (Upstream) initialises a new session; until then the id still goes out.
    expect(t.sessionId).toBe('gone');
    seen.length = 0;
    const again = await t.send({ jsonrpc: '2.0', id: 3, method: 'ping' }).catch((x) => x);
    expect((again as StreamableHTTPError).code).toBe(404);
    expect(seen.map((s) => s.headers['mcp-session-id'])).toEqual(['gone']);
    seen.length = 0;
    await t.close();
    expect(seen).toEqual([]);
  });

  it('the standalone stream delivers what belongs to no request and is opened again with Last-Event-ID', async () => {
    seen.length = 0;
    let gets = 0;
    handler = (req, body, res) => {
      if (req.method === 'POST') {
        if (body?.method === 'initialize') {
          res.writeHead(200, { 'content-type': 'application/json', 'mcp-session-id': 's-get' });
          return void res.end(JSON.stringify({ jsonrpc: '2.0', id: body.id, result: {} }));
        }
        return void res.writeHead(202).end();
      }
      if (req.method === 'DELETE') return void res.writeHead(405).end();
      gets++;
      sse(res);
      // retry: keeps the reopening fast; the first stream ends after one event.
      res.write(`retry: 20\nid: ev-${gets}\ndata: ${JSON.stringify(note(`get ${gets}`))}\n\n`);
      if (gets === 1) res.end();
    };
    const { t, messages } = await open();
    await t.send({ jsonrpc: '2.0', id: 1, method: 'initialize', params: {} });
    await t.send({ jsonrpc: '2.0', method: 'notifications/initialized' });
    await until(() => messages.length === 3);
    expect(messages.slice(1)).toEqual([note('get 1'), note('get 2')]);
    const getHeaders = seen.filter((s) => s.method === 'GET').map((s) => s.headers['last-event-id']);
    expect(getHeaders).toEqual([undefined, 'ev-1']);
    await t.close();
    expect(seen.at(-1)?.method).toBe('DELETE');
  });

  it('the standalone stream bounds each event: one past the cap closes that stream (reported), not the calls; it is opened again', async () => {
    seen.length = 0;
    let gets = 0;
    const closed: boolean[] = [];
    handler = (req, body, res) => {
      if (req.method === 'POST') {
        if (body?.method === 'initialize') {
          res.writeHead(200, { 'content-type': 'application/json', 'mcp-session-id': 's-get-cap' });
          return void res.end(JSON.stringify({ jsonrpc: '2.0', id: body.id, result: {} }));
        }
        return void res.writeHead(202).end();
      }
      if (req.method === 'DELETE') return void res.writeHead(405).end();
      gets++;
      sse(res);
      res.on('close', () => closed.push(true));
      if (gets > 1) return void res.write(`data: ${JSON.stringify(note('small'))}\n\n`);
      // An event that never ends: without the cap the gateway would buffer it without bound.
      res.write(`retry: 20\ndata: "${'x'.repeat(16 * 1024)}`);
      const more = setInterval(() => res.write('y'.repeat(16 * 1024)), 1);
      res.on('close', () => clearInterval(more));
    };
    const { t, messages, errors, overflows } = await open(64 * 1024);
    await t.send({ jsonrpc: '2.0', id: 1, method: 'initialize', params: {} });
    await t.send({ jsonrpc: '2.0', method: 'notifications/initialized' });
    await until(() => messages.some((m) => JSON.stringify(m).includes('small')));
    expect(closed.length).toBeGreaterThanOrEqual(1);
    expect(errors.map((e) => e.message)).toContain(
      'standalone SSE stream: an event exceeds 65536 bytes; stream closed',
    );
    // The cap's call-side handler is for POST answers only: no call was marked over the cap.
    expect(overflows).toEqual([]);
    await t.close();
  });
});
