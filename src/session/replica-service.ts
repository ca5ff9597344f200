/**
 * A PostgreSQL replica's sessions as the running gateway uses them (ports.ts: the call path's
 * `resolve`, the session routes' create, close, claim and bundle): ReplicaSessions
 * (replica-sessions.ts) for named sessions, any replica serving any session, plus the agents'
 * default sessions, opened on first use and rotated (closed with a claim, reason `rotated`)
 * after `sessions.default_max_calls` calls or `default_max_age_s` seconds, as service.ts does.
 *
 * Default sessions are shared by the replicas (the newest open one of the agent, whoever
 * opened it). Within one replica the resolution is serialised per agent; two replicas that find
 * none at the same moment each open one, and the agent's calls then go to the newer one (the
 * other stays open until its rotation or the agent's close) — no call is lost or counted twice.
 */
import { Readable } from 'node:stream';
import { CmcpError } from '@cmcp/verify/errors/index';
import type { Claim } from '@cmcp/verify/format/claim';
import type pg from 'pg';
import type { ClaimTextPieces } from '../claim/parts.js';
import type { SessionStore } from '../store/port.js';
import { chainBundleJson } from '../store/postgres/chain.js';
import { getExecution } from '../store/postgres/executions.js';
import { openDefaultSession, openSessionCount } from '../store/postgres/reads.js';
import type { AgentSessions, ExecutionReads, RelaySessionReads } from './ports.js';
import type { ReplicaSessions } from './replica-sessions.js';
import type { SessionCreated, SessionLimits, SessionRow } from './types.js';

export class ReplicaSessionService implements AgentSessions, RelaySessionReads {
  /** Per agent: the default-session resolution in progress (one at a time per replica). */
  private readonly defaultLocks = new Map<string, Promise<unknown>>();
  /**
   * Whether a call may run in a session on this replica (gateway/replica-reload.ts: its binding
   * names the running policy bundle); unset: every open session.
   */
  private usable: ((row: SessionRow) => Promise<boolean>) | null = null;

  /** Sets the check of {@link usable} (the reloads are made after the sessions). */
  checkUsable(fn: (row: SessionRow) => Promise<boolean>): void {
    this.usable = fn;
  }

  constructor(
    private readonly pool: pg.Pool,
    private readonly store: SessionStore,
    private readonly sessions: ReplicaSessions,
    private readonly limits: SessionLimits,
  ) {}

  /** Opens a named session bound into this replica's evidence. @throws (rejects) LEASE_LOST; pg errors. */
  create(agentId: string, opts: { challenge?: string | null }): Promise<SessionCreated> {
    return this.sessions.create(agentId, opts);
  }

  /**
   * The named open session (any replica's), or the agent's default session.
   * @throws (rejects) CmcpError UNKNOWN_SESSION | SESSION_CLOSED; LEASE_LOST; pg errors.
   */
  resolve(agentId: string, sessionId: string | undefined): Promise<SessionRow> {
    if (sessionId !== undefined) return this.resolveNamed(agentId, sessionId);
    const prev = this.defaultLocks.get(agentId) ?? Promise.resolve();
    const next = prev.then(() => this.resolveDefault(agentId));
    const settled = next.catch(() => undefined);
    this.defaultLocks.set(agentId, settled);
    // Forget the agent once nothing is queued behind this one (token agents are not a bounded set).
    void settled.then(() => {
      if (this.defaultLocks.get(agentId) === settled) this.defaultLocks.delete(agentId);
    });
    return next;
  }

  /** A named session bound to another policy than the running one is closed and refused. */
  private async resolveNamed(agentId: string, sessionId: string): Promise<SessionRow> {
    const row = await this.sessions.resolve(agentId, sessionId);
    if (!this.usable || (await this.usable(row))) return row;
    await this.sessions.close(agentId, sessionId, 'policy_reload');
    throw new CmcpError('SESSION_CLOSED', 'session is closed', { session_id: sessionId });
  }

  private async resolveDefault(agentId: string): Promise<SessionRow> {
    const id = await openDefaultSession(this.pool, agentId);
    const row = id === undefined ? undefined : await this.store.session(id);
    if (row && row.status === 'open') {
      const expired =
        row.call_count >= this.limits.defaultMaxCalls ||
        Date.now() - row.created_ms >= this.limits.defaultMaxAgeS * 1000;
      const current = !this.usable || (await this.usable(row));
      if (!expired && current) return row;
      await this.sessions.close(agentId, row.session_id, current ? 'rotated' : 'policy_reload');
    }
    const created = await this.sessions.create(agentId, { isDefault: true });
    return this.sessions.resolve(agentId, created.session_id);
  }

  /** Sessions of `agentId` open now, on every replica. */
  openCount(agentId: string): Promise<number> {
    return openSessionCount(this.pool, agentId);
  }

  /**
   * Closes with a claim signed by this replica (`reason` in its `session_close`: `requested`, or
   * `agent_blocked` from an operator block). @throws (rejects) UNKNOWN_SESSION; LEASE_LOST; pg errors.
   */
  closeAwaited(agentId: string, sessionId: string, reason = 'requested'): Promise<Claim> {
    return this.sessions.close(agentId, sessionId, reason);
  }

  closeText(agentId: string, sessionId: string): Promise<Buffer | ClaimTextPieces> {
    return this.sessions.closeText(agentId, sessionId);
  }

  claimText(agentId: string, sessionId: string): Promise<ClaimTextPieces> {
    return this.sessions.claimText(agentId, sessionId);
  }

  /**
   * The session's audit bundle (docs/spec/audit-entries.md#bundles) as JSON text, read and sent
   * in pages (store/postgres/chain.ts chainBundleJson). @throws (rejects) UNKNOWN_SESSION.
   */
  async bundle(agentId: string, sessionId: string): Promise<Readable> {
    const row = await this.store.session(sessionId);
    if (!row || row.agent_id !== agentId) throw new CmcpError('UNKNOWN_SESSION', 'unknown session');
    return Readable.from(chainBundleJson(this.pool, sessionId, sessionId));
  }

  /** The session row if it exists and belongs to `agentId`, whichever replica opened it. */
  async get(agentId: string, sessionId: string): Promise<SessionRow | undefined> {
    const row = await this.store.session(sessionId);
    return row && row.agent_id === agentId ? row : undefined;
  }

  /** The read-only execution view (`GET /executions/:id`): any replica's admissions. */
  executions(): ExecutionReads {
    return { get: (agentId, executionId) => getExecution(this.pool, agentId, executionId) };
  }

  /** The agent a session belongs to, whatever the caller (cross-agent probes), or null. */
  async agentOf(sessionId: string): Promise<string | null> {
    return (await this.store.session(sessionId))?.agent_id ?? null;
  }
}
