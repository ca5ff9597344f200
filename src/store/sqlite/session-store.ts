/**
 * The sessions' side of the storage port on SQLite (store/port.ts SessionStore): one gateway
 * instance's sessions, served and closed only by the instance that opened them. Reads answer at
 * once (a better-sqlite3 read is a function call).
 *
 * A close does its claim's heavy work before the closing transaction. The claim depends on three
 * things only that transaction can be sure of: the session chain's tip (which `session_close`
 * follows), the claim chain's tip (claim_sequence, prev_claim_hash) and the session row. They
 * are read first and everything is built after them — the `session_close` entry with its hash,
 * the claim and its signature (claim/issuer.ts) — and the one IMMEDIATE transaction then checks
 * that none of the three moved and writes `session_close`, the session's status and the claim
 * together (docs/spec/claims.md#issuing-a-claim). If one moved (an entry appended by a call
 * still in flight, a claim issued by another process), nothing is written and the claim is
 * built again; closes on one connection take turns, so they never make each other
 * build again. After {@link TRIES} such tries the close is one transaction signing on the loop.
 */
import { setTimeout } from 'node:timers/promises';
import type { AuditEntry, Claim } from '@cmcp/verify/formats';
import { LoopSlice } from '../../offload/loop-slice.js';
import type { EntryInput } from '../entries/next-entry.js';
import type {
  ClaimIssuer,
  ClosedSession,
  OpenSession,
  SessionRef,
  SessionRow,
  SessionStore,
} from '../port.js';
import type { AuditChain } from './chain.js';
import { claimTip, insertClaim, storedClaimText } from './claims.js';
import { type Db, immediate, immediateAsync } from './db.js';
import { catchUp, summarizePaged } from './paged.js';
import { prepared } from './statements.js';

/** Tries with the work before the transaction before the close signs inside it. */
const TRIES = 3;

const noMembers = async () => [];

/** One close at a time per connection: each builds after the claim the one before it stored. */
const turns = new WeakMap<Db, Promise<unknown>>();

function inTurn<T>(db: Db, fn: () => Promise<T>): Promise<T> {
  const run = (turns.get(db) ?? Promise.resolve()).then(fn, fn);
  turns.set(
    db,
    run.catch(() => undefined),
  );
  return run;
}

/** One instance's sessions in its SQLite database. */
export class SqliteSessionStore implements SessionStore {
  readonly fence: { replicaId: string };
  /** A session is served only by the instance that opened it: its binding is that instance's key. */
  readonly sharedSessions = false;

  constructor(
    private readonly db: Db,
    private readonly chain: AuditChain,
    /** This gateway's instance_id (the sessions' owner). */
    private readonly instanceId: string,
  ) {
    this.fence = { replicaId: instanceId };
  }

  newestClaimSequence(): number | null {
    return claimTip(this.db)?.claim_sequence ?? null;
  }

  /** @throws (rejects) SQLITE_BUSY once the busy timeout has passed; nothing written. */
  openSession(o: OpenSession): Promise<AuditEntry> {
    return immediateAsync(this.db, () => {
      const e = this.chain.append(o.sessionId, {
        entry_type: 'session_open',
        session_id: o.sessionId,
        agent_id: o.agentId,
        detail: { default_session: o.isDefault, provider: o.provider },
      });
      const now = new Date();
      this.db
        .prepare(
          `INSERT INTO sessions (session_id, agent_id, is_default, status, created_at, created_ms, chain_root,
             key_thumbprint, call_count, binding_json, owner) VALUES (?,?,?,?,?,?,?,?,0,'{}',?)`,
        )
        .run(
          o.sessionId,
          o.agentId,
          o.isDefault ? 1 : 0,
          'open',
          now.toISOString(),
          now.getTime(),
          e.entry_hash,
          o.keyThumbprint,
          this.instanceId,
        );
      return e;
    });
  }

  recordBinding(sessionId: string, entry: EntryInput, record: object): Promise<AuditEntry> {
    return immediateAsync(this.db, () => {
      const e = this.chain.append(sessionId, entry);
      this.db
        .prepare('UPDATE sessions SET binding_json = ? WHERE session_id = ?')
        .run(JSON.stringify(record), sessionId);
      return e;
    });
  }

  appendEntries(chainId: string, entries: readonly EntryInput[]): Promise<AuditEntry[]> {
    return immediateAsync(this.db, () => entries.map((e) => this.chain.append(chainId, e)));
  }

  /**
   * Closes the session (module doc), its chain read in pages with the loop free between them.
   * @throws (rejects) Error when the session is unknown; what the issuer throws; SQLITE_BUSY
   *   once the busy timeout has passed.
   */
  async closeSession(sessionId: string, reason: string, issuer: ClaimIssuer): Promise<ClosedSession> {
    await summarizePaged(this.chain, sessionId, new LoopSlice(), issuer);
    for (let i = 0; i < TRIES; i++) {
      const closed = await inTurn(this.db, () => this.tryClose(sessionId, reason, issuer));
      if (closed) return closed;
    }
    return immediateAsync(this.db, () => this.closeInTransaction(sessionId, reason, issuer));
  }

  /**
   * The close in one IMMEDIATE transaction, the chain read (what `issuer` lacks of it) and the
   * claim signed on the event loop: holds the loop for as long as the chain is long. What
   * {@link closeSession} falls back to when it kept being overtaken.
   * @throws Error when the session is unknown; what the issuer throws; SQLITE_BUSY once the
   *   busy timeout has passed (the lock waited for blocking).
   */
  closeNow(sessionId: string, reason: string, issuer: ClaimIssuer): ClosedSession {
    return immediate(this.db, () => this.closeInTransaction(sessionId, reason, issuer));
  }

