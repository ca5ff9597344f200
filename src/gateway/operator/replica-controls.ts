/**
 * A replica's operator controls (docs/replicas.md#serving-as-a-replica), the PostgreSQL side of
 * controls.ts:
 *
 * - `POST /operator/agents/{agent_id}/block` and `…/unblock`: recorded as `agent_blocked` /
 *   `agent_unblocked` in the shared gateway chain (store/postgres/agent-blocks.ts) and applied
 *   on this replica at once; every other replica reads the chain's new block entries every
 *   {@link BLOCK_READ_MS} and applies them, so a block through one replica refuses the agent on
 *   every replica within that interval plus one read (calls admitted by a replica before it
 *   read the block are served). A block closes the agent's open sessions, whichever replica
 *   opened them (reason `agent_blocked`), and each replica closes again those it finds open
 *   when it reads the block (opened in that window).
 * - `GET /operator/status`: this replica's policy, catalog and drifted tools, the blocked agents
 *   as last read, and the replica's id and read times.
 * - `POST /operator/policy/reload`: replica-reload.ts, its entries read with the blocks.
 */
import { CmcpError, clip } from '@cmcp/verify/errors/index';
import type pg from 'pg';
import type { Logger } from 'pino';
import type { CatalogGuard } from '../../catalog/guard.js';
import type { PolicyState } from '../../policy/state.js';
import type { ReplicaSessionService } from '../../session/replica-service.js';
import type { SessionFacts } from '../../session/types.js';
import {
  agentHasSessions,
  blockEventsSince,
  openSessionsOf,
  recordAgentBlock,
} from '../../store/postgres/agent-blocks.js';
import type { Fence } from '../../store/postgres/leases.js';
import type { OperatorApi } from './plugin.js';
import type { ReplicaReloads } from './replica-reload.js';

/** How often a replica reads the gateway chain's new block entries (ms). */
export const BLOCK_READ_MS = 1000;

export interface ReplicaOperatorDeps {
  pool: pg.Pool;
  fence: Fence;
  sessions: ReplicaSessionService;
  facts: SessionFacts;
  policy: PolicyState | null;
  catalog: CatalogGuard | null;
  /** Configured agent ids (plus `dev` in dev mode); token agents count once they opened a session. */
  knownAgents: Set<string>;
  /** Signed reloads across replicas (replica-reload.ts), read with the blocks. */
  reloads: ReplicaReloads;
  log: Logger;
}

export class ReplicaOperator implements OperatorApi {
  /** Agent id → its block state and the gateway-chain sequence that set it. */
  private readonly state = new Map<string, { blocked: boolean; sequence: number }>();
  /** The newest gateway-chain sequence read for blocks (-1: none yet). */
  private readSequence = -1;
  private readAt: string | null = null;
  private timer: NodeJS.Timeout | null = null;
  private reading: Promise<void> | null = null;

  constructor(private readonly d: ReplicaOperatorDeps) {}

  /**
   * Reads every block recorded so far (before serving: blocks survive restarts), then re-reads
   * every {@link BLOCK_READ_MS}. @throws (rejects) pg errors of the first read.
   */
  async start(): Promise<void> {
    await this.readBlocks();
    await this.d.reloads.read();
    this.timer = setInterval(() => {
      this.readBlocks().catch((e) =>
        this.d.log.warn({ err: (e as Error).message }, 'could not read agent blocks; retrying'),
      );
      this.d.reloads
        .read()
        .catch((e) =>
          this.d.log.warn({ err: (e as Error).message }, 'could not read policy reloads; retrying'),
        );
    }, BLOCK_READ_MS);
    this.timer.unref();
  }

  stop(): void {
    if (this.timer) clearInterval(this.timer);
    this.timer = null;
  }

  /** The gateway chain's block entries since the last read, applied in order (one read at a time). */
  readBlocks(): Promise<void> {
    this.reading ??= (async () => {
      try {
        const first = this.readSequence < 0;
        const events = await blockEventsSince(this.d.pool, this.readSequence);
        const newlyBlocked = new Set<string>();
        for (const e of events) {
          const was = this.isBlocked(e.agentId);
          this.apply(e.agentId, e.type === 'agent_blocked', e.sequence);
          if (!was && this.isBlocked(e.agentId)) newlyBlocked.add(e.agentId);
          this.readSequence = Math.max(this.readSequence, e.sequence);
        }
        this.readAt = new Date().toISOString();
        // A session this replica opened for the agent before it read the block is closed too.
        if (!first)
          for (const agentId of newlyBlocked)
            this.closeOpenOf(agentId).catch((err) =>
              this.d.log.warn(
                { err: (err as Error).message, agent_id: agentId },
                'could not close a blocked agent session',
              ),
            );
      } finally {
        this.reading = null;
      }
    })();
    return this.reading;
  }

