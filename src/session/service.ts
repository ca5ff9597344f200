/**
 * Gateway sessions (docs/spec/mcp.md, docs/spec/binding.md) on either engine, over the storage
 * port (store/port.ts SessionStore): each session is one audit chain whose root is bound into
 * hardware evidence at creation and which ends in one signed claim at close. A session belongs
 * to the agent that created it; for anyone else it does not exist. On SQLite only the instance
 * that opened a session serves and closes it; PostgreSQL replicas serve any session
 * (docs/replicas.md#sessions-across-replicas), the claim signed by the closing replica's key.
 *
 * Default sessions are opened on first use and rotated (closed with a claim, reason `rotated`)
 * after `sessions.default_max_calls` calls or `default_max_age_s` seconds. Within one process
 * the resolution is serialised per agent; two replicas that find none at the same moment each
 * open one, and the agent's calls then go to the newer one.
 */
import { randomUUID } from 'node:crypto';
import { Readable } from 'node:stream';
import type { AnyClaim as Claim } from '@cmcp/verify/formats';
import { b64u } from '@cmcp/verify/formats';
import type { Logger } from 'pino';
import { claimIssuer } from '../claim/issuer.js';
import { CmcpError } from '../errors/index.js';
import { LoopSlice } from '../offload/loop-slice.js';
import type { Answer, SessionRef, SessionStore } from '../store/port.js';
import type { AttestationProvider, AttestationTier } from '../tee/provider.js';
import { BindingBatcher, DEFAULT_BATCH_LIMIT } from './binding-batcher.js';
import { bindingEntry, bindingRequiredError, bindSession, sessionPreimage } from './binding-record.js';
import { claimInputsFor } from './claim-binding.js';
import type { AgentSessions, RelaySessionReads } from './ports.js';
import type { GatewayKey, SessionCreated, SessionFacts, SessionLimits, SessionRow } from './types.js';

export type { GatewayKey, SessionCreated, SessionFacts, SessionLimits, SessionRow } from './types.js';

/** Agents whose default session {@link SessionService} remembers at once (then it starts over). */
const MAX_REMEMBERED_DEFAULTS = 10_000;

/** Tries per session of a batch close (a block, a reload, start-up, shutdown) before it is left unusable. */
const BATCH_CLOSE_TRIES = 3;

/** What a session service is configured with besides its store and identity. */
export interface SessionServiceOptions {
  /** Rotation of default sessions. */
  limits: SessionLimits;
  /** minimum_tier that every session must be bound at (src/tee/tier.ts); null or absent: serve unbound. */
  requiredTier?: AttestationTier | null;
  /** Sessions per quote (session/binding-batcher.ts; 1: each its own quote). */
  batchLimit?: number;
}

/** A closed session as a batch close reports it. */
export interface BatchClosed extends SessionRef {
  claim_sequence: number;
}

/** The stored canonical text of each claim a close here issued (so its answer needs no read). */
const texts = new WeakMap<Claim, Buffer>();

/** The canonical text (UTF-8 JCS) stored for `claim` if this process's close issued it, else undefined. */
export function issuedText(claim: Claim): Buffer | undefined {
  return texts.get(claim);
}

/** `answer`'s value passed through `fn`, at once when it is a value. */
function mapAnswer<T, U>(answer: Answer<T>, fn: (value: T) => U): Answer<U> {
  return answer instanceof Promise ? answer.then(fn) : fn(answer);
}

export class SessionService implements AgentSessions, RelaySessionReads {
  /** Sessions opened while a quote is in flight share the next one (docs/spec/binding.md#batched-bindings). */
  readonly binder: BindingBatcher;
  /** Per agent: the default-session resolution in progress (one at a time per process). */
  private readonly defaultLocks = new Map<string, Promise<unknown>>();
  /** Sessions being closed in batches (closeInBatches): no longer usable, claim not yet issued. */
  private readonly closing = new Set<string>();
  /**
   * The default session last found or created, per agent, where only this process opens its
   * sessions (SQLite): read again by its primary key instead of the agent's sessions searched
   * and sorted on every call.
   */
  private readonly defaultIds = new Map<string, string>();
  /** Whether a call may run in a session (its binding names the running policy); unset: every open session. */
  private usable: ((row: SessionRow) => Promise<boolean>) | null = null;
  private readonly limits: SessionLimits;
  private readonly requiredTier: AttestationTier | null;

