/**
 * MCP spans as the OpenTelemetry semantic conventions for MCP name them (semantic-conventions-
 * genai, docs/gen-ai/mcp.md, status Development): one SERVER span per request an agent sends,
 * one CLIENT span per request the gateway sends an upstream, named `{mcp.method.name} {target}`
 * (the tool or prompt name; no target: the method alone), with `mcp.method.name`,
 * `jsonrpc.request.id`, `gen_ai.tool.name` / `gen_ai.prompt.name`, `network.transport`; an
 * error answer sets status ERROR with `error.type` (a stable code, never a message) and
 * `rpc.response.status_code`. No argument, result, resource URI, token or session id is set.
 * The agent's W3C `traceparent` (HTTP header, or `params._meta` as the conventions propagate it)
 * is continued; background work runs {@link detached} from whatever request started it.
 */
import {
  type Attributes,
  type Context,
  context,
  defaultTextMapGetter,
  ROOT_CONTEXT,
  type Span,
  SpanKind,
  SpanStatusCode,
  type Tracer,
  trace,
} from '@opentelemetry/api';
import { W3CTraceContextPropagator } from '@opentelemetry/core';

const propagator = new W3CTraceContextPropagator();
const MAX_ID = 64;

/** The span name and the attributes every MCP span of `method` carries. */
export function mcpSpanShape(method: string, params: unknown): { name: string; attributes: Attributes } {
  const p = typeof params === 'object' && params !== null ? (params as Record<string, unknown>) : {};
  const target = typeof p.name === 'string' ? p.name.slice(0, 128) : null;
  const attributes: Attributes = { 'mcp.method.name': method };
  if (method === 'tools/call' && target) {
    attributes['gen_ai.tool.name'] = target;
    attributes['gen_ai.operation.name'] = 'execute_tool';
  }
  if (method === 'prompts/get' && target) attributes['gen_ai.prompt.name'] = target;
  const named = (method === 'tools/call' || method === 'prompts/get') && target;
  return { name: named ? `${method} ${target}` : method, attributes };
}

/** The parent context an agent's request names (W3C Trace Context §3.2), else the root. */
export function incomingContext(headers: Record<string, unknown>, params: unknown): Context {
  const meta = (params as { _meta?: unknown } | undefined)?._meta;
  const carrier: Record<string, unknown> =
    typeof meta === 'object' &&
    meta !== null &&
    typeof (meta as { traceparent?: unknown }).traceparent === 'string'
      ? (meta as Record<string, unknown>)
      : headers;
  return propagator.extract(ROOT_CONTEXT, carrier, defaultTextMapGetter);
}

/** Marks `span` as failed with a stable `error.type` (a code, never a message). */
export function failSpan(span: Span, errorType: string, rpcCode?: number): void {
  span.setAttribute('error.type', errorType);
  if (rpcCode !== undefined) span.setAttribute('rpc.response.status_code', String(rpcCode));
  span.setStatus({ code: SpanStatusCode.ERROR });
}

/** What a JSON-RPC answer says for its span: nothing for a success, else the error. */
export function answerFailure(body: unknown): { errorType: string; rpcCode?: number } | null {
  if (typeof body !== 'object' || body === null) return null;
  const b = body as {
    error?: { code?: unknown; data?: { error_code?: unknown } };
    result?: { isError?: unknown };
  };
  if (b.error) {
    const code = typeof b.error.code === 'number' ? b.error.code : undefined;
    const named = b.error.data?.error_code;
    return {
      errorType: typeof named === 'string' ? named.slice(0, MAX_ID) : String(code ?? 'error'),
      ...(code !== undefined ? { rpcCode: code } : {}),
    };
  }
  if (b.result?.isError === true) return { errorType: 'tool_error' };
  return null;
}

/**
 * Runs `fn` in a SERVER span for one agent request, child of the context the request names.
 * `fn` answers the JSON-RPC body; an error body (or a tool result with `isError`) fails the span.
 */
export async function serverSpan<T extends { body: unknown }>(
  tracer: Tracer,
  request: {
    method: string;
    id: unknown;
    params: unknown;
    headers: Record<string, unknown>;
    transport: string;
  },
  fn: () => Promise<T>,
): Promise<T> {
  const { name, attributes } = mcpSpanShape(request.method, request.params);
  if (typeof request.id === 'string' || typeof request.id === 'number')
    attributes['jsonrpc.request.id'] = String(request.id).slice(0, MAX_ID);
  attributes['network.transport'] = request.transport;
  const parent = incomingContext(request.headers, request.params);
  const span = tracer.startSpan(name, { kind: SpanKind.SERVER, attributes }, parent);
  try {
    const out = await context.with(trace.setSpan(parent, span), fn);
    const failure = answerFailure(out.body);
    if (failure) failSpan(span, failure.errorType, failure.rpcCode);
    return out;
  } catch (e) {
    failSpan(span, 'INTERNAL_ERROR');
    throw e;
  } finally {
    span.end();
  }
}

/**
 * Runs `fn` in a CLIENT span for one request the gateway sends an upstream, child of the active
 * context; `outcome` says how the answer fails the span (null: it does not).
 */
export async function clientSpan<T>(
  tracer: Tracer,
  request: { method: string; params: unknown; upstream: string; transport: string },
  fn: () => Promise<T>,
  outcome: (out: T) => { errorType: string; rpcCode?: number } | null,
): Promise<T> {
  const { name, attributes } = mcpSpanShape(request.method, request.params);
  attributes['cmcp.upstream'] = request.upstream;
  attributes['network.transport'] = request.transport;
  return tracer.startActiveSpan(name, { kind: SpanKind.CLIENT, attributes }, async (span) => {
    try {
      const out = await fn();
      const failure = outcome(out);
      if (failure) failSpan(span, failure.errorType, failure.rpcCode);
      return out;
    } catch (e) {
      failSpan(span, 'INTERNAL_ERROR');
      throw e;
    } finally {
      span.end();
    }
  });
}

/**
 * `fn` bound to the root context: work it starts (an upstream connection, its timers and the
 * requests they send) never carries the trace of the request that happened to start it.
 */
export function detached<A extends unknown[], R>(fn: (...args: A) => R): (...args: A) => R {
  return context.bind(ROOT_CONTEXT, fn);
}
