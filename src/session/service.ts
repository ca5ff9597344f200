/**
 * Gateway sessions (docs/spec/mcp.md, docs/spec/binding.md): each is one audit chain whose root is bound into
 * hardware evidence at creation and which ends in one signed claim at close. A session
 * belongs to the agent that created it; for anyone else it does not exist.
 */
import { randomUUID } from 'node:crypto';
import { Readable } from 'node:stream';
import { CmcpError } from '@cmcp/verify/errors/index';
import { b64u } from '@cmcp/verify/format/canonical';
import type { Claim } from '@cmcp/verify/format/claim';
import type { Logger } from 'pino';
import type { AuditChain } from '../audit/chain.js';
import { type ChainSummary, claimTip, issueClaim, issueClaimFrom, storedClaim } from '../claim/build.js';
import { type ClaimTextPieces, storedClaimPieces } from '../claim/parts.js';
import { warmClaimSigning } from '../claim/sign.js';
import { type Db, immediate, immediateAsync } from '../store/db.js';
import { prepared } from '../store/statements.js';
import type { AttestationProvider, AttestationTier } from '../tee/provider.js';
import { BindingBatcher, DEFAULT_BATCH_LIMIT } from './binding-batcher.js';
import { bindingEntry, bindingRequiredError, bindSession, sessionPreimage } from './binding-record.js';
import { claimInputsFor } from './claim-binding.js';
import { type CloseDeps, closeOffLoop, issuedText } from './close.js';
import { catchUp, LoopSlice, summarizePaged } from './paged.js';
import type { GatewayKey, SessionCreated, SessionFacts, SessionLimits, SessionRow } from './types.js';

export type { GatewayKey, SessionCreated, SessionFacts, SessionLimits, SessionRow } from './types.js';

/** Agents whose default session {@link SessionService} remembers at once (then it starts over). */
const MAX_REMEMBERED_DEFAULTS = 10_000;

/** Tries per session of a batch close (a block, a reload, start-up, shutdown) before it is left unusable. */
const BATCH_CLOSE_TRIES = 3;

export class SessionService {
  /** Serialises default-session resolution per agent (creation and rotation). */
  private readonly defaultLocks = new Map<string, Promise<unknown>>();
  /** Sessions being closed in batches (closeInBatches): no longer usable, claim not yet issued. */
  private readonly closing = new Set<string>();
  /**
   * The default session {@link resolveDefault} last found or created, per agent: read again by
   * its primary key (~8 µs) instead of the agent's sessions searched and sorted (~30 µs) on
   * every call. Only resolveDefault creates default sessions, and the instance lock makes this
   * process the only one creating this instance's sessions, so no newer one can appear unseen.
   */
  private readonly defaultIds = new Map<string, string>();

  constructor(
    private readonly db: Db,
    private readonly chain: AuditChain,
    private readonly key: GatewayKey,
    private readonly provider: AttestationProvider,
    private readonly limits: SessionLimits,
    private readonly log: Logger,
    /**
     * What the gateway runs (docs/spec/binding.md, docs/spec/policy.md): read at every session creation and claim,
     * so a policy reload (which mutates this object) binds the next session to the new hash.
     */
    private readonly facts: SessionFacts,
    /** This gateway's instance_id: sessions are used and closed only by the instance that opened them. */
    private readonly instanceId = 'gateway',
    /** minimum_tier that every session must be bound at (src/tee/tier.ts); null: serve unbound. */
    private readonly requiredTier: AttestationTier | null = null,
    /** Sessions per quote (session/binding-batcher.ts; 1: each its own quote). */
    batchLimit = DEFAULT_BATCH_LIMIT,
  ) {
    this.binder = new BindingBatcher(provider, key.thumbprint, batchLimit);
    warmClaimSigning(); // the thread closes sign on (claim/sign.ts)
  }

  /** Sessions opened while a quote is in flight share the next one (docs/spec/binding.md#batched-bindings). */
  readonly binder: BindingBatcher;