  constructor(
    private readonly store: SessionStore,
    /** This process's gateway key (made at its start): it signs the claims of the sessions it closes. */
    private readonly key: GatewayKey,
    /**
     * What the gateway runs (docs/spec/binding.md, docs/spec/policy.md): read at every session
     * creation and claim, so a policy reload (which mutates this object) binds the next session
     * to the new hash.
     */
    private readonly facts: SessionFacts,
    private readonly provider: AttestationProvider,
    private readonly log: Logger,
    opts: SessionServiceOptions,
  ) {
    this.limits = opts.limits;
    this.requiredTier = opts.requiredTier ?? null;
    this.binder = new BindingBatcher(provider, key.thumbprint, opts.batchLimit ?? DEFAULT_BATCH_LIMIT);
  }

  /** Sets the check of {@link usable} (a replica's reloads are made after its sessions). */
  checkUsable(fn: (row: SessionRow) => Promise<boolean>): void {
    this.usable = fn;
  }

  /**
   * Opens a session: writes its genesis entry, then binds the chain root into hardware
   * evidence. A binding failure is logged, recorded as `attestation_binding_failed`, and the
   * session serves anyway with the binding absent (docs/spec/binding.md) — unless a binding
   * tier is required, when the session is closed (reason `binding_required`, its claim saying
   * the binding is absent) and refused.
   * @param opts.challenge optional verifier nonce (base64url) folded into the binding preimage.
   * @throws (rejects) CmcpError SESSION_BINDING_REQUIRED; the store's errors.
   */
  async create(
    agentId: string,
    opts: { isDefault?: boolean; challenge?: string | null } = {},
  ): Promise<SessionCreated> {
    const sessionId = randomUUID();
    const thumb = b64u(this.key.thumbprint);
    const genesis = await this.store.openSession({
      sessionId,
      agentId,
      isDefault: opts.isDefault ?? false,
      provider: this.provider.name,
      keyThumbprint: thumb,
    });
    // read before the quote: every claim up to it was quoted before this session's binding
    const openedAfter = await this.store.newestClaimSequence();
    const preimage = sessionPreimage(
      sessionId,
      genesis.entry_hash,
      thumb,
      this.facts,
      opts.challenge ?? null,
      openedAfter,
    );
    const record = await bindSession(this.binder, this.provider, preimage, this.log);
    const evidence = record.evidence;
    await this.store.recordBinding(sessionId, bindingEntry(sessionId, agentId, evidence), record);
    if (evidence.status === 'absent' && this.requiredTier !== null) {
      await this.closeAwaited(agentId, sessionId, 'binding_required');
      throw bindingRequiredError(sessionId, this.provider.name, evidence.reason, this.requiredTier);
    }
    return {
      session_id: sessionId,
      chain_root: genesis.entry_hash,
      binding: { provider: evidence.provider, status: evidence.status, reason: evidence.reason },
    };
  }

  /** The session row if it exists and belongs to `agentId` (whichever replica opened it). */
  get(agentId: string, sessionId: string): Answer<SessionRow | undefined> {
    return mapAnswer(this.store.session(sessionId), (row) =>
      row && row.agent_id === agentId ? row : undefined,
    );
  }

  /** The agent a session belongs to, whatever the caller (cross-agent probes), or null. */
  async agentOf(sessionId: string): Promise<string | null> {
    return (await this.store.session(sessionId))?.agent_id ?? null;
  }

  /** Whether this process may use and close `row` (on SQLite only the instance that opened it). */
  private served(row: SessionRow): boolean {
    return this.store.sharedSessions || row.owner === this.store.fence.replicaId;
  }

  /**
   * The session a call runs in: the named one (must be open and the agent's), or the agent's
   * default session, rotated (closed with a claim) after max calls or max age. A session bound
   * to another policy than the running one (checkUsable) is closed and refused.
   * @throws (rejects) CmcpError UNKNOWN_SESSION | SESSION_CLOSED | SESSION_BINDING_REQUIRED.
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

  private async resolveNamed(agentId: string, sessionId: string): Promise<SessionRow> {
    const row = await this.get(agentId, sessionId);
    // Another instance's session is not usable on SQLite: its binding is that instance's key.
    if (!row || !this.served(row)) throw new CmcpError('UNKNOWN_SESSION', 'unknown session');
    if (row.status !== 'open' || this.closing.has(sessionId))
      throw new CmcpError('SESSION_CLOSED', 'session is closed', { session_id: sessionId });
    if (!this.usable || (await this.usable(row))) return row;
    await this.closeAwaited(agentId, sessionId, 'policy_reload');
    throw new CmcpError('SESSION_CLOSED', 'session is closed', { session_id: sessionId });
  }

  /** The agent's newest open default session, if any (see {@link defaultIds}). */
  private async openDefault(agentId: string): Promise<SessionRow | undefined> {
    const known = this.defaultIds.get(agentId);
    if (known !== undefined) {
      const row = await this.get(agentId, known);
      if (row && row.status === 'open' && row.is_default === 1 && this.served(row)) return row;
    }
    const id = await this.store.openDefaultSession(agentId);
    const row = id === undefined ? undefined : await this.get(agentId, id);
    if (!this.store.sharedSessions) this.rememberDefault(agentId, row?.session_id);
    return row?.status === 'open' ? row : undefined;
  }

