/**
 * src/upstream/answers.ts over the real SDK Client: which requests the upstream answered (an
 * upstream -32000/-32001 is an answer; the SDK's own timeout is not), and progress that
 * arrives in the same read as its response still reaches the call.
 */
import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { InMemoryTransport } from '@modelcontextprotocol/sdk/inMemory.js';
import type { JSONRPCMessage } from '@modelcontextprotocol/sdk/types.js';
import { describe, expect, it } from 'vitest';
import { z } from 'zod';
import { watchAnswers } from '../src/upstream/answers.js';
import { classifyFailure } from '../src/upstream/request.js';
import { type CallContext, callContext } from '../src/upstream/result-cap.js';

/** A client whose "upstream" answers initialize, then hands each request to `serve`. */
async function pair(
  serve: (
    req: { id: number; method: string; params?: Record<string, unknown> },
    reply: (m: object) => void,
  ) => void,
) {
  const [clientSide, serverSide] = InMemoryTransport.createLinkedPair();
  serverSide.onmessage = (m: JSONRPCMessage) => {
    const msg = m as { id?: number; method?: string; params?: Record<string, unknown> };
    if (msg.id === undefined || !msg.method) return;
    const reply = (x: object) => void serverSide.send({ jsonrpc: '2.0', ...x } as JSONRPCMessage);
    if (msg.method === 'initialize')
      reply({
        id: msg.id,
        result: { protocolVersion: '2025-06-18', capabilities: {}, serverInfo: { name: 's', version: '1' } },
      });
    else serve(msg as { id: number; method: string }, reply);
  };
  await serverSide.start();
  const watch = watchAnswers(clientSide);
  const client = new Client({ name: 't', version: '1' });
  await client.connect(clientSide);
  return { client, watch };
}

const ctx = (): CallContext => ({ overflowed: false, cutOff: false });

describe('watchAnswers', () => {
  it('an upstream error with the SDK timeout and closed codes is an answer; the SDK timeout is not', async () => {
    const { client } = await pair((req, reply) => {
      const code = Number(req.params?.code);
      if (code) reply({ id: req.id, error: { code, message: `upstream ${code}` } });
    });
    for (const code of [-32000, -32001]) {
      const c = ctx();
      const e = await callContext
        .run(c, () => client.request({ method: 'x', params: { code } }, z.object({})))
        .catch((x) => x);
      expect(classifyFailure(e, c, 1024)).toEqual({
        boundary: 'answered',
        rpcError: { code, message: `upstream ${code}`, data: undefined }, // the upstream's own message
      });
    }
    const c = ctx();
    const e = await callContext
      .run(c, () => client.request({ method: 'x', params: {} }, z.object({}), { timeout: 50 }))
      .catch((x) => x);
    expect(classifyFailure(e, c, 1024)).toEqual({ boundary: 'maybe_sent', failure: 'timeout' });
    await client.close();
  });

  it('progress sent in the same tick as the response reaches the call, in order', async () => {
    const { client } = await pair((req, reply) => {
      const token = (req.params?._meta as { progressToken?: number } | undefined)?.progressToken;
      for (const progress of [1, 2, 3])
        reply({ method: 'notifications/progress', params: { progressToken: token, progress } });
      reply({ id: req.id, result: {} });
    });
    const seen: number[] = [];
    const c: CallContext = { ...ctx(), onprogress: (p) => seen.push(p.progress) };
    await callContext.run(c, () =>
      client.request({ method: 'x', params: {} }, z.object({}), { onprogress: () => undefined }),
    );
    expect(seen).toEqual([1, 2, 3]);
    await client.close();
  });

  it("a call's progress is kept from the SDK's Protocol; progress no call tracks still reaches it", async () => {
    const { client } = await pair((req, reply) => {
      const token = (req.params?._meta as { progressToken?: number } | undefined)?.progressToken;
      reply({ method: 'notifications/progress', params: { progressToken: token ?? 999, progress: 1 } });
      reply({ id: req.id, result: {} });
    });
    const errors: string[] = [];
    client.onerror = (e) => errors.push(e.message);
    const sdkSaw: number[] = [];
    const seen: number[] = [];
    const c: CallContext = { ...ctx(), onprogress: (p) => seen.push(p.progress) };
    await callContext.run(c, () =>
      client.request({ method: 'x', params: {} }, z.object({}), {
        onprogress: (p) => sdkSaw.push(p.progress),
      }),
    );
    await new Promise((r) => setTimeout(r, 20));
    // Delivered to the call, not to the SDK (whose handler, run a microtask late, would have
    // found the request settled and reported an unknown token).
    expect(seen).toEqual([1]);
    expect(sdkSaw).toEqual([]);
    expect(errors).toEqual([]);
    // Outside a call (no token sent, none tracked) the SDK gets the notification as before.
    await client.request({ method: 'y', params: {} }, z.object({}));
    await new Promise((r) => setTimeout(r, 20));
    expect(errors).toEqual([expect.stringContaining('unknown token')]);
    await client.close();
  });
});