  /**
   * Opens a session: writes its genesis entry, then binds the chain root into hardware
   * evidence. A binding failure is logged, recorded as `attestation_binding_failed`, and the
   * session serves anyway with the binding absent (docs/spec/binding.md) — unless a binding tier is
   * required, when the session is closed and refused.
   * @throws CmcpError SESSION_BINDING_REQUIRED (binding failed under minimum_tier).
   * @param challenge optional verifier nonce (base64url) folded into the binding preimage.
   */
  async create(
    agentId: string,
    opts: { isDefault?: boolean; challenge?: string | null } = {},
  ): Promise<SessionCreated> {
    const sessionId = randomUUID();
    const now = new Date();
    const thumb = b64u(this.key.thumbprint);
    const root = await immediateAsync(this.db, () => {
      const e = this.chain.append(sessionId, {
        entry_type: 'session_open',
        session_id: sessionId,
        agent_id: agentId,
        detail: { default_session: !!opts.isDefault, provider: this.provider.name },
      });
      this.db
        .prepare(
          `INSERT INTO sessions (session_id, agent_id, is_default, status, created_at, created_ms, chain_root,
             key_thumbprint, call_count, binding_json, owner) VALUES (?,?,?,?,?,?,?,?,0,'{}',?)`,
        )
        .run(
          sessionId,
          agentId,
          opts.isDefault ? 1 : 0,
          'open',
          now.toISOString(),
          now.getTime(),
          e.entry_hash,
          thumb,
          this.instanceId,
        );
      return e.entry_hash;
    });

    // read before the quote: every claim up to it was quoted before this session's binding
    const openedAfter = claimTip(this.db)?.claim_sequence ?? null;
    const preimage = sessionPreimage(sessionId, root, thumb, this.facts, opts.challenge ?? null, openedAfter);
    const record = await bindSession(this.binder, this.provider, preimage, this.log);
    const evidence = record.evidence;
    await immediateAsync(this.db, () => {
      this.chain.append(sessionId, bindingEntry(sessionId, agentId, evidence));
      this.db
        .prepare('UPDATE sessions SET binding_json = ? WHERE session_id = ?')
        .run(JSON.stringify(record), sessionId);
    });
    if (evidence.status === 'absent' && this.requiredTier !== null)
      await this.refuseUnbound(agentId, sessionId, evidence.reason);
    return {
      session_id: sessionId,
      chain_root: root,
      binding: { provider: evidence.provider, status: evidence.status, reason: evidence.reason },
    };
  }

  /**
   * minimum_tier without `serve_unbound` (docs/spec/refinements.md): an unbound session is closed at once
   * (its claim says binding absent, with the reason) and refused instead of served signed-only.
   * @throws CmcpError SESSION_BINDING_REQUIRED, always.
   */
  private async refuseUnbound(agentId: string, sessionId: string, reason: string | null): Promise<never> {
    await this.closeAwaited(agentId, sessionId, 'binding_required');
    throw bindingRequiredError(sessionId, this.provider.name, reason, this.requiredTier);
  }

  /** The session row if it exists and belongs to `agentId`. */
  get(agentId: string, sessionId: string): SessionRow | undefined {
    const row = prepared<[string], SessionRow>(this.db, 'SELECT * FROM sessions WHERE session_id = ?').get(
      sessionId,
    );
    return row && row.agent_id === agentId ? row : undefined;
  }

  /**
   * The session a call runs in: the named one (must be open and the agent's), or the agent's
   * default session, rotated (closed with a claim) after max calls or max age.
   * @throws CmcpError UNKNOWN_SESSION | SESSION_CLOSED.
   */
  async resolve(agentId: string, sessionId: string | undefined): Promise<SessionRow> {
    if (sessionId !== undefined) {
      const row = this.get(agentId, sessionId);
      // Another instance's session is not usable here: its binding is that instance's key.
      if (!row || row.owner !== this.instanceId) throw new CmcpError('UNKNOWN_SESSION', 'unknown session');
      if (row.status !== 'open' || this.closing.has(sessionId))
        throw new CmcpError('SESSION_CLOSED', 'session is closed', { session_id: sessionId });
      return row;
    }
    const prev = this.defaultLocks.get(agentId) ?? Promise.resolve();
    const next = prev.then(() => this.resolveDefault(agentId));
    this.defaultLocks.set(
      agentId,
      next.catch(() => undefined),
    );
    return next;
  }

