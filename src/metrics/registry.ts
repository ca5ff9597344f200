/**
 * The gateway's Prometheus metrics (prom-client), one registry per gateway (tests run several
 * in one process). Label values are bounded: upstream names come from the config, methods from
 * the MCP method set, dispositions from the audit vocabulary, refusal codes from the error
 * registry (@cmcp/verify/errors). Metric names and meanings: docs/operations.md.
 */
import { statSync } from 'node:fs';
import { Counter, collectDefaultMetrics, Gauge, Histogram, Registry } from 'prom-client';
import { ERRORS } from '../errors/index.js';
import type { Db } from '../store/sqlite/db.js';

/** MCP methods counted by name; anything else is counted as `other`. */
const METHODS = new Set([
  'initialize',
  'notifications/initialized',
  'server/discover',
  'ping',
  'tools/list',
  'tools/call',
]);

/** Seconds buckets from 1 ms to 30 s. */
const BUCKETS = [0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30];

/** What the metrics read from the rest of the gateway at scrape time. */
export interface MetricSources {
  /** SQLite: the gauges' connection; null on PostgreSQL (gateway/lifecycle/replica-unavailable.ts replicaGauges adds its gauges). */
  db: Db | null;
  /** SQLite database path (its `-wal` file is measured). */
  dbPath: string;
  /** Configured upstream names (the only upstream label values besides `none`). */
  upstreams: string[];
}

/** The registry and every cmcp metric of one gateway; scrape with {@link GatewayMetrics.render}. */
export class GatewayMetrics {
  readonly registry = new Registry();
  private readonly upstreams: Set<string>;
  private readonly requests: Counter<'method'>;
  private readonly calls: Counter<'method' | 'upstream' | 'disposition'>;
  private readonly refusals: Counter<'code'>;
  private readonly bindingFailures: Counter<'provider'>;
  private readonly callSeconds: Histogram<'disposition'>;
  private readonly upstreamSeconds: Histogram<'upstream'>;
  private readonly commitSeconds: Histogram;

  constructor(src: MetricSources) {
    const registers = [this.registry];
    this.upstreams = new Set(src.upstreams);
    collectDefaultMetrics({ register: this.registry, eventLoopMonitoringPrecision: 20 });
    this.requests = new Counter({
      name: 'cmcp_mcp_requests_total',
      help: 'MCP JSON-RPC requests received, by method (unknown methods as "other")',
      labelNames: ['method'],
      registers,
    });
    this.calls = new Counter({
      name: 'cmcp_calls_total',
      help: 'Terminal outcomes of tools/call, by method, upstream and audit disposition',
      labelNames: ['method', 'upstream', 'disposition'],
      registers,
    });
    this.refusals = new Counter({
      name: 'cmcp_refusals_total',
      help: 'Refused requests, by error code (docs/errors.md): tools/call and relayed-method refusals, and every refusal of the aggregated refusal record (any route, host check, limits)',
      labelNames: ['code'],
      registers,
    });
    this.bindingFailures = new Counter({
      name: 'cmcp_attestation_binding_failures_total',
      help: 'Attestation bindings (quotes, reports) that produced no evidence, by provider',
      labelNames: ['provider'],
      registers,
    });
    this.callSeconds = new Histogram({
      name: 'cmcp_call_duration_seconds',
      help: 'tools/call latency from receipt to terminal commit, by disposition',
      labelNames: ['disposition'],
      buckets: BUCKETS,
      registers,
    });
    this.upstreamSeconds = new Histogram({
      name: 'cmcp_upstream_duration_seconds',
      help: 'Time spent in the upstream call of a tools/call, by upstream',
      labelNames: ['upstream'],
      buckets: BUCKETS,
      registers,
    });
    this.commitSeconds = new Histogram({
      name: 'cmcp_audit_commit_duration_seconds',
      help: 'Time of the terminal audit commit, from queuing it to the COMMIT of its group transaction',
      buckets: BUCKETS,
      registers,
    });
    if (src.db) this.scrapeGauges(src.db, src.dbPath, registers);
  }

  /** Gauges read from the database and the file system at scrape time. */
  private scrapeGauges(db: Db, dbPath: string, registers: Registry[]): void {
    const openSessions = db.prepare("SELECT count(*) AS n FROM sessions WHERE status = 'open'");
    const states = db.prepare('SELECT state, count(*) AS n FROM executions GROUP BY state');
    new Gauge({
      name: 'cmcp_open_sessions',
      help: 'Sessions open now (default and named)',
      registers,
      collect() {
        this.set((openSessions.get() as { n: number }).n);
      },
    });
    new Gauge({
      name: 'cmcp_executions',
      help: 'Execution registry entries by state',
      labelNames: ['state'],
      registers,
      collect() {
        this.reset();
        for (const s of ['in_flight', 'completed', 'not_attempted', 'outcome_unknown'])
          this.set({ state: s }, 0);
        for (const r of states.all() as { state: string; n: number }[]) this.set({ state: r.state }, r.n);
      },
    });
    new Gauge({
      name: 'cmcp_sqlite_wal_bytes',
      help: 'Size of the SQLite write-ahead log file, bytes',
      registers,
      collect() {
        try {
          this.set(statSync(`${dbPath}-wal`).size);
        } catch {
          this.set(0);
        }
      },
    });
  }

  private upstreamLabel(name: string | null | undefined): string {
    return name && this.upstreams.has(name) ? name : 'none';
  }

  /** One MCP request received (after its envelope was read). */
  request(method: string): void {
    this.requests.inc({ method: METHODS.has(method) ? method : 'other' });
  }

  /**
   * One tools/call ended. `disposition` is the terminal entry's (`refused`, `completed`,
   * `not_attempted`, `outcome_unknown`) or `not_recorded`; `seconds` since receipt.
   */
  callEnded(upstream: string | null, disposition: string, errorCode: string | null, seconds: number): void {
    this.calls.inc({ method: 'tools/call', upstream: this.upstreamLabel(upstream), disposition });
    this.callSeconds.observe({ disposition }, seconds);
    if (disposition === 'refused' && errorCode) this.refused(errorCode);
  }

  /**
   * One request refused with `code` (`cmcp_refusals_total`): a tools/call's or a relayed
   * request's refusal, or one through the aggregated refusal record (gateway/edge/refusals.ts).
   */
  refused(code: string): void {
    this.refusals.inc({ code: Object.hasOwn(ERRORS, code) ? code : 'INTERNAL_ERROR' });
  }

  /** One upstream call took `seconds` (`cmcp_upstream_duration_seconds`). */
  upstreamCall(upstream: string, seconds: number): void {
    this.upstreamSeconds.observe({ upstream: this.upstreamLabel(upstream) }, seconds);
  }

  /** One terminal audit commit took `seconds` (`cmcp_audit_commit_duration_seconds`). */
  auditCommit(seconds: number): void {
    this.commitSeconds.observe(seconds);
  }

  /** One binding by `provider` (the configured provider's name) produced no evidence. */
  bindingFailed(provider: string): void {
    this.bindingFailures.inc({ provider });
  }

  /** The Prometheus text exposition. */
  render(): Promise<string> {
    return this.registry.metrics();
  }

  get contentType(): string {
    return this.registry.contentType;
  }
}
