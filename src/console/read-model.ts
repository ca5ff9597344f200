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
import type { Unavailable } from '../upstream/availability.js';
import type { SearchFilter } from './search.js';

/** What the console reads of the operator controls (gateway/operator/controls.ts implements it). */
export interface ConsoleOperator {
  status(): Record<string, unknown>;
  isBlocked(agentId: string): boolean;
}

/** What the console reads of the upstream pool (upstream/pool.ts implements it). */
export interface ConsoleUpstreams {
  names(): string[];
  availability: { get(name: string): Unavailable | null };
}

/** One upstream as the console shows it. */
export interface UpstreamState {
  name: string;
  state: 'available' | 'unavailable' | 'authorization required' | 'authorization failed';
  /** Since when it is not available (RFC 3339), the retries so far and why. */
  since: string | null;
  attempts: number | null;
  summary: string | null;
  /** Where a user authorizes the gateway (an upstream that needs a user), shown as text. */
  authorizationUrl: string | null;
}

/** Every configured upstream with its availability, in configuration order. */
export function upstreamStates(pool: ConsoleUpstreams | undefined): UpstreamState[] {
  return (pool?.names() ?? []).map((name) => {
    const down = pool?.availability.get(name) ?? null;
    if (!down)
      return { name, state: 'available', since: null, attempts: null, summary: null, authorizationUrl: null };
    return {
      name,
      state: down.needsUser
        ? 'authorization required'
        : down.authorizationFailed
          ? 'authorization failed'
          : 'unavailable',
      since: down.since,
      attempts: down.attempts,
      summary: down.summary,
      authorizationUrl: down.needsUser?.authorizationUrl ?? null,
    };
  });
}

/** How many rows a list page shows at most. */
export const LIST_LIMIT = 200;

/** How many refused entries one refusals page reads at most (the newest of its window). */
const REFUSALS_READ = 20_000;

/** A call the policy refused, with the rules that denied it (`policy_rule_matched`). */
export interface PolicyDenial {
  at: string;
  agentId: string;
  tool: string | null;
  code: string;
  rules: string[];
  /** The session whose chain holds the denial, null for the gateway chain. */
  sessionId: string | null;
}

const policyDenial = (e: AuditEntry): PolicyDenial => ({
  at: e.timestamp_utc,
  agentId: e.agent_id ?? '',
  tool: e.tool_name ?? null,
  code: e.error_code ?? 'UNKNOWN',
  rules: e.policy_rule_matched ?? [],
  sessionId: e.chain_id === GATEWAY_CHAIN_ID ? null : e.session_id,
});

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

  /** A session's audit bundle as JSON text, in pages (docs/spec/audit-entries.md#bundles). */
  bundleJson(sessionId: string): AsyncGenerator<string> {
    return this.chain.bundleJson(sessionId, sessionId);
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

  /** Entries of every chain matching a search, newest first (at most {@link LIST_LIMIT}). */
  search(filter: SearchFilter): AuditEntry[] {
    return this.chain.search(filter, LIST_LIMIT);
  }

  executions(): ExecutionRow[] {
    return listExecutions(this.db, { agentId: null, state: null }).slice(0, LIST_LIMIT);
  }

  /**
   * Refused requests in every chain, counted by error code per minute (last hour) or per
   * hour (last 48 hours), and the policy denials among them (newest first, with their rules). An entry of rate-bounded unauthenticated requests counts `detail.count`.
   */
  refusals(
    size: BucketSize,
    now = Date.now(),
  ): { buckets: RefusalBucket[]; codes: string[]; denials: PolicyDenial[] } {
    const { ms, span } = BUCKETS[size];
    const first = Math.floor(now / ms) * ms - (span - 1) * ms;
    // The chain's timestamps carry microseconds (store/entries/clock.ts); compare in the same format.
    const since = `${new Date(first).toISOString().slice(0, 23)}000Z`;
    const buckets = new Map<number, Record<string, number>>();
    const codes = new Set<string>();
    const denials: PolicyDenial[] = [];
    for (const e of this.chain.refusedInAnyChainSince(since, REFUSALS_READ)) {
      if (e.policy_decision === 'deny') denials.push(policyDenial(e));
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
      denials: denials.slice(0, LIST_LIMIT),
    };
  }
}
