/**
 * W3C Trace Context (https://www.w3.org/TR/trace-context/ §3) for outbound upstream requests:
 * the active span's `traceparent` (and `tracestate`) written into a fetch's headers. With
 * tracing off there is no active span and nothing is written.
 */
import { context, defaultTextMapSetter } from '@opentelemetry/api';
import { W3CTraceContextPropagator } from '@opentelemetry/core';

const propagator = new W3CTraceContextPropagator();

/**
 * Returns `init` with the active context's `traceparent` header added (unchanged when no span
 * is active). Used by the Streamable HTTP transport's fetch (src/upstream/result-cap.ts).
 */
export function withTraceContext(init: RequestInit | undefined): RequestInit | undefined {
  const carrier: Record<string, string> = {};
  propagator.inject(context.active(), carrier, defaultTextMapSetter);
  if (!carrier.traceparent) return init;
  const headers = new Headers(init?.headers);
  for (const [k, v] of Object.entries(carrier)) headers.set(k, v);
  return { ...init, headers };
}
