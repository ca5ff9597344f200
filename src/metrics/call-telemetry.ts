/**
 * The call path's telemetry (src/call/telemetry.ts) over the gateway's metrics and tracer:
 * a `cmcp.tools_call` span per call with `cmcp.policy`, `cmcp.admission`, `cmcp.upstream` and
 * `cmcp.commit` children, and the counters and histograms of src/metrics/registry.ts.
 */
import { AsyncLocalStorage } from 'node:async_hooks';
import { context, createContextKey, type Span, type Tracer } from '@opentelemetry/api';
import type { CallStage, CallTelemetry } from '../call/telemetry.js';
import { inSpan } from '../tracing/index.js';
import type { GatewayMetrics } from './registry.js';

/** The tool each call in flight asked for, read back when it ends (`cmcp_tool_calls_total`). */
const CALL_TOOL = new AsyncLocalStorage<string | null>();

/** The call's root span, so that its outcome lands there and not on the stage span then active. */
const CALL_SPAN = createContextKey('cmcp.tools_call');

function secondsSince(t0: bigint): number {
  return Number(process.hrtime.bigint() - t0) / 1e9;
}

/**
 * Metrics (optional) and spans for every tools/call. `tracer` null (tracing off): no spans at
 * all, not even no-op ones — the stages run bare, with only their timings for the metrics.
 */
export function callTelemetry(metrics: GatewayMetrics | null, tracer: Tracer | null): CallTelemetry {
  const timed = <T>(stage: CallStage, upstream: string | null, fn: () => T): T => {
    if (!metrics || (stage !== 'upstream' && stage !== 'commit')) return fn();
    const t0 = process.hrtime.bigint();
    const done = () =>
      stage === 'upstream'
        ? metrics.upstreamCall(upstream ?? '', secondsSince(t0))
        : metrics.auditCommit(secondsSince(t0));
    const out = fn();
    if (out instanceof Promise) return out.finally(done) as T;
    done();
    return out;
  };
  if (!tracer)
    return {
      call: (tool, fn) => (metrics ? CALL_TOOL.run(tool, fn) : fn()),
      stage: timed,
      ended(upstream, disposition, errorCode, startedAt) {
        metrics?.callEnded(upstream, disposition, errorCode, secondsSince(startedAt), CALL_TOOL.getStore());
      },
    };
  return {
    call: (tool, fn) =>
      CALL_TOOL.run(tool, () =>
        inSpan(tracer, 'cmcp.tools_call', (span) =>
          context.with(context.active().setValue(CALL_SPAN, span), fn),
        ),
      ),
    stage<T>(stage: CallStage, upstream: string | null, fn: () => T): T {
      return inSpan(tracer, `cmcp.${stage}`, (span) => {
        if (upstream) span.setAttribute('cmcp.upstream', upstream);
        return timed(stage, upstream, fn);
      });
    },
    ended(upstream, disposition, errorCode, startedAt) {
      const span = context.active().getValue(CALL_SPAN) as Span | undefined;
      span?.setAttributes({
        'cmcp.disposition': disposition,
        ...(upstream ? { 'cmcp.upstream': upstream } : {}),
        ...(errorCode ? { 'cmcp.error_code': errorCode } : {}),
      });
      metrics?.callEnded(upstream, disposition, errorCode, secondsSince(startedAt), CALL_TOOL.getStore());
    },
  };
}
