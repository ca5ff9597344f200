/**
 * C-MCP-4 sizes: a request over the body limit gets HTTP 413 naming the limit (malformed JSON
 * still 400); an upstream result over the result cap becomes a JSON-RPC error for the caller,
 * the read stops at the cap, and the audit entry records it — over Streamable HTTP and stdio.
 */
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { Gateway } from '../src/gateway/lifecycle/start.js';
import { type CountingServer, startCountingServer } from './fixtures/counting-server.js';
import { cleanup, rpc, startInProcess, type TestConfig, writeConfig } from './harness/gateway.js';

const MiB = 1024 * 1024;
let up: CountingServer;
let cfg: TestConfig;
let gw: Gateway;

beforeAll(async () => {
  up = await startCountingServer();
  cfg = await writeConfig({
    upstreams: [
      { name: 'c', transport: 'http', url: up.url },
      {
        name: 'g',
        transport: 'stdio',
        command: process.execPath,
        args: [join(import.meta.dirname, 'fixtures', 'list-changing-server.mjs')],
      },
    ],
  });
  gw = await startInProcess(cfg);
});
afterAll(async () => {
  await gw?.close();
  await up?.close();
  if (cfg) cleanup(cfg.dir);
});

const call = (name: string, args: Record<string, unknown>) =>
  rpc(gw.url, 'alice-token', {
    jsonrpc: '2.0',
    id: 'big-1',
    method: 'tools/call',
    params: { name, arguments: args },
  });

describe('C-MCP-4 sizes', () => {
  it('2.1 MiB of base64 arguments against a 2 MiB limit: HTTP 413 naming the limit', async () => {
    const r = await call('c.record', { a: Buffer.alloc(Math.ceil(2.1 * MiB * 0.75)).toString('base64') });
    expect(r.status).toBe(413);
    expect(r.body.error.message).toContain(String(2 * MiB));
    expect(r.body.error.data.error_code).toBe('PAYLOAD_TOO_LARGE');
    const bad = await rpc(gw.url, 'alice-token', '{"jsonrpc":"2.0",');
    expect(bad.status).toBe(400);
  });

  it('a 3.5 MiB result over Streamable HTTP: a JSON-RPC error, audited, the call completed', async () => {
    const r = await call('c.big', { bytes: 3.5 * MiB });
    expect(r.status).toBe(200);
    expect(r.text.length).toBeLessThan(64 * 1024);
    expect(r.body.id).toBe('big-1');
    expect(r.body.error.data).toMatchObject({
      error_code: 'UPSTREAM_RESULT_TOO_LARGE',
      limit_bytes: 2 * MiB,
    });
    const ev = r.body.error.data.evidence;
    const entry = gw.chain.entries(ev.chain_id).find((e) => e.entry_hash === ev.entry_hash);
    expect(entry).toMatchObject({
      disposition: 'completed',
      error_code: 'UPSTREAM_RESULT_TOO_LARGE',
      detail: { result_cap_bytes: 2 * MiB },
    });
    expect(up.invocations.filter((i) => i.tool === 'big')).toHaveLength(1);
    // Small results still pass.
    const ok = await call('c.big', { bytes: 1000 });
    expect(ok.body.result.content[0].text).toHaveLength(1000);
  });

  it('the HTTP read stops at the cap: a 64 MiB result is never read to its end', async () => {
    const r = await call('c.big', { bytes: 64 * MiB });
    expect(r.body.error.data.error_code).toBe('UPSTREAM_RESULT_TOO_LARGE');
    await new Promise((res) => setTimeout(res, 300));
    const last = up.responses.filter((x) => x.tool === 'big').at(-1);
    // The connection closed after the cap plus socket buffers, far short of 64 MiB.
    expect(last?.bytesWritten).not.toBeNull();
    expect(last?.bytesWritten ?? Infinity).toBeLessThan(24 * MiB);
  });

  it('a too-large result is attributed only to its own call (concurrent HTTP calls)', async () => {
    const [held, big] = await Promise.all([
      call('c.hold', { ms: 800 }),
      (async () => {
        await new Promise((res) => setTimeout(res, 100));
        return call('c.big', { bytes: 3.5 * MiB });
      })(),
    ]);
    expect(big.body.error.data.error_code).toBe('UPSTREAM_RESULT_TOO_LARGE');
    expect(held.body.result.content[0].text).toBe('released');
  });

  it('stdio: a call sharing the child with an oversized response ends outcome_unknown, not too-large', async () => {
    const [slow, big] = await Promise.all([
      call('g.slow', {}),
      (async () => {
        await new Promise((res) => setTimeout(res, 100));
        return call('g.big', {});
      })(),
    ]);
    for (const r of [slow, big]) {
      expect(r.body.error.data.error_code).toBe('UPSTREAM_FAILED');
      expect(r.body.error.data.disposition).toBe('outcome_unknown');
    }
  });

  it('a 3.5 MiB result over stdio: the read stops at the cap (the child is stopped), then the upstream is usable again', async () => {
    const pid1 = (await call('g.pid', {})).body.result.content[0].text;
    const r = await call('g.big', {});
    expect(r.body.error.data.error_code).toBe('UPSTREAM_RESULT_TOO_LARGE');
    const ev = r.body.error.data.evidence;
    const entry = gw.chain.entries(ev.chain_id).find((e) => e.entry_hash === ev.entry_hash);
    expect(entry?.error_code).toBe('UPSTREAM_RESULT_TOO_LARGE');
    const next = await call('g.grow', {});
    expect(next.body.result.content[0].text).toMatch(/^added_/);
    const pid2 = (await call('g.pid', {})).body.result.content[0].text;
    expect(pid2).not.toBe(pid1);
  });
});
