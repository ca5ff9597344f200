/**
 * The session commands and the gateway chain's records on PostgreSQL (docs/replicas.md, the
 * storage contract's `openSession`, `closeSession`, `appendEntries`), each one fenced
 * transaction (./transaction.ts) of the replica's lease, with the reads a replica serves a
 * session from. Any replica serves any session: the session row is not owned, and a session
 * opened through one replica is closed (its claim signed) through another.
 *
 * The close builds its claim inside the transaction, holding the session row (FOR NO KEY
 * UPDATE, the lock order of every session write), the chain's tip and the claim chain's lock:
 * no call's terminal and no other replica's claim can move underneath it, so it never builds
 * twice (the SQLite close builds outside and checks, store/sqlite/session-store.ts — one process, one writer).
 * Only the chain's summary is read before it, in pages: the chain is append-only, so what was
 * read is a prefix of what the transaction sees, and the rest is read inside it.
 */
import type { AuditEntry, Claim } from '@cmcp/verify/formats';
import type pg from 'pg';
import type { MicroClock } from '../entries/clock.js';
import type { EntryInput } from '../entries/next-entry.js';
import type {
  ClaimIssuer,
  ClaimTip,
  ClosedSession,
  OpenSession,
  SessionRef,
  SessionRow,
  SessionStore,
} from '../port.js';
import { appendEntry, chainBundleJson, claimPage } from './chain.js';
import { copyTextOut, VERBATIM_CSV } from './copy-text.js';
import type { Fence } from './leases.js';
import { openDefaultSession, openSessionCount } from './reads.js';
import { replicaMembers } from './replica-evidence.js';
import { fencedTransaction } from './transaction.js';

/**
 * The transaction-scoped advisory lock that serialises the claim chain (claim_sequence,
 * prev_claim_hash) across replicas (PostgreSQL 15 docs §9.27.10). Any fixed 64-bit key: this
 * one is the first eight bytes of SHA-256("cmcp.claim-chain"), read as a signed integer.
 */
const CLAIM_CHAIN_LOCK = '-1992177045506200045';

type RowText = Omit<SessionRow, 'is_default' | 'created_ms' | 'call_count' | 'sensitivity_level'> & {
  is_default: string;
  created_ms: string;
  call_count: string;
  sensitivity_level?: string;
};

function sessionRow(r: RowText): SessionRow {
  const { sensitivity_level, ...rest } = r;
  return {
    ...rest,
    is_default: Number(r.is_default),
    created_ms: Number(r.created_ms),
    call_count: Number(r.call_count),
    ...(sensitivity_level === undefined ? {} : { sensitivity_level: Number(sensitivity_level) }),
  };
}

/** One replica's session writes and reads on the shared PostgreSQL. */
export class PostgresSessionStore implements SessionStore {
  /** Any replica serves any session: a session opened through one is closed through another. */
  readonly sharedSessions = true;

  constructor(
    private readonly pool: pg.Pool,
    /** The replica's lease: checked first in every write transaction. */
    readonly fence: Fence,
    private readonly clock?: MicroClock,
  ) {}

  /** The agent's newest open default session, whichever replica opened it. Reads only. */
  openDefaultSession(agentId: string): Promise<string | undefined> {
    return openDefaultSession(this.pool, agentId);
  }

  /** Sessions of `agentId` open now, on every replica. Reads only. */
  openSessionCount(agentId: string): Promise<number> {
    return openSessionCount(this.pool, agentId);
  }

  /** Open sessions (of `agentId`, or of every agent), oldest first, whichever replica opened them. */
  async openSessions(agentId: string | null): Promise<SessionRef[]> {
    const r =
      agentId === null
        ? await this.pool.query<SessionRef>(
            "SELECT session_id, agent_id FROM sessions WHERE status = 'open' ORDER BY created_ms",
          )
        : await this.pool.query<SessionRef>(
            "SELECT session_id, agent_id FROM sessions WHERE status = 'open' AND agent_id = $1 ORDER BY created_ms",
            [agentId],
          );
    return r.rows;
  }

  /** None: any replica serves (and signs the claim of) any session, whoever opened it. */
  async staleSessions(_keyThumbprint: string): Promise<SessionRef[]> {
    return [];
  }

  /** The chain's audit bundle as JSON text, read and sent in pages (./chain.ts chainBundleJson). */
  bundleJson(chainId: string, sessionId: string | null): AsyncIterable<string | Buffer> {
    return chainBundleJson(this.pool, chainId, sessionId);
  }

