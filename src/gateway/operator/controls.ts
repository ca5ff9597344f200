/**
 * Operator controls (docs/spec/policy.md#operator-controls, docs/replicas.md#serving-as-a-replica),
 * served under /operator/* to operator credentials only, on either engine:
 *
 * - `POST /operator/policy/reload` — a signed bundle replaces the running policy without a
 *   restart, through the engine's {@link PolicyReloads} (reloads.ts).
 * - `POST /operator/agents/{agent_id}/block` `{reason?}` — the kill switch: recorded as
 *   `agent_blocked` in the gateway chain; the agent's open sessions are closed with claims;
 *   every route refuses it from then on (also after a restart: blocks are read back from the
 *   gateway chain). `…/unblock` lifts it (`agent_unblocked`). With several replicas every one
 *   reads the chain's new block entries every {@link BLOCK_READ_MS} and applies them, so a
 *   block through one replica refuses the agent on every replica within that interval plus one
 *   read (calls admitted by a replica before it read the block are served), and each replica
 *   closes again the sessions it finds open when it reads the block.
 * - `GET /operator/status` — running policy, catalog, drifted tools, blocked agents (and, on a
 *   replica, its id and read times).
 */

import type { Logger } from 'pino';
import type { CatalogGuard } from '../../catalog/guard.js';
import { CmcpError, clip } from '../../errors/index.js';
import type { PolicyBundle } from '../../policy/bundle.js';
import type { PolicyState } from '../../policy/state.js';
import type { SessionFacts } from '../../session/types.js';
import type { BlockEntryType, BlockEvent } from '../../store/port.js';
import type { OperatorApi } from './plugin.js';

/** How often a replica reads the gateway chain's new block entries and reloads (ms). */
export const BLOCK_READ_MS = 1000;

/** A session closed by a block, as the operator's answer names it. */
export interface ClosedSession {
  session_id: string;
  agent_id: string;
  claim_sequence: number;
}

/** Where agent blocks are recorded and read (blocks.ts, over the storage port). */
export interface BlockLedger {
  /** The block entries after `sequence` (-1: all), in chain order. */
  since(sequence: number): Promise<BlockEvent[]>;
  /**
   * Records `type` for `agentId` unless the agent's newest such entry already says so; `apply`
   * is told the new entry's sequence.
   * @returns the entry's hash and sequence, or null when nothing was recorded.
   */
  record(
    type: BlockEntryType,
    agentId: string,
    detail: Record<string, unknown>,
    apply: (sequence: number) => void,
  ): Promise<{ entry_hash: string; sequence: number } | null>;
  /** Closes every open session of `agentId` with a claim (reason `agent_blocked`). */
  closeOpenOf(agentId: string): Promise<ClosedSession[]>;
  /** True when `agentId` opened a session before (token agents); absent: only the known agents. */
  hasSessions?(agentId: string): Promise<boolean>;
  /** What `GET /operator/status` adds for this engine (a replica's id), absent: nothing. */
  replicaId?: string;
}

/** Signed policy reloads on one engine. */
export interface PolicyReloads {
  /** Resolves once every session it closes has its claim. */
  reload(operatorId: string, body: unknown): Promise<Record<string, unknown>>;
  /** Reads reloads recorded by other replicas (a replica only). */
  read?(): Promise<void>;
}

/**
 * The answer to an accepted reload, on either engine: the installed and the previous bundle,
 * the gateway measurement the next session binds (taken again by a reload hook, if any), the
 * `policy_reload` entry and the sessions closed.
 */
export function reloadAnswer(
  next: PolicyBundle,
  previous: PolicyBundle,
  facts: SessionFacts,
  entryHash: string,
  closed: unknown[],
): Record<string, unknown> {
  return {
    bundle_hash: next.hash,
    version: next.manifest.version,
    previous_bundle_hash: previous.hash,
    previous_version: previous.manifest.version,
    gateway_measurement: facts.gatewayMeasurement,
    entry_hash: entryHash,
    sessions_closed: closed,
  };
}

export interface OperatorDeps {
  blocks: BlockLedger;
  reloads: PolicyReloads;
  facts: SessionFacts;
  policy: PolicyState | null;
  catalog: CatalogGuard | null;
  /** Agent ids an operator may block (configured agents, plus `dev` in dev mode). */
  knownAgents: Set<string>;
  log: Logger;
}

export class OperatorControls implements OperatorApi {
  /** Agent id → its block state and the gateway-chain sequence that set it. */
  private readonly state = new Map<string, { blocked: boolean; sequence: number }>();
  /** The newest gateway-chain sequence read for blocks (-1: none yet). */
  private readSequence = -1;
  private readAt: string | null = null;
  private timer: NodeJS.Timeout | null = null;
  private reading: Promise<void> | null = null;

