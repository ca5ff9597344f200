/**
 * src/gateway/agent/mcp/stream-channel.ts on a real HTTP server and client on 127.0.0.1: what one
 * turn of the loop writes goes out together once the turn's promise jobs have run (the head,
 * the notifications and a result reached through promise jobs: one write, as on the JSON
 * path), and a notification whose result comes in a later turn is sent at the end of its own
 * turn, not held for the result.
 */
import { createServer, get, type IncomingMessage, type Server, type ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';
import { afterEach, describe, expect, it } from 'vitest';
import { InflightRequests } from '../src/gateway/agent/mcp/inflight.js';
import { StreamChannel } from '../src/gateway/agent/mcp/stream-channel.js';

let server: Server | undefined;
afterEach(async () => {
  await new Promise<void>((resolve) => (server ? server.close(() => resolve()) : resolve()));
  server = undefined;
});

/** A server whose one response is served by `serve` on a StreamChannel; @returns its URL. */
async function serveWith(serve: (ch: StreamChannel, res: ServerResponse) => Promise<void>): Promise<string> {
  server = createServer((_req, res) => {
    const ch = new StreamChannel(res, new InflightRequests(), 'agent', {}, undefined, true, () => undefined);
    void serve(ch, res);
  });
  await new Promise<void>((resolve) => server?.listen(0, '127.0.0.1', resolve));
  return `http://127.0.0.1:${(server.address() as AddressInfo).port}/`;
}

/** The response's data events as text, told to `onData` as they come; resolves at its end. */
function read(url: string, onData: (all: string) => void = () => undefined): Promise<string> {
  return new Promise((resolve, reject) => {
    get(url, { agent: false }, (res: IncomingMessage) => {
      let all = '';
      res.setEncoding('utf8');
      res.on('data', (d: string) => {
        all += d;
        onData(all);
      });
      res.on('end', () => resolve(all));
      res.on('error', reject);
    }).on('error', reject);
  });
}

const progress = (n: number) => ({
  method: 'notifications/progress',
  params: { progressToken: 't', progress: n, total: 3 },
});

describe('StreamChannel writes', () => {
  it('holds what a turn wrote until its promise jobs ran: notifications and the result go together', async () => {
    const held: number[] = [];
    const url = await serveWith(async (ch, res) => {
      for (let n = 1; n <= 3; n++) ch.notify(progress(n));
      // The result's way from the upstream's answer is promise jobs: the head and the
      // notifications are still in the socket's buffer, not sent ahead on their own.
      for (let i = 0; i < 5; i++) await Promise.resolve();
      held.push(res.socket?.writableLength ?? -1);
      expect(ch.finish({ jsonrpc: '2.0', id: 1, result: { content: [] } })).toBe(true);
    });
    const body = await read(url);
    expect(held).toHaveLength(1);
    expect(held[0]).toBeGreaterThan(0);
    const events = body.split('\n\n').filter((e) => e.startsWith('event: message'));
    expect(events.map((e) => JSON.parse(e.slice(e.indexOf('data: ') + 6)).method ?? 'result')).toEqual([
      'notifications/progress',
      'notifications/progress',
      'notifications/progress',
      'result',
    ]);
  });

  it('sends a notification at the end of its turn when the result comes in a later one', async () => {
    let seen!: () => void;
    const clientSawIt = new Promise<void>((resolve) => {
      seen = resolve;
    });
    const url = await serveWith(async (ch) => {
      ch.notify(progress(1));
      // Held until the result, the client would not see it before this gives up.
      const sawIt = await Promise.race([
        clientSawIt.then(() => true),
        new Promise<boolean>((resolve) => setTimeout(() => resolve(false), 5000)),
      ]);
      ch.finish({ jsonrpc: '2.0', id: 1, result: { clientSawTheNotificationFirst: sawIt } });
    });
    const body = await read(url, (all) => {
      if (all.includes('notifications/progress')) seen();
    });
    expect(body).toContain('notifications/progress');
    expect(body).toContain('"clientSawTheNotificationFirst":true');
  });
});
