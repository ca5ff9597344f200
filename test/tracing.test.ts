/**
 * OpenTelemetry traces (docs/operations.md#metrics-traces-readiness): a real gateway exports
 * over OTLP/HTTP (JSON) to a receiver written here on 127.0.0.1; the test decodes what arrives
 * and checks the span names, their parentage, their attributes, that no argument value is
 * exported, and that the HTTP upstream received the upstream span's W3C traceparent.
 */
import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { type CountingServer, startCountingServer } from './fixtures/counting-server.js';
import { cleanup, rpc, startInProcess, writeConfig } from './harness/gateway.js';

interface OtlpValue {
  stringValue?: string;
  intValue?: string | number;
  boolValue?: boolean;
}
interface OtlpSpan {
  traceId: string;
  spanId: string;
  parentSpanId?: string;
  name: string;
  attributes?: { key: string; value: OtlpValue }[];
}
interface OtlpExport {
  resourceSpans: {
    resource: { attributes: { key: string; value: OtlpValue }[] };
    scopeSpans: { spans: OtlpSpan[] }[];
  }[];
}

/** An OTLP/HTTP traces receiver (JSON encoding, OTLP spec "OTLP/HTTP"): keeps every request body. */
async function startReceiver(): Promise<{
  url: string;
  bodies: string[];
  close: () => Promise<void>;
  server: Server;
}> {
  const bodies: string[] = [];
  const server = createServer(async (req, res) => {
    const chunks: Buffer[] = [];
    for await (const c of req) chunks.push(c as Buffer);
    if (
      req.method === 'POST' &&
      req.url === '/v1/traces' &&
      req.headers['content-type'] === 'application/json'
    ) {
      bodies.push(Buffer.concat(chunks).toString('utf8'));
      res.writeHead(200, { 'content-type': 'application/json' }).end('{}');
      return;
    }
    res.writeHead(415).end();
  });
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
  const { port } = server.address() as AddressInfo;
  return {
    url: `http://127.0.0.1:${port}/v1/traces`,
    bodies,
    server,
    close: () => new Promise((r) => server.close(() => r())),
  };
}

const attr = (s: OtlpSpan, key: string) => s.attributes?.find((a) => a.key === key)?.value.stringValue;

describe('traces over OTLP', () => {
  let up: CountingServer;
  let receiver: Awaited<ReturnType<typeof startReceiver>>;
  beforeAll(async () => {
    up = await startCountingServer();
    receiver = await startReceiver();
  });
  afterAll(async () => {
    await up?.close();
    await receiver?.close();
  });

  it('a tools/call span with policy, admission, upstream and commit children; traceparent to the upstream', async () => {
    const cfg = await writeConfig({
      upstreams: [{ name: 'counting', transport: 'http', url: up.url }],
      extra: { tracing: { enabled: true, otlp_endpoint: receiver.url, service_name: 'cmcp-trace-test' } },
    });
    const gw = await startInProcess(cfg);
    try {
      const r = await rpc(gw.url, 'alice-token', {
        jsonrpc: '2.0',
        id: 1,
        method: 'tools/call',
        params: {
          name: 'counting.record',
          arguments: { a: 'trace-secret-argument-5678' },
          _cmcp: { execution_id: 'trace-exec-1' },
        },
      });
      expect(r.body.result).toBeDefined();
    } finally {
      await gw.close(); // flushes the batch processor
      cleanup(cfg.dir);
    }
    expect(receiver.bodies.length).toBeGreaterThan(0);
    const exports = receiver.bodies.map((b) => JSON.parse(b) as OtlpExport);
    const resource = exports[0]?.resourceSpans[0]?.resource.attributes ?? [];
    expect(resource.find((a) => a.key === 'service.name')?.value.stringValue).toBe('cmcp-trace-test');
    const spans = exports.flatMap((e) =>
      e.resourceSpans.flatMap((rs) => rs.scopeSpans.flatMap((ss) => ss.spans)),
    );
    const roots = spans.filter((s) => s.name === 'cmcp.tools_call');
    expect(roots).toHaveLength(1);
    const root = roots[0] as OtlpSpan;
    expect(root.parentSpanId ?? '').toBe('');
    expect(attr(root, 'cmcp.disposition')).toBe('completed');
    expect(attr(root, 'cmcp.upstream')).toBe('counting');
    const children = spans.filter((s) => s.parentSpanId === root.spanId);
    expect(children.map((s) => s.name).sort()).toEqual([
      'cmcp.admission',
      'cmcp.commit',
      'cmcp.policy',
      'cmcp.upstream',
    ]);
    for (const c of children) {
      expect(c.traceId).toBe(root.traceId);
      expect(attr(c, 'cmcp.upstream')).toBe('counting');
    }
    // The upstream request carried the upstream span's context (W3C Trace Context §3.2).
    const upstreamSpan = children.find((s) => s.name === 'cmcp.upstream') as OtlpSpan;
    const sent = up.responses.filter((x) => x.tool === 'record').at(-1);
    expect(sent?.traceparent).toBe(`00-${root.traceId}-${upstreamSpan.spanId}-01`);
    // Nothing the agent sent is exported.
    for (const b of receiver.bodies) {
      expect(b).not.toContain('trace-secret-argument-5678');
      expect(b).not.toContain('alice-token');
    }
  });

  it('off by default: no export, no traceparent to the upstream', async () => {
    const before = receiver.bodies.length;
    const cfg = await writeConfig({ upstreams: [{ name: 'counting', transport: 'http', url: up.url }] });
    const gw = await startInProcess(cfg);
    try {
      const r = await rpc(gw.url, 'alice-token', {
        jsonrpc: '2.0',
        id: 2,
        method: 'tools/call',
        params: { name: 'counting.record', arguments: {} },
      });
      expect(r.body.result).toBeDefined();
    } finally {
      await gw.close();
      cleanup(cfg.dir);
    }
    expect(up.responses.filter((x) => x.tool === 'record').at(-1)?.traceparent).toBeNull();
    expect(receiver.bodies.length).toBe(before);
  });

  it('refuses tracing enabled without an endpoint', async () => {
    const cfg = await writeConfig({ extra: { tracing: { enabled: true } } });
    await expect(startInProcess(cfg)).rejects.toThrow(
      /tracing\.otlp_endpoint: required when tracing is enabled/,
    );
    cleanup(cfg.dir);
  });
});