  /**
   * Writes the session's genesis (`session_open`) entry and its row (status open), together.
   * @returns (resolves) the genesis entry (its hash is the chain root).
   * @throws (rejects) LeaseLostError (LEASE_LOST); pg errors (a session_id taken: 23505) —
   *   nothing written in either case.
   */
  /**
   * claim_sequence of the newest claim, or null before the first: read when a session opens,
   * before its binding is quoted (the preimage's `opened_after_claim`, docs/spec/binding.md).
   */
  async newestClaimSequence(): Promise<number | null> {
    return (await claimChainTip(this.pool))?.claim_sequence ?? null;
  }

  openSession(o: OpenSession): Promise<AuditEntry> {
    return fencedTransaction(this.pool, this.fence, async (client) => {
      const e = await appendEntry(
        client,
        o.sessionId,
        {
          entry_type: 'session_open',
          session_id: o.sessionId,
          agent_id: o.agentId,
          detail: { default_session: o.isDefault, provider: o.provider },
        },
        this.clock,
        this.fence.writer,
      );
      const now = new Date();
      await client.query(
        `INSERT INTO sessions (session_id, agent_id, is_default, status, created_at, created_ms, chain_root,
           key_thumbprint, call_count, binding_json, owner) VALUES ($1,$2,$3,'open',$4,$5,$6,$7,0,'{}',$8)`,
        [
          o.sessionId,
          o.agentId,
          o.isDefault ? 1 : 0,
          now.toISOString(),
          now.getTime(),
          e.entry_hash,
          o.keyThumbprint,
          this.fence.replicaId,
        ],
      );
      return e;
    });
  }

  /**
   * The binding's outcome: its entry (`attestation_bound` / `attestation_binding_failed`) in the
   * session chain and the record on the row, together.
   * @throws (rejects) LeaseLostError; Error when the session is unknown or closed; pg errors.
   */
  recordBinding(sessionId: string, entry: EntryInput, record: object): Promise<AuditEntry> {
    return fencedTransaction(this.pool, this.fence, async (client) => {
      const status = await lockSession(client, sessionId);
      if (status !== 'open') throw new Error(`session ${sessionId} is not open`);
      const e = await appendEntry(client, sessionId, entry, this.clock, this.fence.writer);
      await client.query('UPDATE sessions SET binding_json = $1 WHERE session_id = $2', [
        JSON.stringify(record),
        sessionId,
      ]);
      return e;
    });
  }

  /**
   * Entries appended to one chain in one transaction, in order (the gateway chain's start-up,
   * refusal-window and operator records).
   * @throws (rejects) LeaseLostError; pg errors — nothing written.
   */
  appendEntries(chainId: string, entries: readonly EntryInput[]): Promise<AuditEntry[]> {
    return fencedTransaction(this.pool, this.fence, async (client) => {
      const out: AuditEntry[] = [];
      for (const e of entries) out.push(await appendEntry(client, chainId, e, this.clock, this.fence.writer));
      return out;
    });
  }

  /**
   * Closes the session: the `session_close` entry, the status change and the signed claim
   * (docs/spec/claims.md#issuing-a-claim) commit together; a session already closed answers
   * its stored claim. What grows with the chain stays off a single turn of the event loop:
   * the chain is summarised in pages before the transaction (each page a
   * short query, the loop free between them) and caught up inside it after `session_close`
   * (which locks the chain's tip: nothing is appended after it); the claim (a few KB) is signed
   * and inserted in the transaction.
   * @param issuer builds and signs the claim from the pages it is fed (claim/issuer.ts).
   * @throws (rejects) LeaseLostError; Error when the session is unknown; what the issuer
   *   throws; pg errors — nothing written.
   */
  async closeSession(sessionId: string, reason: string, issuer: ClaimIssuer): Promise<ClosedSession> {
    await summarizePages(this.pool, sessionId, issuer);
    return fencedTransaction(this.pool, this.fence, async (client) => {
      const r = await client.query<RowText>(
        'SELECT * FROM sessions WHERE session_id = $1 FOR NO KEY UPDATE',
        [sessionId],
      );
      const raw = r.rows[0];
      if (!raw) throw new Error(`session ${sessionId} is unknown`);
      const row = sessionRow(raw);
      if (row.status === 'closed') {
        const stored = await storedClaim(client, sessionId);
        if (!stored) throw new Error(`session ${sessionId} is closed without a claim`);
        return { ...stored, issued: false };
      }
      await appendEntry(
        client,
        sessionId,
        {
          entry_type: 'session_close',
          session_id: sessionId,
          agent_id: row.agent_id,
          detail: { reason, calls: row.call_count },
        },
        this.clock,
        this.fence.writer,
      );
      await summarizePages(client, sessionId, issuer);
      await client.query('SELECT pg_advisory_xact_lock($1::bigint)', [CLAIM_CHAIN_LOCK]);
      const prev = await claimChainTip(client);
      const signed = await issuer.issue(row, prev, (writers) => replicaMembers(client, writers));
      await client.query(
        'INSERT INTO claims (claim_sequence, session_id, claim_hash, canonical) VALUES ($1, $2, $3, $4)',
        [signed.claim.claim_sequence, sessionId, signed.claimHash, signed.canonical.toString('utf8')],
      );
      await client.query("UPDATE sessions SET status = 'closed', closed_at = $1 WHERE session_id = $2", [
        new Date().toISOString(),
        sessionId,
      ]);
      return { claim: signed.claim, canonical: signed.canonical, issued: true };
    });
  }

