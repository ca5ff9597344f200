/**
 * OpenTelemetry traces (docs/operations.md#metrics-traces-readiness): a real gateway exports
 * over OTLP/HTTP (JSON) to a receiver on 127.0.0.1 (harness/otlp-receiver.ts); the test decodes what arrives
 * and checks the span names, their parentage, their attributes, that no argument value is
 * exported, and that the HTTP upstream received the upstream span's W3C traceparent.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { type CountingServer, startCountingServer } from './fixtures/counting-server.js';
import { cleanup, rpc, startInProcess, writeConfig } from './harness/gateway.js';
import { attr, type OtlpExport, type OtlpSpan, startReceiver } from './harness/otlp-receiver.js';

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

  it('SERVER spans continue the agent traceparent; the call stages and a CLIENT span to the upstream; refusals are errors', async () => {
    const cfg = await writeConfig({
      upstreams: [{ name: 'counting', transport: 'http', url: up.url }],
      extra: { tracing: { enabled: true, otlp_endpoint: receiver.url, service_name: 'cmcp-trace-test' } },
    });
    const agentTrace = '4bf92f3577b34da6a3ce929d0e0e4736';
    const agentSpan = '00f067aa0ba902b7';
    const gw = await startInProcess(cfg);
    try {
      const r = await fetch(`${gw.url}/mcp`, {
        method: 'POST',
        headers: {
          authorization: 'Bearer alice-token',
          'content-type': 'application/json',
          accept: 'application/json',
          traceparent: `00-${agentTrace}-${agentSpan}-01`,
        },
        body: JSON.stringify({
          jsonrpc: '2.0',
          id: 1,
          method: 'tools/call',
          params: {
            name: 'counting.record',
            arguments: { a: 'trace-secret-argument-5678' },
            _cmcp: { execution_id: 'trace-exec-1' },
          },
        }),
      });
      expect(((await r.json()) as { result?: unknown }).result).toBeDefined();
      const list = await rpc(gw.url, 'alice-token', { jsonrpc: '2.0', id: 2, method: 'tools/list' });
      expect(list.body.result).toBeDefined();
      const refused = await rpc(gw.url, 'alice-token', {
        jsonrpc: '2.0',
        id: 3,
        method: 'tools/call',
        params: { name: 'counting.nope', arguments: {} },
      });
      expect(refused.body.error).toBeDefined();
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
    // The agent's request: a SERVER span in the agent's trace, under the agent's span.
    const server = spans.find((s) => s.name === 'tools/call counting.record') as OtlpSpan;
    expect(server).toBeDefined();
    expect(server.kind).toBe(2);
    expect(server.traceId).toBe(agentTrace);
    expect(server.parentSpanId).toBe(agentSpan);
    expect(attr(server, 'mcp.method.name')).toBe('tools/call');
    expect(attr(server, 'gen_ai.tool.name')).toBe('counting.record');
    expect(attr(server, 'jsonrpc.request.id')).toBe('1');
    expect(server.status?.code ?? 0).not.toBe(2);
    const roots = spans.filter((s) => s.name === 'cmcp.tools_call' && s.parentSpanId === server.spanId);
    expect(roots).toHaveLength(1);
    const root = roots[0] as OtlpSpan;
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
      expect(c.traceId).toBe(agentTrace);
      expect(attr(c, 'cmcp.upstream')).toBe('counting');
    }
    // The request to the upstream: a CLIENT span under the upstream stage, whose context the
    // upstream received (W3C Trace Context §3.2).
    const upstreamStage = children.find((s) => s.name === 'cmcp.upstream') as OtlpSpan;
    const client = spans.find((s) => s.parentSpanId === upstreamStage.spanId) as OtlpSpan;
    expect(client).toMatchObject({ name: 'tools/call record', kind: 3, traceId: agentTrace });
    expect(attr(client, 'cmcp.upstream')).toBe('counting');
    expect(attr(client, 'network.transport')).toBe('tcp');
    const sent = up.responses.filter((x) => x.tool === 'record').at(-1);
    expect(sent?.traceparent).toBe(`00-${agentTrace}-${client.spanId}-01`);
    // A request without a traceparent starts its own trace.
    const listed = spans.find((s) => s.name === 'tools/list' && s.kind === 2) as OtlpSpan;
    expect(listed).toBeDefined();
    expect(listed.parentSpanId ?? '').toBe('');
    expect(listed.traceId).not.toBe(agentTrace);
    // A refusal is an error, with a stable error.type and the JSON-RPC code.
    const refusal = spans.find((s) => s.name === 'tools/call counting.nope') as OtlpSpan;
    expect(refusal.kind).toBe(2);
    expect(refusal.status?.code).toBe(2);
    expect(attr(refusal, 'error.type')).toMatch(/^[A-Z_]+$/);
    expect(attr(refusal, 'rpc.response.status_code')).toMatch(/^-32\d{3}$/);
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
