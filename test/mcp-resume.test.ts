/**
 * cmcp's own SSE streams are resumable (docs/spec/mcp.md#resumable-streams): in a client
 * session of 2025-11-25 each stream opens with a priming event (id, `retry:`), each event has an
 * id, and a client whose TCP connection dies mid-call reconnects with `GET` and `Last-Event-ID`
 * and gets every event it missed and then the result, from the stream's bounded buffer; the
 * call was not cancelled and has its one terminal entry. What no longer fits the buffer, or an
 * unknown stream, is refused `STREAM_REPLAY_UNAVAILABLE` (409). Real gateway, real
 * server-everything (a long-running operation with progress), raw HTTP on the client side so
 * the socket can be destroyed.
 */
import { type IncomingMessage, request } from 'node:http';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { Gateway } from '../src/gateway/lifecycle/start.js';
import { everythingUpstream, startInProcess, writeConfig } from './harness/gateway.js';

interface SseEvent {
  id?: string;
  retry?: number;
  data: string;
}

/** A streaming HTTP exchange: its response head and the events as they arrive. */
interface Exchange {
  res: IncomingMessage;
  events: SseEvent[];
  /** The whole body as received so far. */
  text(): string;
  ended: Promise<void>;
  kill(): void;
}

function exchange(
  url: string,
  method: string,
  headers: Record<string, string>,
  body?: unknown,
): Promise<Exchange> {
  return new Promise((resolve, reject) => {
    const req = request(url, {
      method,
      headers: {
        authorization: 'Bearer alice-token',
        accept: 'application/json, text/event-stream',
        ...(body !== undefined ? { 'content-type': 'application/json' } : {}),
        ...headers,
      },
    });
    req.on('error', () => undefined);
    req.on('response', (res) => {
      const events: SseEvent[] = [];
      let buf = '';
      let all = '';
      res.setEncoding('utf8');
      res.on('data', (chunk: string) => {
        buf += chunk;
        all += chunk;
        for (let i = buf.indexOf('\n\n'); i >= 0; i = buf.indexOf('\n\n')) {
          const block = buf.slice(0, i);
          buf = buf.slice(i + 2);
          const ev: SseEvent = { data: '' };
          for (const line of block.split('\n')) {
            const [field, ...rest] = line.split(':');
            const value = rest.join(':').replace(/^ /, '');
            if (field === 'id') ev.id = value;
            else if (field === 'retry') ev.retry = Number(value);
            else if (field === 'data') ev.data += value;
          }
          if (ev.id !== undefined || ev.data !== '') events.push(ev);
        }
      });
      res.on('error', () => undefined);
      const ended = new Promise<void>((done) => res.on('close', () => done()));
      resolve({ res, events, text: () => all, ended, kill: () => req.destroy() });
    });
    req.on('error', reject);
    req.end(body !== undefined ? JSON.stringify(body) : undefined);
  });
}

async function until(ok: () => boolean, ms = 15_000): Promise<void> {
  const end = Date.now() + ms;
  while (!ok()) {
    if (Date.now() > end) throw new Error('timed out waiting');
    await new Promise((r) => setTimeout(r, 20));
  }
}

/** Opens a client session of `version`; returns its id. */
async function initialize(url: string, version = '2025-11-25'): Promise<string> {
  const init = await exchange(
    url,
    'POST',
    { accept: 'application/json' },
    {
      jsonrpc: '2.0',
      id: 0,
      method: 'initialize',
      params: { protocolVersion: version, capabilities: {}, clientInfo: { name: 'resume', version: '1' } },
    },
  );
  await init.ended;
  const sid = init.res.headers['mcp-session-id'] as string;
  const note = await exchange(
    url,
    'POST',
    { 'mcp-session-id': sid },
    { jsonrpc: '2.0', method: 'notifications/initialized' },
  );
  await note.ended;
  return sid;
}

function longCall(url: string, sid: string, id: number) {
  return exchange(
    url,
    'POST',
    { 'mcp-session-id': sid, 'mcp-protocol-version': '2025-11-25' },
    {
      jsonrpc: '2.0',
      id,
      method: 'tools/call',
      params: {
        name: 'everything.trigger-long-running-operation',
        arguments: { duration: 2, steps: 8 },
        _meta: { progressToken: `p${id}` },
      },
    },
  );
}

const seq = (id: string | undefined) => Number(id?.slice(id.lastIndexOf('-') + 1));

