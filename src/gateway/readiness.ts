/**
 * Readiness (`GET /readyz`), distinct from liveness (`/healthz`): the database takes a write
 * lock, every upstream answers a JSON-RPC ping, and the attestation provider produces evidence.
 * Reasons are short codes or summaries: no URLs, tokens or evidence.
 */

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

/** How long a provider probe result is reused (a TPM quote per probe would be wasteful), ms. */
const ATTESTATION_PROBE_TTL_MS = 15_000;

export class Readiness {
  private attestation: { at: number; result: Promise<string | null> } | null = null;

  constructor(
    private readonly db: Db,
    private readonly upstreams: UpstreamPool,
    private readonly provider: AttestationProvider,
  ) {}

  /** Runs every check. Never throws: a failed check is a reason. */
  async check(): Promise<ReadinessReport> {
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
    try {
      this.db.exec('BEGIN IMMEDIATE');
      this.db.exec('ROLLBACK');
      return null;
    } catch (e) {
      return (e as { code?: string }).code ?? 'not writable';
    }
  }

  /**
   * The software provider attests nothing by design and is ready as such (dev mode only);
   * any other provider must produce evidence for an all-zero REPORT_DATA.
   */
  private attestationCheck(): Promise<string | null> {
    if (this.provider.name === 'software') return Promise.resolve(null);
    const now = Date.now();
    if (this.attestation && now - this.attestation.at < ATTESTATION_PROBE_TTL_MS)
      return this.attestation.result;
    const result = this.provider.bind(Buffer.alloc(64)).then(
      () => null,
      (e) => (e as { code?: string }).code ?? 'binding failed',
    );
    this.attestation = { at: now, result };
    return result;
  }
}