  /** A newer entry wins, whichever arrived first (this replica's own write, or a read). */
  private apply(agentId: string, blocked: boolean, sequence: number): void {
    const cur = this.state.get(agentId);
    if (cur && cur.sequence >= sequence) return;
    this.state.set(agentId, { blocked, sequence });
  }

  isBlocked(agentId: string): boolean {
    return this.state.get(agentId)?.blocked ?? false;
  }

  reloadPolicy(operatorId: string, body: unknown): Promise<Record<string, unknown>> {
    return this.d.reloads.reload(operatorId, body);
  }

  private async known(agentId: string): Promise<void> {
    if (this.d.knownAgents.has(agentId) || (await agentHasSessions(this.d.pool, agentId))) return;
    throw new CmcpError('AGENT_NOT_FOUND', `unknown agent ${clip(agentId, 60)}`);
  }

  async blockAgent(operatorId: string, agentId: string, body: unknown): Promise<Record<string, unknown>> {
    await this.known(agentId);
    const b = (body ?? {}) as { reason?: unknown };
    if (
      typeof b !== 'object' ||
      (b.reason !== undefined && (typeof b.reason !== 'string' || b.reason.length > 200))
    )
      throw new CmcpError('INVALID_REQUEST', 'body must be {reason?: string of at most 200 characters}');
    const entry = await recordAgentBlock(this.d.pool, this.d.fence, 'agent_blocked', agentId, {
      operator_id: operatorId,
      reason: (b.reason as string | undefined) ?? null,
    });
    if (!entry) return { agent_id: agentId, blocked: true, already_blocked: true, sessions_closed: [] };
    this.apply(agentId, true, entry.sequence);
    const closed = await this.closeOpenOf(agentId);
    this.d.log.warn(
      { operator_id: operatorId, agent_id: agentId, sessions_closed: closed.length },
      'agent blocked',
    );
    return { agent_id: agentId, blocked: true, entry_hash: entry.entry_hash, sessions_closed: closed };
  }

  /** Closes every open session of a blocked agent, whichever replica opened it (reason `agent_blocked`). */
  private async closeOpenOf(agentId: string) {
    const closed: { session_id: string; agent_id: string; claim_sequence: number }[] = [];
    for (const sid of await openSessionsOf(this.d.pool, agentId)) {
      const claim = await this.d.sessions.closeAwaited(agentId, sid, 'agent_blocked');
      closed.push({ session_id: sid, agent_id: agentId, claim_sequence: claim.claim_sequence });
    }
    return closed;
  }

  async unblockAgent(operatorId: string, agentId: string): Promise<Record<string, unknown>> {
    await this.known(agentId);
    const entry = await recordAgentBlock(this.d.pool, this.d.fence, 'agent_unblocked', agentId, {
      operator_id: operatorId,
    });
    if (!entry) return { agent_id: agentId, blocked: false };
    this.apply(agentId, false, entry.sequence);
    return { agent_id: agentId, blocked: false, entry_hash: entry.entry_hash };
  }

  status(): Record<string, unknown> {
    const b = this.d.policy?.engine.bundle;
    return {
      policy: b
        ? {
            bundle_hash: b.hash,
            version: b.manifest.version,
            description: b.manifest.description,
            enforcement_mode: this.d.policy?.mode,
          }
        : null,
      enforcement_mode: this.d.facts.enforcementMode,
      catalog: this.d.catalog
        ? {
            catalog_hash: this.d.catalog.hash,
            tools: this.d.catalog.catalog.tools.length,
            drifted: this.d.catalog.driftedTools(),
          }
        : null,
      blocked_agents: [...this.state]
        .filter(([, s]) => s.blocked)
        .map(([id]) => id)
        .sort(),
      replica: {
        replica_id: this.d.fence.replicaId,
        // Blocks and policy reloads recorded through other replicas apply here within this
        // interval plus one read.
        blocks_read_every_ms: BLOCK_READ_MS,
        blocks_read_at: this.readAt,
      },
    };
  }
}
