/**
 * What the call path tells metrics and traces at its stage boundaries (src/metrics,
 * src/tracing). Only names, codes, dispositions and durations cross this interface: never
 * tokens, arguments or results.
 */

/** The stages that get a child span of the call's span. */
export type CallStage = 'policy' | 'admission' | 'upstream' | 'commit';

export interface CallTelemetry {
  /**
   * Runs one whole tools/call (its root span).
   * @param tool the tool name the agent asked for (counted only when it names a known tool).
   */
  call<T>(tool: string | null, fn: () => Promise<T>): Promise<T>;
  /** Runs one stage (a child span; upstream and commit are timed). */
  stage<T>(stage: CallStage, upstream: string | null, fn: () => T): T;
  /**
   * The call's terminal outcome: `disposition` as recorded (`refused`, `completed`,
   * `not_attempted`, `outcome_unknown`) or `not_recorded`.
   * @param startedAt process.hrtime.bigint() at receipt.
   */
  ended(upstream: string | null, disposition: string, errorCode: string | null, startedAt: bigint): void;
}

/** No metrics, no traces. */
export const NO_TELEMETRY: CallTelemetry = {
  call: (_tool, fn) => fn(),
  stage: (_s, _u, fn) => fn(),
  ended: () => undefined,
};
