/**
 * OpenTelemetry tracing of the call path (off by default): one tracer provider per gateway,
 * spans exported over OTLP/HTTP (JSON encoding) to `tracing.otlp_endpoint`. Spans carry names,
 * ids, upstream names, dispositions and error codes only: never tokens, arguments or results.
 */
import { context, ProxyTracerProvider, type Span, SpanStatusCode, type Tracer } from '@opentelemetry/api';
import { AsyncLocalStorageContextManager } from '@opentelemetry/context-async-hooks';
import { OTLPTraceExporter } from '@opentelemetry/exporter-trace-otlp-http';
import { resourceFromAttributes } from '@opentelemetry/resources';
import { BatchSpanProcessor, TracerProvider } from '@opentelemetry/sdk-trace';

export interface TracingConfig {
  enabled: boolean;
  /** OTLP/HTTP traces endpoint, e.g. `http://127.0.0.1:4318/v1/traces`. */
  otlp_endpoint?: string;
  service_name: string;
}

/** The gateway's tracer and how to flush and stop it. */
export interface Tracing {
  readonly tracer: Tracer;
  readonly enabled: boolean;
  /** Exports what is buffered and stops the exporter. */
  shutdown(): Promise<void>;
}

let contextManagerSet = false;

/**
 * Starts tracing as configured. Disabled: a no-op tracer (no spans, no context, no export).
 * The AsyncLocalStorage context manager is set globally once (context follows async calls into
 * the upstream fetch); the tracer provider is this gateway's own, not the global one.
 */
export function startTracing(cfg: TracingConfig): Tracing {
  if (!cfg.enabled || !cfg.otlp_endpoint)
    return { tracer: new ProxyTracerProvider().getTracer('cmcp'), enabled: false, shutdown: async () => {} };
  if (!contextManagerSet) {
    context.setGlobalContextManager(new AsyncLocalStorageContextManager().enable());
    contextManagerSet = true;
  }
  const provider = new TracerProvider({
    resource: resourceFromAttributes({ 'service.name': cfg.service_name }),
    spanProcessors: [
      new BatchSpanProcessor({
        exporter: new OTLPTraceExporter({ url: cfg.otlp_endpoint }),
        scheduledDelayMillis: 500,
      }),
    ],
  });
  return {
    tracer: provider.getTracer('cmcp'),
    enabled: true,
    shutdown: () => provider.shutdown(),
  };
}

/**
 * Runs `fn` inside a new active span named `name`; ends it when `fn` settles (sync or async).
 * A thrown error marks the span as an error (its message is not recorded: it may quote input).
 */
export function inSpan<T>(tracer: Tracer, name: string, fn: (span: Span) => T): T {
  return tracer.startActiveSpan(name, (span) => {
    let out: T;
    try {
      out = fn(span);
    } catch (e) {
      span.setStatus({ code: SpanStatusCode.ERROR });
      span.end();
      throw e;
    }
    if (out instanceof Promise)
      return out.then(
        (v) => {
          span.end();
          return v;
        },
        (e) => {
          span.setStatus({ code: SpanStatusCode.ERROR });
          span.end();
          throw e;
        },
      ) as T;
    span.end();
    return out;
  });
}