  /** The agent's newest open default session of this instance, if any (see {@link defaultIds}). */
  private openDefault(agentId: string): SessionRow | undefined {
    const id = this.defaultIds.get(agentId);
    const known = id === undefined ? undefined : this.get(agentId, id);
    if (known && known.status === 'open' && known.is_default === 1 && known.owner === this.instanceId)
      return known;
    const row = prepared<[string, string], SessionRow>(
      this.db,
      "SELECT * FROM sessions WHERE agent_id = ? AND owner = ? AND is_default = 1 AND status = 'open' ORDER BY created_ms DESC LIMIT 1",
    ).get(agentId, this.instanceId);
    // Bounded: agents named by tokens are not a configured set.
    if (this.defaultIds.size >= MAX_REMEMBERED_DEFAULTS) this.defaultIds.clear();
    if (row) this.defaultIds.set(agentId, row.session_id);
    else this.defaultIds.delete(agentId);
    return row;
  }

  private async resolveDefault(agentId: string): Promise<SessionRow> {
    const row = this.openDefault(agentId);
    if (row && !this.closing.has(row.session_id)) {
      const expired =
        row.call_count >= this.limits.defaultMaxCalls ||
        Date.now() - row.created_ms >= this.limits.defaultMaxAgeS * 1000;
      if (!expired) return row;
      await this.closeAwaited(agentId, row.session_id, 'rotated');
    }
    const created = await this.create(agentId, { isDefault: true });
    this.defaultIds.set(agentId, created.session_id);
    return this.get(agentId, created.session_id) as SessionRow;
  }

  /**
   * Closes a session: appends `session_close`, then builds and stores the signed claim in
   * the same transaction, reading the whole chain at once and waiting for a lock held by
   * another process blocking. Closing a closed session returns its stored claim. The gateway
   * closes through {@link closeAwaited}.
   * @throws CmcpError UNKNOWN_SESSION.
   */
  close(agentId: string, sessionId: string, reason = 'requested'): Claim {
    return immediate(this.db, () => this.closeIn(agentId, sessionId, reason, null));
  }

  /**
   * {@link close} without holding the event loop, for requests
   * (`POST /sessions/{id}/close`), rotation, blocks, reloads and shutdown: the chain is read
   * for the claim in pages with the loop free between them (session/paged.ts) while the session
   * is unusable (SESSION_CLOSED), then one IMMEDIATE transaction — a lock held by another
   * process waited for by awaiting (store/db.ts immediateAsync) — catches up on what was
   * appended meanwhile, appends `session_close` and stores the claim.
   * @param slice the event-loop budget shared by a batch of closes.
   * @throws CmcpError UNKNOWN_SESSION; SQLITE_BUSY once the busy timeout has passed.
   */
  async closeAwaited(
    agentId: string,
    sessionId: string,
    reason = 'requested',
    slice = new LoopSlice(),
  ): Promise<Claim> {
    const row = this.get(agentId, sessionId);
    if (!row) throw new CmcpError('UNKNOWN_SESSION', 'unknown session');
    if (row.status === 'closed') return storedClaim(this.db, sessionId) as Claim;
    if (row.owner !== this.instanceId) throw new CmcpError('UNKNOWN_SESSION', 'unknown session');
    const marked = !this.closing.has(sessionId);
    if (marked) this.closing.add(sessionId);
    try {
      const summary = await summarizePaged(this.chain, sessionId, slice);
      return await closeOffLoop(this.closeDeps(agentId, sessionId, reason), summary);
    } finally {
      if (marked) this.closing.delete(sessionId);
    }
  }

  /**
   * {@link closeAwaited} answering the claim's canonical text (ports.ts AgentSessions.closeText):
   * the text just issued, or a closed session's stored text part by part, unparsed.
   * @throws CmcpError UNKNOWN_SESSION; SQLITE_BUSY once the busy timeout has passed.
   */
  async closeText(agentId: string, sessionId: string): Promise<Buffer | ClaimTextPieces> {
    const row = this.get(agentId, sessionId);
    if (!row) throw new CmcpError('UNKNOWN_SESSION', 'unknown session');
    if (row.status !== 'closed') {
      const issued = issuedText(await this.closeAwaited(agentId, sessionId));
      if (issued) return issued;
    }
    return this.claimText(agentId, sessionId);
  }