  private rememberDefault(agentId: string, sessionId: string | undefined): void {
    // Bounded: agents named by tokens are not a configured set.
    if (this.defaultIds.size >= MAX_REMEMBERED_DEFAULTS) this.defaultIds.clear();
    if (sessionId === undefined) this.defaultIds.delete(agentId);
    else this.defaultIds.set(agentId, sessionId);
  }

  private async resolveDefault(agentId: string): Promise<SessionRow> {
    const row = await this.openDefault(agentId);
    if (row && !this.closing.has(row.session_id)) {
      const expired =
        row.call_count >= this.limits.defaultMaxCalls ||
        Date.now() - row.created_ms >= this.limits.defaultMaxAgeS * 1000;
      const current = !this.usable || (await this.usable(row));
      if (!expired && current) return row;
      await this.closeAwaited(agentId, row.session_id, current ? 'rotated' : 'policy_reload');
    }
    const created = await this.create(agentId, { isDefault: true });
    if (!this.store.sharedSessions) this.rememberDefault(agentId, created.session_id);
    const fresh = await this.get(agentId, created.session_id);
    if (!fresh) throw new CmcpError('UNKNOWN_SESSION', 'unknown session');
    return fresh;
  }

  /** Sessions of `agentId` open now (limits.agent_max_open_sessions): this instance's on SQLite, every replica's on PostgreSQL. */
  openCount(agentId: string): Answer<number> {
    return this.store.openSessionCount(agentId);
  }

  /**
   * Closes a session with a claim signed by this process's key (`reason` in its
   * `session_close`: `requested`, `rotated`, `agent_blocked`, `policy_reload`…), without
   * holding the event loop (the adapter reads the chain in pages); the session is unusable
   * meanwhile (SESSION_CLOSED). Closing a closed session returns its stored claim.
   * @throws (rejects) CmcpError UNKNOWN_SESSION; the store's errors (SQLITE_BUSY, LEASE_LOST).
   */
  async closeAwaited(agentId: string, sessionId: string, reason = 'requested'): Promise<Claim> {
    const row = await this.get(agentId, sessionId);
    if (!row) throw new CmcpError('UNKNOWN_SESSION', 'unknown session');
    if (row.status === 'closed') return (await this.storedClaim(sessionId)) as Claim;
    // Only the instance that opened a SQLite session can close it: the claim is signed with its key.
    if (!this.served(row)) throw new CmcpError('UNKNOWN_SESSION', 'unknown session');
    const marked = !this.closing.has(sessionId);
    if (marked) this.closing.add(sessionId);
    try {
      const issuer = claimIssuer(
        (locked) => claimInputsFor(locked, sessionId, agentId, this.key, this.facts, this.provider.name),
        this.store.fence,
      );
      const closed = await this.store.closeSession(sessionId, reason, issuer);
      // The close route answers with this text, not a read of it back.
      if (closed.issued) texts.set(closed.claim, closed.canonical);
      return closed.claim;
    } finally {
      if (marked) this.closing.delete(sessionId);
    }
  }

  private async storedClaim(sessionId: string): Promise<Claim | undefined> {
    return (await this.store.claim(sessionId))?.claim;
  }

  /**
   * {@link closeAwaited} answering the claim's canonical text (ports.ts AgentSessions.closeText):
   * the text just issued, or a closed session's stored text, unparsed.
   * @throws (rejects) CmcpError UNKNOWN_SESSION; the store's errors.
   */
  async closeText(agentId: string, sessionId: string): Promise<Buffer> {
    const row = await this.get(agentId, sessionId);
    if (!row) throw new CmcpError('UNKNOWN_SESSION', 'unknown session');
    if (row.status !== 'closed') {
      const issued = issuedText(await this.closeAwaited(agentId, sessionId));
      if (issued) return issued;
    }
    return this.claimText(agentId, sessionId);
  }

