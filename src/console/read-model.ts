/**
 * What the operator console shows, read through the owners' functions only: sessions
 * (store/sqlite/session-store.ts), chains and refusals (store/sqlite/chain.ts), claims (store/sqlite/claims.ts),
 * executions (store/sqlite/executions.ts), the running policy, catalog and blocks (the operator
 * controls' status). Claims are verified here with @cmcp/verify, exactly as a relying party
 * would, against the package's pinned trust anchors.
 */

import type { VerificationReport } from '@cmcp/verify';
import {
  defaultAttestationDir,
  EMPTY_TRUST_STORE,
  loadTrustStore,
  type TrustStore,
  verifyClaim,
} from '@cmcp/verify';
import { type AuditEntry, GATEWAY_CHAIN_ID } from '@cmcp/verify/formats';
import type { SessionRow } from '../session/types.js';
import type { ExecutionRow } from '../store/port.js';
import type { AuditChain } from '../store/sqlite/chain.js';
import { storedClaim } from '../store/sqlite/claims.js';
import type { Db } from '../store/sqlite/db.js';
import { listExecutions } from '../store/sqlite/executions.js';
import { listSessions, readSession } from '../store/sqlite/session-store.js';

/** What the console reads of the operator controls (gateway/operator/controls.ts implements it). */
export interface ConsoleOperator {
  status(): Record<string, unknown>;
  isBlocked(agentId: string): boolean;
}

/** How many rows a list page shows at most. */
export const LIST_LIMIT = 200;

/** Refusal counts of one time bucket, by error code. */
export interface RefusalBucket {
  /** Start of the bucket, RFC 3339 (UTC). */
  start: string;
  counts: Record<string, number>;
}

export type BucketSize = 'minute' | 'hour';

const BUCKETS: Record<BucketSize, { ms: number; span: number }> = {
  minute: { ms: 60_000, span: 60 }, // the last hour, per minute
  hour: { ms: 3_600_000, span: 48 }, // the last two days, per hour
};

/** The pinned roots the package ships, or an empty store when there are none. */
function packagedTrustStore(): { store: TrustStore; note: string | null } {
  const dir = defaultAttestationDir();
  if (!dir) return { store: EMPTY_TRUST_STORE, note: 'no packaged trust store found' };
  try {
    return { store: loadTrustStore(`${dir}/trust-store.yaml`), note: null };
  } catch (e) {
    return { store: EMPTY_TRUST_STORE, note: `trust store unreadable: ${(e as Error).message}` };
  }
}

export class ConsoleReadModel {
  private readonly trust = packagedTrustStore();

  constructor(
    private readonly db: Db,
    private readonly chain: AuditChain,
    private readonly operator: ConsoleOperator,
    /** Agent ids an operator may block (configured agents, plus `dev` in dev mode). */
    readonly agents: readonly string[],
  ) {}

  /** Running policy, catalog (with drifted tools) and blocked agents. */
  status(): Record<string, unknown> {
    return this.operator.status();
  }

  isBlocked(agentId: string): boolean {
    return this.operator.isBlocked(agentId);
  }

  sessions(): SessionRow[] {
    return listSessions(this.db, LIST_LIMIT);
  }

  session(sessionId: string): SessionRow | undefined {
    return readSession(this.db, sessionId);
  }

  /** A session's chain, genesis first. */
  chainOf(sessionId: string): AuditEntry[] {
    return this.chain.entries(sessionId);
  }

  /**
   * A closed session's claim with the verifier's report over it and its bundle, or null while
   * the session is open.
   */
  async claim(
    sessionId: string,
  ): Promise<{ claim: unknown; report: VerificationReport; trustNote: string | null } | null> {
    const claim = storedClaim(this.db, sessionId);
    if (!claim) return null;
    const bundle = this.chain.bundle(sessionId, sessionId);
    const report = await verifyClaim(claim, { bundle, trustStore: this.trust.store });
    return { claim, report, trustNote: this.trust.note };
  }

  executions(): ExecutionRow[] {
    return listExecutions(this.db, { agentId: null, state: null }).slice(0, LIST_LIMIT);
  }

  /**
   * Refused requests in the gateway chain, counted by error code per minute (last hour) or per
   * hour (last 48 hours). An entry of rate-bounded unauthenticated requests counts `detail.count`.
   */
  refusals(size: BucketSize, now = Date.now()): { buckets: RefusalBucket[]; codes: string[] } {
    const { ms, span } = BUCKETS[size];
    const first = Math.floor(now / ms) * ms - (span - 1) * ms;
    // The chain's timestamps carry microseconds (store/entries/clock.ts); compare in the same format.
    const since = `${new Date(first).toISOString().slice(0, 23)}000Z`;
    const buckets = new Map<number, Record<string, number>>();
    const codes = new Set<string>();
    for (const e of this.chain.refusedSince(GATEWAY_CHAIN_ID, since)) {
      const at = Date.parse(e.timestamp_utc);
      if (Number.isNaN(at)) continue;
      const key = Math.floor(at / ms) * ms;
      const code = e.error_code ?? 'UNKNOWN';
      const n = (e.detail as { count?: unknown } | null)?.count;
      const counts = buckets.get(key) ?? {};
      counts[code] = (counts[code] ?? 0) + (typeof n === 'number' && n > 0 ? n : 1);
      buckets.set(key, counts);
      codes.add(code);
    }
    return {
      buckets: [...buckets]
        .sort(([a], [b]) => b - a)
        .map(([start, counts]) => ({ start: new Date(start).toISOString(), counts })),
      codes: [...codes].sort(),
    };
  }
}