describe('resumable streams of cmcp', () => {
  let gw: Gateway;
  let url: string;

  beforeAll(async () => {
    gw = await startInProcess(
      await writeConfig({
        upstreams: [everythingUpstream('everything')],
        extra: { streams: { retry_ms: 250, replay_events: 64 } },
      }),
    );
    url = `${gw.url}/mcp`;
  }, 60_000);
  afterAll(async () => {
    await gw?.close();
  });

  it('a client whose TCP connection dies mid-call resumes with Last-Event-ID and misses nothing', async () => {
    const sid = await initialize(url);
    const call = await longCall(url, sid, 1);
    expect(call.res.headers['content-type']).toBe('text/event-stream');
    // The priming event: an id and the configured retry, no data.
    await until(() => call.events.length >= 2);
    expect(call.events[0]).toMatchObject({ retry: 250, data: '' });
    expect(call.events[0]?.id).toMatch(/^[A-Za-z0-9_-]{12}-1$/);
    expect(JSON.parse(call.events[1]?.data ?? '{}').method).toBe('notifications/progress');
    const last = call.events.at(-1)?.id as string;
    call.kill();
    // Progress goes on meanwhile (kept for the replay); then the client comes back.
    await new Promise((r) => setTimeout(r, 600));
    const resumed = await exchange(url, 'GET', {
      accept: 'text/event-stream',
      'mcp-session-id': sid,
      'last-event-id': last,
    });
    expect(resumed.res.statusCode).toBe(200);
    await resumed.ended;
    const ids = resumed.events.map((e) => seq(e.id));
    // Exactly the events after the last one seen, none skipped, none twice.
    expect(ids).toEqual(ids.map((_, i) => seq(last) + 1 + i));
    const result = JSON.parse(resumed.events.at(-1)?.data ?? '{}');
    expect(result).toMatchObject({ jsonrpc: '2.0', id: 1, result: { content: expect.any(Array) } });
    expect(resumed.events.some((e) => e.data.includes('notifications/progress'))).toBe(true);
    // The call was not cancelled: its one terminal entry says completed.
    const chains = gw.db
      .prepare<[], { chain_id: string }>(
        "SELECT DISTINCT chain_id FROM audit_entries WHERE entry_type = 'tool_call'",
      )
      .all();
    const calls = chains
      .flatMap((c) => gw.chain.entries(c.chain_id))
      .filter(
        (e) => e.entry_type === 'tool_call' && e.tool_name === 'everything.trigger-long-running-operation',
      );
    expect(calls.map((e) => [e.disposition, e.error_code])).toEqual([['completed', null]]);
    // Resuming the ended stream again from its last event: nothing more (204).
    const again = await exchange(url, 'GET', {
      accept: 'text/event-stream',
      'mcp-session-id': sid,
      'last-event-id': resumed.events.at(-1)?.id as string,
    });
    expect(again.res.statusCode).toBe(204);
  }, 30_000);

  it('the standalone stream, broken off, is resumed with what was sent meanwhile', async () => {
    const sid = await initialize(url);
    const post = async (id: number, method: string, params: Record<string, unknown>) => {
      const r = await exchange(
        url,
        'POST',
        { 'mcp-session-id': sid, 'mcp-protocol-version': '2025-11-25', accept: 'application/json' },
        { jsonrpc: '2.0', id, method, params },
      );
      await r.ended;
    };
    // A log level and simulated logging on the session's own connection: a log message every 5 s,
    // with no request in flight, goes to the standalone stream.
    await post(10, 'logging/setLevel', { level: 'debug' });
    const standalone = await exchange(url, 'GET', { accept: 'text/event-stream', 'mcp-session-id': sid });
    await until(() => standalone.events.length >= 1);
    const primed = standalone.events[0]?.id as string;
    expect(primed).toMatch(/-1$/);
    await post(11, 'tools/call', { name: 'everything.toggle-simulated-logging', arguments: {} });
    standalone.kill();
    // A log message comes while no standalone stream is open: it is kept for the replay.
    await new Promise((r) => setTimeout(r, 6000));
    const resumed = await exchange(url, 'GET', {
      accept: 'text/event-stream',
      'mcp-session-id': sid,
      'last-event-id': primed,
    });
    expect(resumed.res.statusCode).toBe(200);
    await until(() => resumed.events.some((e) => e.data.includes('notifications/message')));
    const ids = resumed.events.map((e) => seq(e.id));
    expect(ids[0]).toBe(2);
    expect(ids).toEqual(ids.map((_, i) => 2 + i));
    resumed.kill();
  }, 30_000);

  it('refuses what no longer fits the buffer, and an unknown stream, with STREAM_REPLAY_UNAVAILABLE', async () => {
    const sid = await initialize(url);
    for (const lastEventId of ['AAAAAAAAAAAA-1', 'not-an-id']) {
      const r = await exchange(url, 'GET', {
        accept: 'text/event-stream',
        'mcp-session-id': sid,
        'last-event-id': lastEventId,
      });
      expect(r.res.statusCode).toBe(409);
      await r.ended;
    }
    const small = await startInProcess(
      await writeConfig({
        upstreams: [everythingUpstream('everything')],
        extra: { streams: { replay_events: 2 } },
      }),
    );
    try {
      const smallUrl = `${small.url}/mcp`;
      const s = await initialize(smallUrl);
      const call = await longCall(smallUrl, s, 2);
      await until(() => call.events.length >= 2);
      const first = call.events[0]?.id as string;
      await call.ended;
      const r = await exchange(smallUrl, 'GET', {
        accept: 'text/event-stream',
        'mcp-session-id': s,
        'last-event-id': first,
      });
      expect(r.res.statusCode).toBe(409);
      await r.ended;
      const body = r.text();
      expect(body).toContain('STREAM_REPLAY_UNAVAILABLE');
      expect(body).toContain('no longer fit');
    } finally {
      await small.close();
    }
  }, 30_000);

  it('a client session of an older revision gets events without ids', async () => {
    const sid = await initialize(url, '2025-06-18');
    const call = await exchange(
      url,
      'POST',
      { 'mcp-session-id': sid, 'mcp-protocol-version': '2025-06-18' },
      {
        jsonrpc: '2.0',
        id: 3,
        method: 'tools/call',
        params: { name: 'everything.echo', arguments: { message: 'x' } },
      },
    );
    await call.ended;
    expect(call.events.length).toBeGreaterThan(0);
    expect(call.events.every((e) => e.id === undefined)).toBe(true);
  });
});
