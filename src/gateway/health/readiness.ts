/**
 * Readiness (`GET /readyz`), distinct from liveness (`/healthz`): the gateway is not draining at
 * shutdown, a write to the database commits now, every required upstream answers a JSON-RPC
 * ping, and the attestation provider produces evidence. An optional upstream's (config
 * `required` absent or false) failure is reported but leaves the gateway ready: the gateway
 * serves without it. Every check has a deadline of its own.
 * Reasons are short codes or summaries: no URLs, tokens or evidence.
 */

import { clip } from '../../errors/index.js';
import type { AttestationProvider } from '../../tee/provider.js';
import type { UpstreamPool } from '../../upstream/pool.js';

/** One check: null when it passed, else why not. */
export interface ReadinessReport {
  ready: boolean;
  checks: {
    database: string | null;
    upstreams: Record<string, string | null>;
    /** The upstreams whose failure makes the gateway not ready (config `required: true`). */
    required_upstreams: string[];
    attestation: string | null;
    /** `draining` once a SIGTERM/SIGINT shutdown began (lifecycle/drain.ts), else null. */
    shutdown: string | null;
    /** A replica on PostgreSQL only: `LEASE_LOST` once its lease is lost (lifecycle/lease-gate.ts), else null. */
    lease?: string | null;
  };
}

/** How long a binding's outcome stands for the provider's health (a TPM quote per probe would be wasteful), ms. */
const ATTESTATION_PROBE_TTL_MS = 15_000;

/** How long one readiness report is answered again, ms. */
const REPORT_REUSE_MS = 1000;

/**
 * Every check's client-side deadline, ms: past it the check's reason is `timeout` (a stopped
 * database server, a hung TPM). Above the upstream ping's own 2 s.
 */
export const CHECK_DEADLINE_MS = 3000;

/**
 * `p`'s outcome, or `timeout` once `ms` passed. A check still running from an earlier probe is
 * awaited again rather than started anew, so a hung dependency holds at most one probe.
 */
class Deadlined {
  private pending: Promise<string | null> | null = null;
  constructor(private readonly run: () => Promise<string | null>) {}

  check(ms: number): Promise<string | null> {
    if (!this.pending) {
      const p = this.run().catch((e) => (e as { code?: string }).code ?? 'failed');
      this.pending = p;
      void p.finally(() => {
        if (this.pending === p) this.pending = null;
      });
    }
    const p = this.pending;
    let timer: NodeJS.Timeout | undefined;
    const late = new Promise<string>((resolve) => {
      timer = setTimeout(() => resolve('timeout'), ms);
    });
    return Promise.race([p, late]).finally(() => clearTimeout(timer));
  }
}

/** `ATTESTATION_BINDING_FAILED: <reason>` (the BindingError's short reason, not its message). */
function bindingReason(e: unknown): string {
  const { code, reason } = e as { code?: string; reason?: unknown };
  const short = typeof reason === 'string' ? clip(reason, 80) : null;
  return `${code ?? 'ATTESTATION_BINDING_FAILED'}${short ? `: ${short}` : ''}`;
}

export class Readiness {
  /** The last binding's outcome (a session's, a measurement's or a probe's) and when, ms. */
  private lastBind: { at: number; reason: string | null } | null = null;
  private last: { at: number; report: Promise<ReadinessReport> } | null = null;
  private readonly databaseProbe = new Deadlined(() => this.writeProbe());
  private readonly upstreamProbe = new Deadlined(async () => {
    this.upstreamReasons = await this.upstreams.probe();
    return null;
  });
  private upstreamReasons: Record<string, string | null> = {};
  private readonly attestationProbe = new Deadlined(() => this.attestationCheck());
  private readonly required: string[];

  constructor(
    /**
     * The storage's write probe (store/sqlite/write-probe.ts, store/postgres/write-probe.ts):
     * null once a write committed, else why not.
     */
    private readonly writeProbe: () => Promise<string | null>,
    private readonly upstreams: UpstreamPool,
    private readonly provider: AttestationProvider,
    /** The shutdown gate: once it stops admitting, the gateway is not ready. */
    private readonly drain: { readonly open: boolean } | null = null,
    /** A replica's lease gate: once the lease is lost, the replica is not ready. */
    private readonly lease: { readonly live: boolean } | null = null,
    opts: {
      /** Names of the upstreams configured `required: true`; the others are optional. */
      requiredUpstreams?: Iterable<string>;
    } = {},
  ) {
    this.required = [...(opts.requiredUpstreams ?? [])].sort();
    // Every real binding tells readiness how the provider is doing; a probe is needed only
    // when none happened lately.
    const bind = provider.bind.bind(provider);
    provider.bind = async (reportData) => {
      try {
        const out = await bind(reportData);
        this.lastBind = { at: Date.now(), reason: null };
        return out;
      } catch (e) {
        this.lastBind = { at: Date.now(), reason: bindingReason(e) };
        throw e;
      }
    };
  }

  /**
   * Runs every check, or answers the report of the last second: /readyz is unauthenticated and
   * must not turn a flood of probes into a flood of upstream pings. Never throws: a failed check
   * is a reason.
   */
  async check(): Promise<ReadinessReport> {
    const now = Date.now();
    if (!this.last || now - this.last.at >= REPORT_REUSE_MS) this.last = { at: now, report: this.run() };
    const r = await this.last.report;
    // Draining is known at once, never from a reused report.
    if (this.drain && !this.drain.open)
      return { ready: false, checks: { ...r.checks, shutdown: 'draining' } };
    // So is a lost lease.
    if (this.lease && !this.lease.live) return { ready: false, checks: { ...r.checks, lease: 'LEASE_LOST' } };
    return this.lease ? { ...r, checks: { ...r.checks, lease: null } } : r;
  }

  private async run(): Promise<ReadinessReport> {
    const [pinged, attestation, database] = await Promise.all([
      this.upstreamProbe.check(CHECK_DEADLINE_MS),
      this.attestationProbe.check(CHECK_DEADLINE_MS),
      this.databaseProbe.check(CHECK_DEADLINE_MS),
    ]);
    // Past the deadline every upstream not yet answered counts as timed out.
    const upstreams: Record<string, string | null> =
      pinged === null
        ? { ...this.upstreamReasons }
        : Object.fromEntries(this.upstreams.names().map((n) => [n, pinged]));
    const ready =
      database === null && attestation === null && this.required.every((n) => upstreams[n] == null);
    return {
      ready,
      checks: { database, upstreams, required_upstreams: this.required, attestation, shutdown: null },
    };
  }

  /**
   * The software provider attests nothing by design and is ready as such (dev mode only);
   * any other provider is as healthy as its last binding within the TTL, else it must produce
   * evidence for an all-zero REPORT_DATA now.
   */
  private async attestationCheck(): Promise<string | null> {
    if (this.provider.name === 'software') return null;
    const last = this.lastBind;
    if (last && Date.now() - last.at < ATTESTATION_PROBE_TTL_MS) return last.reason;
    return this.provider.bind(Buffer.alloc(64)).then(
      () => null,
      (e) => bindingReason(e),
    );
  }
}
