/**
 * W3C Trace Context (https://www.w3.org/TR/trace-context/ §3) for outbound upstream requests:
 * the active span's `traceparent` (and `tracestate`) written into an upstream request's headers. With
 * tracing off there is no active span and nothing is written.
 */
import { context, defaultTextMapSetter } from '@opentelemetry/api';
import { W3CTraceContextPropagator } from '@opentelemetry/core';

const propagator = new W3CTraceContextPropagator();

/**
 * Adds the active context's `traceparent` (and `tracestate`) to `headers`, lower case; nothing
 * when no span is active. Used by the Streamable HTTP transport (src/upstream/http-transport.ts).
 */
export function addTraceHeaders(headers: Record<string, string>): void {
  propagator.inject(context.active(), headers, defaultTextMapSetter);
}
