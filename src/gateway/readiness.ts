/**
 * Readiness (`GET /readyz`), distinct from liveness (`/healthz`): the gateway is not draining at
 * shutdown, the database takes a write lock, every upstream answers a JSON-RPC ping, and the
 * attestation provider produces evidence.
 * Reasons are short codes or summaries: no URLs, tokens or evidence.
 */

import { clip } from '@cmcp/verify/errors/index';
import { type Db, immediateAsync } from '../store/db.js';
import type { AttestationProvider } from '../tee/provider.js';
import type { UpstreamPool } from '../upstream/pool.js';

/** One check: null when it passed, else why not. */
export interface ReadinessReport {
  ready: boolean;
  checks: {
    database: string | null;
    upstreams: Record<string, string | null>;
    attestation: string | null;
    /** `draining` once a SIGTERM/SIGINT shutdown began (gateway/drain.ts), else null. */
    shutdown: string | null;
    /** A replica on PostgreSQL only: `LEASE_LOST` once its lease is lost (gateway/lease-gate.ts), else null. */
    lease?: string | null;
  };
}

/** How long a binding's outcome stands for the provider's health (a TPM quote per probe would be wasteful), ms. */
const ATTESTATION_PROBE_TTL_MS = 15_000;

/** How long one readiness report is answered again, ms. */
const REPORT_REUSE_MS = 1000;

/**
 * How long the database probe waits for the write lock, ms: awaited (store/db.ts immediateAsync,
 * each try at most BUSY_STEP_MS of the event loop), so a probe never stalls the gateway.
 */
const DB_PROBE_WAIT_MS = 250;

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

  constructor(
    /** SQLite: the connection to probe; a replica on PostgreSQL: its own probe (null when writable). */
    private readonly db: Db | (() => Promise<string | null>),
    private readonly upstreams: UpstreamPool,
    private readonly provider: AttestationProvider,
    /** The shutdown gate: once it stops admitting, the gateway is not ready. */
    private readonly drain: { readonly open: boolean } | null = null,
    /** A replica's lease gate: once the lease is lost, the replica is not ready. */
    private readonly lease: { readonly live: boolean } | null = null,
  ) {
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
    const [upstreams, attestation, database] = await Promise.all([
      this.upstreams.probe(),
      this.attestationCheck(),
      this.databaseCheck(),
    ]);
    const ready =
      database === null && attestation === null && Object.values(upstreams).every((r) => r === null);
    return { ready, checks: { database, upstreams, attestation, shutdown: null } };
  }

  /**
   * Writable: not opened read-only, and `BEGIN IMMEDIATE` takes the write lock within
   * {@link DB_PROBE_WAIT_MS}, waited for by awaiting (an empty transaction: nothing written).
   */
  private async databaseCheck(): Promise<string | null> {
    if (typeof this.db === 'function') return this.db();
    if (!this.db.open) return 'closed';
    if (this.db.readonly) return 'read-only';
    if (this.db.inTransaction) return null; // a write transaction of ours is running: writable
    try {
      await immediateAsync(this.db, () => null, DB_PROBE_WAIT_MS);
      return null;
    } catch (e) {
      // SQLITE_BUSY: another connection held the write lock for the whole wait.
      return (e as { code?: string }).code ?? 'not writable';
    }
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
