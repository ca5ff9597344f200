/**
 * Readiness (`GET /readyz`), distinct from liveness (`/healthz`): the database takes a write
 * lock, every upstream answers a JSON-RPC ping, and the attestation provider produces evidence.
 * Reasons are short codes or summaries: no URLs, tokens or evidence.
 */

import { clip } from '@cmcp/verify/errors/index';
import type { Db } from '../store/db.js';
import type { AttestationProvider } from '../tee/provider.js';
import type { UpstreamPool } from '../upstream/pool.js';

/** One check: null when it passed, else why not. */
export interface ReadinessReport {
  ready: boolean;
  checks: {
    database: string | null;
    upstreams: Record<string, string | null>;
    attestation: string | null;
  };
}

/** How long a binding's outcome stands for the provider's health (a TPM quote per probe would be wasteful), ms. */
const ATTESTATION_PROBE_TTL_MS = 15_000;

/** How long one readiness report is answered again, ms. */
const REPORT_REUSE_MS = 1000;

/** How long the database probe waits for the write lock, ms. */
const DB_PROBE_BUSY_MS = 250;

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
    private readonly db: Db,
    private readonly upstreams: UpstreamPool,
    private readonly provider: AttestationProvider,
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
  check(): Promise<ReadinessReport> {
    const now = Date.now();
    if (this.last && now - this.last.at < REPORT_REUSE_MS) return this.last.report;
    const report = this.run();
    this.last = { at: now, report };
    return report;
  }

  private async run(): Promise<ReadinessReport> {
    const [upstreams, attestation] = await Promise.all([this.upstreams.probe(), this.attestationCheck()]);
    const database = this.databaseCheck();
    const ready =
      database === null && attestation === null && Object.values(upstreams).every((r) => r === null);
    return { ready, checks: { database, upstreams, attestation } };
  }

  /** Writable: not opened read-only, and `BEGIN IMMEDIATE` takes the write lock (then rolls back). */
  private databaseCheck(): string | null {
    if (!this.db.open) return 'closed';
    if (this.db.readonly) return 'read-only';
    if (this.db.inTransaction) return null; // a write transaction of ours is running: writable
    // better-sqlite3 waits synchronously: a short busy timeout keeps a probe from stalling the
    // event loop for the full write-lock wait while another process writes.
    const busy = this.db.pragma('busy_timeout', { simple: true }) as number;
    this.db.pragma(`busy_timeout = ${DB_PROBE_BUSY_MS}`);
    try {
      this.db.exec('BEGIN IMMEDIATE');
      this.db.exec('ROLLBACK');
      return null;
    } catch (e) {
      return (e as { code?: string }).code ?? 'not writable';
    } finally {
      this.db.pragma(`busy_timeout = ${Math.trunc(busy)}`);
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