  private closeInTransaction(sessionId: string, reason: string, issuer: ClaimIssuer): ClosedSession {
    const row = this.session(sessionId);
    const stored = this.closedAnswer(row, sessionId);
    if (stored || !row) return stored as ClosedSession;
    this.chain.append(row.session_id, closeEntry(row, reason));
    catchUp(this.chain, sessionId, issuer);
    const signed = issuer.issueNow(row, claimTip(this.db));
    this.markClosed(sessionId);
    insertClaim(this.db, sessionId, signed);
    return { claim: signed.claim, canonical: signed.canonical, issued: true };
  }

  /** One try: the close, or null when the chain, the claim chain or the row moved meanwhile. */
  private async tryClose(
    sessionId: string,
    reason: string,
    issuer: ClaimIssuer,
  ): Promise<ClosedSession | null> {
    await setTimeout(0); // not in the turn of the loop that read the last page
    const row = this.session(sessionId);
    const stored = this.closedAnswer(row, sessionId);
    if (stored || !row) return stored;
    catchUp(this.chain, sessionId, issuer);
    const prev = claimTip(this.db);
    const close = this.chain.prepareNext(sessionId, closeEntry(row, reason), issuer.tip());
    const signed = await issuer.issue(row, prev, noMembers, { ...close.body, entry_hash: close.entry_hash });
    return immediateAsync(this.db, () => {
      const now = this.session(sessionId);
      const storedNow = this.closedAnswer(now, sessionId);
      if (storedNow || !now) return storedNow;
      if (now.call_count !== row.call_count || now.binding_json !== row.binding_json) return null;
      if (claimTip(this.db)?.claim_hash !== prev?.claim_hash) return null;
      if (!this.chain.appendPrepared(close)) return null;
      this.markClosed(sessionId);
      insertClaim(this.db, sessionId, signed);
      return { claim: signed.claim, canonical: signed.canonical, issued: true };
    });
  }

  /**
   * A closed session's stored claim, null for an open one.
   * @throws Error when the session is unknown.
   */
  private closedAnswer(row: SessionRow | undefined, sessionId: string): ClosedSession | null {
    if (!row) throw new Error(`session ${sessionId} is unknown`);
    if (row.status !== 'closed') return null;
    const stored = this.claim(sessionId);
    if (!stored) throw new Error(`session ${sessionId} is closed without a claim`);
    return { ...stored, issued: false };
  }

  private markClosed(sessionId: string): void {
    this.db
      .prepare("UPDATE sessions SET status = 'closed', closed_at = ? WHERE session_id = ?")
      .run(new Date().toISOString(), sessionId);
  }

  session(sessionId: string): SessionRow | undefined {
    return prepared<[string], SessionRow>(this.db, 'SELECT * FROM sessions WHERE session_id = ?').get(
      sessionId,
    );
  }

  claim(sessionId: string): { claim: Claim; canonical: Buffer } | undefined {
    const canonical = storedClaimText(this.db, sessionId);
    return canonical && { claim: JSON.parse(canonical.toString('utf8')) as Claim, canonical };
  }

  /** The stored claim text, an earlier gateway's parts joined (./claims.ts). */
  claimCanonical(sessionId: string): Buffer | undefined {
    return storedClaimText(this.db, sessionId);
  }

  openDefaultSession(agentId: string): string | undefined {
    return prepared<[string, string], { session_id: string }>(
      this.db,
      "SELECT session_id FROM sessions WHERE agent_id = ? AND owner = ? AND is_default = 1 AND status = 'open' ORDER BY created_ms DESC LIMIT 1",
    ).get(agentId, this.instanceId)?.session_id;
  }

  openSessionCount(agentId: string): number {
    return (
      prepared<[string, string], { n: number }>(
        this.db,
        "SELECT COUNT(*) AS n FROM sessions WHERE agent_id = ? AND status = 'open' AND owner = ?",
      ).get(agentId, this.instanceId)?.n ?? 0
    );
  }

  openSessions(agentId: string | null): SessionRef[] {
    return agentId === null
      ? prepared<[string], SessionRef>(
          this.db,
          "SELECT session_id, agent_id FROM sessions WHERE status = 'open' AND owner = ? ORDER BY created_ms",
        ).all(this.instanceId)
      : prepared<[string, string], SessionRef>(
          this.db,
          "SELECT session_id, agent_id FROM sessions WHERE status = 'open' AND owner = ? AND agent_id = ? ORDER BY created_ms",
        ).all(this.instanceId, agentId);
  }

  staleSessions(keyThumbprint: string): SessionRef[] {
    return prepared<[string, string], SessionRef>(
      this.db,
      "SELECT session_id, agent_id FROM sessions WHERE status = 'open' AND owner = ? AND key_thumbprint != ?",
    ).all(this.instanceId, keyThumbprint);
  }

  bundleJson(chainId: string, sessionId: string | null): AsyncIterable<string> {
    return this.chain.bundleJson(chainId, sessionId);
  }

  /** True when the session exists and is open (read inside the caller's transaction: recovery). */
  isOpen(sessionId: string): boolean {
    return this.session(sessionId)?.status === 'open';
  }

  /** Counts one call against the session (inside the caller's transaction: recovery). */
  countCall(sessionId: string): void {
    prepared(this.db, 'UPDATE sessions SET call_count = call_count + 1 WHERE session_id = ?').run(sessionId);
  }
}

function closeEntry(row: SessionRow, reason: string): EntryInput {
  return {
    entry_type: 'session_close',
    session_id: row.session_id,
    agent_id: row.agent_id,
    detail: { reason, calls: row.call_count },
  };
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