  /** What session/close.ts needs to close one session. */
  private closeDeps(agentId: string, sessionId: string, reason: string): CloseDeps {
    return {
      db: this.db,
      chain: this.chain,
      sessionId,
      agentId,
      reason,
      owner: this.instanceId,
      row: () => this.get(agentId, sessionId),
      closedClaim: (row) => this.closedClaim(row, sessionId),
      inputs: (row) => this.claimInputs(agentId, sessionId, row),
      closeInTransaction: (summary) => this.closeIn(agentId, sessionId, reason, summary),
    };
  }

  /** The stored claim of a closed session, null for an open one this instance may close. @throws CmcpError UNKNOWN_SESSION. */
  private closedClaim(row: SessionRow | undefined, sessionId: string): Claim | null {
    if (!row) throw new CmcpError('UNKNOWN_SESSION', 'unknown session');
    if (row.status === 'closed') return storedClaim(this.db, sessionId) as Claim;
    // Only the instance that opened a session can close it: the claim is signed with its key.
    if (row.owner !== this.instanceId) throw new CmcpError('UNKNOWN_SESSION', 'unknown session');
    return null;
  }

  private claimInputs(agentId: string, sessionId: string, row: SessionRow) {
    return claimInputsFor(row, sessionId, agentId, this.key, this.facts, this.provider.name);
  }

  /** The closing transaction's work; `summary` (read so far) is caught up, or null: read it all. */
  private closeIn(agentId: string, sessionId: string, reason: string, summary: ChainSummary | null): Claim {
    const row = this.get(agentId, sessionId);
    const closed = this.closedClaim(row, sessionId);
    if (closed || !row) return closed as Claim;
    this.chain.append(sessionId, {
      entry_type: 'session_close',
      session_id: sessionId,
      agent_id: agentId,
      detail: { reason, calls: row.call_count },
    });
    this.db
      .prepare("UPDATE sessions SET status = 'closed', closed_at = ? WHERE session_id = ?")
      .run(new Date().toISOString(), sessionId);
    const inputs = this.claimInputs(agentId, sessionId, row);
    if (!summary) return issueClaim(this.db, this.chain, inputs);
    catchUp(this.chain, sessionId, summary);
    return issueClaimFrom(this.db, summary, inputs);
  }

  /**
   * Closes every open session (of one agent, or of all agents) with a claim each — the kill
   * switch, a policy reload (so no session's claim spans two policies), shutdown — without
   * holding the event loop: the sessions are made unusable at once
   * (SESSION_CLOSED; the default session is replaced), then closed through
   * {@link closeAwaited}, yielding whenever ~0.5 ms of work has run (session/paged.ts SLICE_MS).
   * @returns the closed sessions with the sequence of each claim.
   */
  closeOpenInBatches(
    agentId: string | null,
    reason: string,
  ): Promise<{ session_id: string; agent_id: string; claim_sequence: number }[]> {
    const rows =
      agentId === null
        ? this.db
            .prepare<[string], { session_id: string; agent_id: string }>(
              "SELECT session_id, agent_id FROM sessions WHERE status = 'open' AND owner = ? ORDER BY created_ms",
            )
            .all(this.instanceId)
        : this.db
            .prepare<[string, string], { session_id: string; agent_id: string }>(
              "SELECT session_id, agent_id FROM sessions WHERE status = 'open' AND owner = ? AND agent_id = ? ORDER BY created_ms",
            )
            .all(this.instanceId, agentId);
    return this.closeInBatches(rows, reason);
  }