  /**
   * A session row as committed, with its `session_sensitivity` level (0 without a row: the
   * call path's Cedar context, call/sensitivity.ts), or undefined. Reads only.
   */
  async session(sessionId: string): Promise<SessionRow | undefined> {
    const r = await this.pool.query<RowText>(
      `SELECT s.*, COALESCE(ss.level, 0) AS sensitivity_level
         FROM sessions s LEFT JOIN session_sensitivity ss ON ss.session_id = s.session_id
        WHERE s.session_id = $1`,
      [sessionId],
    );
    return r.rows[0] ? sessionRow(r.rows[0]) : undefined;
  }

  /** A closed session's stored claim with its canonical text, or undefined. Reads only. */
  async claim(sessionId: string): Promise<{ claim: Claim; canonical: Buffer } | undefined> {
    return storedClaim(this.pool, sessionId);
  }

  /**
   * A closed session's stored claim text (UTF-8 JCS) as stored, not parsed and not decoded: read
   * as COPY's bytes (copy-text.ts), since a version-1 claim of a long session stored by an
   * earlier gateway is ~1.5 MB (as a string and back, 4–6 ms of the loop), or undefined.
   * Reads only.
   * @throws (rejects) Error COPY_TEXT_QUOTED (a raw control byte in the stored text); pg errors.
   */
  async claimCanonical(sessionId: string): Promise<Buffer | undefined> {
    const chunks = await copyTextOut(
      this.pool,
      (cl) =>
        `COPY (SELECT canonical FROM claims WHERE session_id = ${cl.escapeLiteral(sessionId)}) TO STDOUT WITH ${VERBATIM_CSV}`,
      `the claim text of session ${sessionId}`,
    );
    const last = chunks.at(-1);
    if (!last) return undefined;
    // One row: the text and its newline, which ends the last piece.
    if (last[last.length - 1] !== 0x0a)
      throw new Error(`the claim text of session ${sessionId} came back from COPY without its row's end`);
    chunks[chunks.length - 1] = last.subarray(0, last.length - 1);
    return Buffer.concat(chunks);
  }
}

async function lockSession(client: pg.ClientBase, sessionId: string): Promise<string | undefined> {
  const r = await client.query<{ status: string }>(
    'SELECT status FROM sessions WHERE session_id = $1 FOR NO KEY UPDATE',
    [sessionId],
  );
  return r.rows[0]?.status;
}

async function claimChainTip(client: pg.Pool | pg.ClientBase): Promise<ClaimTip | undefined> {
  // Ordered by the BIGINT column: an output column of the same name (the ::text cast) would
  // be what ORDER BY sorts, as text ('9' after '10').
  const r = await client.query<{ seq: string; claim_hash: string }>(
    'SELECT claim_sequence::text AS seq, claim_hash FROM claims ORDER BY claim_sequence DESC LIMIT 1',
  );
  const row = r.rows[0];
  return row ? { claim_sequence: Number(row.seq), claim_hash: row.claim_hash } : undefined;
}

async function storedClaim(
  db: pg.Pool | pg.ClientBase,
  sessionId: string,
): Promise<{ claim: Claim; canonical: Buffer } | undefined> {
  const r = await db.query<{ canonical: string }>('SELECT canonical FROM claims WHERE session_id = $1', [
    sessionId,
  ]);
  const text = r.rows[0]?.canonical;
  return text === undefined
    ? undefined
    : { claim: JSON.parse(text) as Claim, canonical: Buffer.from(text, 'utf8') };
}

/** Entries read per page of a close's summary (as on SQLite, store/sqlite/paged.ts). */
const SUMMARY_PAGE = 25;

/**
 * Feeds the issuer the chain's entries after its last one, a page of {@link SUMMARY_PAGE} per
 * query, each with its writer (key thumbprint of its `replica`).
 */
async function summarizePages(
  db: pg.Pool | pg.ClientBase,
  chainId: string,
  issuer: ClaimIssuer,
): Promise<void> {
  for (;;) {
    const page = await claimPage(db, chainId, issuer.lastSequence, SUMMARY_PAGE);
    issuer.add(page);
    if (page.length < SUMMARY_PAGE) return;
  }
}
