/**
 * Sizes over SSE (C-MCP-4, issue 10 item 3): an upstream that answers on an SSE stream has its
 * result capped exactly as a JSON one — refused at the cap, at once, not after the call's
 * timeout — and a large result under the cap reaches the client intact, on the gateway's own
 * SSE stream to an SDK client as well as in JSON.
 */
import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { StreamableHTTPClientTransport } from '@modelcontextprotocol/sdk/client/streamableHttp.js';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { Gateway } from '../src/gateway/lifecycle/start.js';
import { type FixtureServer, startFixtureServer } from '../testing/conformance/fixture-server.js';
import { cleanup, rpc, startInProcess, type TestConfig, writeConfig } from './harness/gateway.js';

const MiB = 1024 * 1024;
let up: FixtureServer;
let cfg: TestConfig;
let gw: Gateway;

beforeAll(async () => {
  up = await startFixtureServer();
  cfg = await writeConfig({
    // A timeout far beyond the test's: waiting for it would fail the test.
    upstreams: [{ name: 'sse', transport: 'http', url: up.url, timeout_ms: 600_000 }],
  });
  gw = await startInProcess(cfg);
});
afterAll(async () => {
  await gw?.close();
  await up?.close();
  if (cfg) cleanup(cfg.dir);
});

const big = (bytes: number) =>
  rpc(gw.url, 'alice-token', {
    jsonrpc: '2.0',
    id: 'sse-big',
    method: 'tools/call',
    params: { name: 'sse.test_big_result', arguments: { bytes } },
  });

describe('the result cap over an SSE upstream', () => {
  it('a 3.5 MiB SSE result is refused at the cap without waiting for the timeout, and recorded completed', {
    timeout: 20_000,
  }, async () => {
    const r = await big(3.5 * MiB);
    expect(r.body.error.data).toMatchObject({
      error_code: 'UPSTREAM_RESULT_TOO_LARGE',
      limit_bytes: 2 * MiB,
    });
    const ev = r.body.error.data.evidence;
    const entry = gw.chain.entries(ev.chain_id).find((e) => e.entry_hash === ev.entry_hash);
    expect(entry).toMatchObject({ disposition: 'completed', error_code: 'UPSTREAM_RESULT_TOO_LARGE' });
  });

  it('a 1.5 MiB SSE result passes intact (JSON to a sessionless client)', async () => {
    const r = await big(1.5 * MiB);
    expect(r.headers.get('content-type')).toMatch(/^application\/json/);
    expect(r.body.result.content[0].text).toBe('x'.repeat(1.5 * MiB));
  });

  it('a 1.5 MiB result reaches an SDK client intact on the gateway SSE stream (one long data line)', async () => {
    const client = new Client({ name: 'sse-sizes', version: '1.0.0' });
    await client.connect(
      new StreamableHTTPClientTransport(new URL(`${gw.url}/mcp`), {
        requestInit: { headers: { authorization: 'Bearer alice-token' } },
      }),
    );
    const r = await client.callTool({ name: 'sse.test_big_result', arguments: { bytes: 1.5 * MiB } });
    expect((r.content as { text: string }[])[0]?.text).toBe('x'.repeat(1.5 * MiB));
    await client.close();
  });
});