  /**
   * Marks `rows` unusable now, then closes them, yielding after each ~0.5 ms of work; a close
   * that fails {@link BATCH_CLOSE_TRIES} times is logged and its session left unusable.
   */
  private async closeInBatches(
    rows: { session_id: string; agent_id: string }[],
    reason: string,
  ): Promise<{ session_id: string; agent_id: string; claim_sequence: number }[]> {
    for (const r of rows) this.closing.add(r.session_id);
    const out: { session_id: string; agent_id: string; claim_sequence: number }[] = [];
    const slice = new LoopSlice();
    for (const r of rows) {
      await slice.pause();
      for (let attempt = 1; ; attempt++) {
        try {
          const c = await this.closeAwaited(r.agent_id, r.session_id, reason, slice);
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

  /** The stored claim of a closed session. @throws CmcpError UNKNOWN_SESSION | SESSION_OPEN. */
  claim(agentId: string, sessionId: string): Claim {
    const row = this.get(agentId, sessionId);
    if (!row) throw new CmcpError('UNKNOWN_SESSION', 'unknown session');
    const c = storedClaim(this.db, sessionId);
    if (!c) throw new CmcpError('SESSION_OPEN', 'the session is still open; close it to get its claim');
    return c;
  }

  /**
   * The stored canonical text (UTF-8 JCS) of a closed session's claim, exactly as signed and
   * hashed: what `GET /sessions/{id}/claim` sends without parsing it, a long one part by part
   * (claim/parts.ts).
   * @throws CmcpError UNKNOWN_SESSION | SESSION_OPEN.
   */
  claimText(agentId: string, sessionId: string): ClaimTextPieces {
    if (!this.get(agentId, sessionId)) throw new CmcpError('UNKNOWN_SESSION', 'unknown session');
    const text = storedClaimPieces(this.db, sessionId);
    if (!text) throw new CmcpError('SESSION_OPEN', 'the session is still open; close it to get its claim');
    return text;
  }

  /**
   * The session's audit bundle (stored canonical entries) as JSON text, read and sent in pages
   * (AuditChain.bundleJson). @throws CmcpError UNKNOWN_SESSION.
   */
  bundle(agentId: string, sessionId: string): Readable {
    if (!this.get(agentId, sessionId)) throw new CmcpError('UNKNOWN_SESSION', 'unknown session');
    return Readable.from(this.chain.bundleJson(sessionId, sessionId));
  }

  /**
   * Start-up: closes, with claims, every session still open under another gateway key (an
   * earlier process). Such a session can never again be claimed as hardware-bound by this
   * key, so it is ended honestly (its claim reports the binding absent, GATEWAY_KEY_ROTATED)
   * instead of silently continuing as signed-only; agents open or get a fresh one. They are
   * unusable at once and closed in batches, so the listener can open meanwhile.
   * @returns the number of sessions closed.
   */
  closeStale(): Promise<number> {
    const thumb = b64u(this.key.thumbprint);
    const rows = this.db
      .prepare<[string, string], { session_id: string; agent_id: string }>(
        "SELECT session_id, agent_id FROM sessions WHERE status = 'open' AND owner = ? AND key_thumbprint != ?",
      )
      .all(this.instanceId, thumb);
    // In batches (closeInBatches): made unusable now, closed without holding the event loop.
    return this.closeInBatches(rows, 'gateway_restarted').then(() => rows.length);
  }

  /** How many sessions of `agentId` this instance holds open (limits.agent_max_open_sessions). */
  openCount(agentId: string): number {
    return (
      this.db
        .prepare<[string, string], { n: number }>(
          "SELECT COUNT(*) AS n FROM sessions WHERE agent_id = ? AND status = 'open' AND owner = ?",
        )
        .get(agentId, this.instanceId)?.n ?? 0
    );
  }

  /** True when the session exists and is open (read inside the caller's transaction). */
  isOpen(sessionId: string): boolean {
    const row = prepared<[string], { status: string }>(
      this.db,
      'SELECT status FROM sessions WHERE session_id = ?',
    ).get(sessionId);
    return row?.status === 'open';
  }

  /** Counts one call against the session (inside the caller's transaction). */
  countCall(sessionId: string): void {
    prepared(this.db, 'UPDATE sessions SET call_count = call_count + 1 WHERE session_id = ?').run(sessionId);
  }
}

/**
 * The newest sessions of every agent, newest first (the operator console's list). Reads only.
 * @param limit at most this many rows.
 */
export function listSessions(db: Db, limit: number): SessionRow[] {
  return db
    .prepare<[number], SessionRow>('SELECT * FROM sessions ORDER BY created_ms DESC LIMIT ?')
    .all(limit);
}

/** One session row whatever its agent (operator reads), or undefined. */
export function readSession(db: Db, sessionId: string): SessionRow | undefined {
  return db.prepare<[string], SessionRow>('SELECT * FROM sessions WHERE session_id = ?').get(sessionId);
}