  /** The stored claim of a closed session. @throws (rejects) CmcpError UNKNOWN_SESSION | SESSION_OPEN. */
  async claim(agentId: string, sessionId: string): Promise<Claim> {
    if (!(await this.get(agentId, sessionId))) throw new CmcpError('UNKNOWN_SESSION', 'unknown session');
    const c = await this.storedClaim(sessionId);
    if (!c) throw new CmcpError('SESSION_OPEN', 'the session is still open; close it to get its claim');
    return c;
  }

  /**
   * The stored canonical text (UTF-8 JCS) of a closed session's claim, exactly as signed and
   * hashed: what `GET /sessions/{id}/claim` sends without parsing it.
   * @throws (rejects) CmcpError UNKNOWN_SESSION | SESSION_OPEN.
   */
  async claimText(agentId: string, sessionId: string): Promise<Buffer> {
    if (!(await this.get(agentId, sessionId))) throw new CmcpError('UNKNOWN_SESSION', 'unknown session');
    const text = await this.store.claimCanonical(sessionId);
    if (!text) throw new CmcpError('SESSION_OPEN', 'the session is still open; close it to get its claim');
    return text;
  }

  /**
   * The session's audit bundle (docs/spec/audit-entries.md#bundles) as JSON text, read and sent
   * in pages. @throws (rejects) CmcpError UNKNOWN_SESSION.
   */
  async bundle(agentId: string, sessionId: string): Promise<Readable> {
    if (!(await this.get(agentId, sessionId))) throw new CmcpError('UNKNOWN_SESSION', 'unknown session');
    return Readable.from(this.store.bundleJson(sessionId, sessionId));
  }

  /**
   * Closes every open session (of one agent, or of all agents) with a claim each — the kill
   * switch, a policy reload (so no session's claim spans two policies), shutdown — without
   * holding the event loop: the sessions are made unusable at once (SESSION_CLOSED; the default
   * session is replaced), then closed one by one, yielding whenever ~0.5 ms of work has run
   * (offload/loop-slice.ts SLICE_MS).
   * @returns the closed sessions with the sequence of each claim.
   */
  async closeOpenInBatches(agentId: string | null, reason: string): Promise<BatchClosed[]> {
    return this.closeInBatches(await this.store.openSessions(agentId), reason);
  }

  /**
   * Marks `rows` unusable now, then closes them, yielding after each ~0.5 ms of work; a close
   * that fails {@link BATCH_CLOSE_TRIES} times is logged and its session left unusable.
   */
  private async closeInBatches(rows: readonly SessionRef[], reason: string): Promise<BatchClosed[]> {
    for (const r of rows) this.closing.add(r.session_id);
    const out: BatchClosed[] = [];
    const slice = new LoopSlice();
    for (const r of rows) {
      await slice.pause();
      for (let attempt = 1; ; attempt++) {
        try {
          const c = await this.closeAwaited(r.agent_id, r.session_id, reason);
          out.push({ session_id: r.session_id, agent_id: r.agent_id, claim_sequence: c.claim_sequence });
          this.closing.delete(r.session_id);
          break;
        } catch (e) {
          if (attempt < BATCH_CLOSE_TRIES) continue; // a transient failure (the signing thread restarts)
          // It stays unusable here (SESSION_CLOSED): a session a reload or a block meant to end
          // must not take calls under a policy its claim would not name. A close of it later
          // (POST /sessions/{id}/close, shutdown) still issues its claim.
          this.log.error(
            { session_id: r.session_id, err: (e as Error).message, tries: attempt },
            'could not close session; it stays unusable',
          );
          break;
        }
      }
    }
    return out;
  }

  /**
   * Start-up: closes, with claims, every session still open under another gateway key (an
   * earlier process; none where any replica serves any session). Such a session can never again
   * be claimed as hardware-bound by this key, so it is ended honestly (its claim reports the
   * binding absent, GATEWAY_KEY_ROTATED) instead of silently continuing as signed-only. They are
   * unusable at once and closed in batches, so the listener can open meanwhile.
   * @returns the number of sessions closed.
   */
  async closeStale(): Promise<number> {
    const rows = await this.store.staleSessions(b64u(this.key.thumbprint));
    await this.closeInBatches(rows, 'gateway_restarted');
    return rows.length;
  }
}