  constructor(private readonly d: OperatorDeps) {}

  /**
   * Reads every block recorded so far (before serving: blocks survive restarts); with
   * `everyMs` (replicas), reads new blocks and reloads again on that interval.
   * @throws (rejects) the store's errors of the first read.
   */
  async start(everyMs?: number): Promise<void> {
    await this.readBlocks();
    await this.d.reloads.read?.();
    if (everyMs === undefined) return;
    this.timer = setInterval(() => {
      this.readBlocks().catch((e) =>
        this.d.log.warn({ err: (e as Error).message }, 'could not read agent blocks; retrying'),
      );
      this.d.reloads
        .read?.()
        .catch((e) =>
          this.d.log.warn({ err: (e as Error).message }, 'could not read policy reloads; retrying'),
        );
    }, everyMs);
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
        const events = await this.d.blocks.since(this.readSequence);
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
            this.d.blocks
              .closeOpenOf(agentId)
              .catch((err) =>
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

  /** A newer entry wins, whichever arrived first (this process's own write, or a read). */
  private apply(agentId: string, blocked: boolean, sequence: number): void {
    const cur = this.state.get(agentId);
    if (cur && cur.sequence >= sequence) return;
    this.state.set(agentId, { blocked, sequence });
  }

  /**
   * An agent authenticated by a JWT access token (the `oauth` section): from now on operators can
   * block it like a configured agent.
   */
  noteAgent(agentId: string): void {
    this.d.knownAgents.add(agentId);
  }

  /** The agent ids an operator may block, sorted. */
  agentIds(): string[] {
    return [...this.d.knownAgents].sort();
  }

  isBlocked(agentId: string): boolean {
    return this.state.get(agentId)?.blocked ?? false;
  }

  reloadPolicy(operatorId: string, body: unknown): Promise<Record<string, unknown>> {
    return this.d.reloads.reload(operatorId, body);
  }

  private async known(agentId: string): Promise<void> {
    if (this.d.knownAgents.has(agentId) || (await this.d.blocks.hasSessions?.(agentId))) return;
    throw new CmcpError('AGENT_NOT_FOUND', `unknown agent ${clip(agentId, 60)}`);
  }

  /** Records `type` and applies it here at once. */
  private record(type: BlockEntryType, agentId: string, detail: Record<string, unknown>) {
    const blocked = type === 'agent_blocked';
    return this.d.blocks.record(type, agentId, detail, (sequence) => this.apply(agentId, blocked, sequence));
  }

  async blockAgent(operatorId: string, agentId: string, body: unknown): Promise<Record<string, unknown>> {
    await this.known(agentId);
    const b = (body ?? {}) as { reason?: unknown };
    if (
      typeof b !== 'object' ||
      (b.reason !== undefined && (typeof b.reason !== 'string' || b.reason.length > 200))
    )
      throw new CmcpError('INVALID_REQUEST', 'body must be {reason?: string of at most 200 characters}');
    const entry = await this.record('agent_blocked', agentId, {
      operator_id: operatorId,
      reason: (b.reason as string | undefined) ?? null,
    });
    if (!entry) return { agent_id: agentId, blocked: true, already_blocked: true, sessions_closed: [] };
    const closed = await this.d.blocks.closeOpenOf(agentId);
    this.d.log.warn(
      { operator_id: operatorId, agent_id: agentId, sessions_closed: closed.length },
      'agent blocked',
    );
    return { agent_id: agentId, blocked: true, entry_hash: entry.entry_hash, sessions_closed: closed };
  }

  async unblockAgent(operatorId: string, agentId: string): Promise<Record<string, unknown>> {
    await this.known(agentId);
    const entry = await this.record('agent_unblocked', agentId, { operator_id: operatorId });
    if (!entry) return { agent_id: agentId, blocked: false };
    return { agent_id: agentId, blocked: false, entry_hash: entry.entry_hash };
  }

  status(): Record<string, unknown> {
    const b = this.d.policy?.engine.bundle;
    const replicaId = this.d.blocks.replicaId;
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
      ...(replicaId !== undefined
        ? {
            replica: {
              replica_id: replicaId,
              // Blocks and policy reloads recorded through other replicas apply here within this
              // interval plus one read.
              blocks_read_every_ms: BLOCK_READ_MS,
              blocks_read_at: this.readAt,
            },
          }
        : {}),
    };
  }
}
