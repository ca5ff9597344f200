/**
 * The storage port: what the domain (call path, relay, sessions, claims, execution registry,
 * operator actions) asks of durable storage, in the domain's words, and the records it reads
 * back. Both engines implement it — SQLite (store/sqlite/) and PostgreSQL (store/postgres/) —
 * and nothing above this file knows which one runs. Engine-specific needs (a replica's lease
 * and fencing, SQLite's instance lock and store worker) stay in the adapter or appear here as
 * one narrow capability ({@link StorageCapabilities}).
 *
 * Every type here is plain JSON-cloneable data (the SQLite adapter may send it to its store
 * worker): no statement, no connection, no SQL.
 */

import type { AnyClaim, AuditEntry, ReplicaMember } from '@cmcp/verify/formats';
import { CmcpError, type ErrorCode } from '../errors/index.js';
import type { ClaimPageEntry } from './entries/entry-row.js';
import type { ChainTip, EntryInput } from './entries/next-entry.js';
import type { TreeStore } from './tree-port.js';

export type { ChainTip, EntryInput } from './entries/next-entry.js';
export type { CallEntry, StoredCheckpoint, TreeHead, TreeStore } from './tree-port.js';

/** A value now (SQLite on the event loop) or later (a worker, or PostgreSQL). */
export type Answer<T> = T | Promise<T>;

/** A session row. */
export interface SessionRow {
  session_id: string;
  agent_id: string;
  is_default: number;
  status: 'open' | 'closed';
  created_at: string;
  created_ms: number;
  closed_at: string | null;
  chain_root: string;
  key_thumbprint: string;
  call_count: number;
  binding_json: string;
  /** instance_id of the gateway that opened the session. */
  owner: string;
  /**
   * PostgreSQL: the session's `session_sensitivity` level (0 without a row), read with the row
   * (call/sensitivity.ts). Absent on SQLite, whose level call/sensitivity.ts reads itself.
   */
  sensitivity_level?: number;
}

/** The newest claim of the database (the next one's claim_sequence and prev_claim_hash follow it). */
export interface ClaimTip {
  claim_sequence: number;
  claim_hash: string;
}

/** An entry as a close's summary reads it: what the claim needs, and the entry's writer. */
export interface ChainPageEntry extends ClaimPageEntry {
  /** Key thumbprint of the entry's `replica` (its writer); null or absent when it names none. */
  writer?: string | null;
}

/** A signed claim with its canonical text (UTF-8 JCS) and its hash, as it is stored. */
export interface IssuedClaim {
  claim: AnyClaim;
  canonical: Buffer;
  claimHash: string;
}

/** The `session_close` entry a claim ends at when it is built before that entry is written. */
export type ClosingEntry = Pick<AuditEntry, 'entry_type' | 'entry_hash'>;

/**
 * How a close's claim is made, supplied by the domain (claim/issuer.ts): the adapter feeds it
 * the session chain's entries in sequence order, a page at a time, then asks it for the signed
 * claim — inside the transaction that closes the session (PostgreSQL), or before it with the
 * `session_close` entry it will write (SQLite, which then checks nothing moved). The adapter
 * stores the text it gets.
 */
export interface ClaimIssuer {
  /** sequence_number of the last entry added; -1 before any. */
  readonly lastSequence: number;
  /** The chain tip the entries added reach (what the next entry is built after), or undefined. */
  tip(): ChainTip | undefined;
  /** Adds the chain's next entries (after {@link lastSequence}). */
  add(page: readonly ChainPageEntry[]): void;
  /**
   * The claim for the session row, after `prev` in the claim chain, signed off the event loop.
   * @param members the replica members of the given writers (a claim written by several).
   * @param closing the `session_close` entry still to be written after the entries added.
   * @throws (rejects) when no claim that would verify can be made: nothing is stored.
   */
  issue(
    row: SessionRow,
    prev: ClaimTip | undefined,
    members: (writers: readonly string[]) => Promise<ReplicaMember[]>,
    closing?: ClosingEntry,
  ): Promise<IssuedClaim>;
  /**
   * {@link issue} signed on the event loop, for a close inside one synchronous transaction (a
   * close that kept being overtaken). @throws Error for a chain several writers wrote.
   */
  issueNow(row: SessionRow, prev: ClaimTip | undefined): IssuedClaim;
}

/** What opens a session (SessionService.create's row and genesis entry). */
export interface OpenSession {
  sessionId: string;
  agentId: string;
  isDefault: boolean;
  /** The attestation provider's name (the genesis entry's detail). */
  provider: string;
  /** base64url RFC 7638 thumbprint of the opening replica's gateway key. */
  keyThumbprint: string;
}

/** A close's outcome: the claim it issued, or the one another close had stored. */
export interface ClosedSession {
  claim: AnyClaim;
  /** The stored canonical text (UTF-8 JCS). */
  canonical: Buffer;
  /** False when the session was already closed and `claim` is the stored one. */
  issued: boolean;
}

/** A session named with its agent (the lists batch closes work through). */
export interface SessionRef {
  session_id: string;
  agent_id: string;
}

/**
 * The sessions' side of the port: a session's genesis, binding, close with its claim, and the
 * reads a session is served from. SQLite: store/sqlite/session-store.ts (its reads answer at
 * once); PostgreSQL: store/postgres/session-store.ts.
 */
export interface SessionStore {
  /** Who writes: the replica (SQLite: the instance) and, when its entries name one, its writer key. */
  readonly fence: { replicaId: string; writer?: { keyThumbprint: string } | undefined };
  /**
   * True when any writer serves any session (PostgreSQL replicas); false when a session is
   * served and closed only by the instance that opened it (SQLite: its binding is that
   * instance's key), and the lists below are that instance's sessions.
   */
  readonly sharedSessions: boolean;
  /** claim_sequence of the newest claim, or null before the first. */
  newestClaimSequence(): Answer<number | null>;
  /** The genesis entry and the open row, together. @returns the genesis entry. */
  openSession(o: OpenSession): Promise<AuditEntry>;
  /**
   * The binding's entry and its record on the row, together.
   * @throws (rejects) on PostgreSQL when the session is not open.
   */
  recordBinding(sessionId: string, entry: EntryInput, record: object): Promise<AuditEntry>;
  /** Entries appended to one chain in one transaction, in order. */
  appendEntries(chainId: string, entries: readonly EntryInput[]): Promise<AuditEntry[]>;
  /**
   * The close entry, the status and the claim `issuer` makes, together; a closed session
   * answers its stored claim. The chain is read for the claim in pages with the event loop
   * free between them.
   * @throws (rejects) Error when the session is unknown; what the issuer throws; the engine's
   *   errors (SQLITE_BUSY, LEASE_LOST) — nothing written.
   */
  closeSession(sessionId: string, reason: string, issuer: ClaimIssuer): Promise<ClosedSession>;
  /** A session row as committed (PostgreSQL: with its sensitivity level), or undefined. */
  session(sessionId: string): Answer<SessionRow | undefined>;
  /** A closed session's stored claim with its canonical text, or undefined. */
  claim(sessionId: string): Answer<{ claim: AnyClaim; canonical: Buffer } | undefined>;
  /** A closed session's stored claim text (UTF-8 JCS) as stored, not parsed, or undefined. */
  claimCanonical(sessionId: string): Answer<Buffer | undefined>;
  /** The newest open default session of `agentId`, or undefined. */
  openDefaultSession(agentId: string): Answer<string | undefined>;
  /** How many sessions of `agentId` are open. */
  openSessionCount(agentId: string): Answer<number>;
  /** Open sessions (of `agentId`, or of every agent), oldest first. */
  openSessions(agentId: string | null): Answer<SessionRef[]>;
  /**
   * Open sessions opened under another gateway key than `keyThumbprint` (base64url): an
   * earlier process's, which this key can never claim as bound. None where any writer serves
   * any session.
   */
  staleSessions(keyThumbprint: string): Answer<SessionRef[]>;
  /** The chain's audit bundle (docs/spec/audit-entries.md#bundles) as JSON text, read in pages. */
  bundleJson(chainId: string, sessionId: string | null): AsyncIterable<string | Buffer>;
}

export type BlockEntryType = 'agent_blocked' | 'agent_unblocked';

/** One block or unblock in the gateway chain. */
export interface BlockEvent {
  /** The entry's sequence_number in the gateway chain. */
  sequence: number;
  type: BlockEntryType;
  agentId: string;
}

/** One recorded reload: its gateway-chain sequence and its entry's detail. */
export interface RecordedReload {
  sequence: number;
  detail: { version?: number; bundle_files?: Record<string, string>; signature?: string } & Record<
    string,
    unknown
  >;
}

/** A gateway-chain entry an operator record appended: its hash and sequence_number. */
export interface RecordedEntry {
  entry_hash: string;
  sequence: number;
}

/**
 * The operators' side of the port (docs/spec/policy.md#operator-controls): agent blocks and
 * policy reloads are entries of the gateway chain, the one record of who is blocked and which
 * policy runs; each is checked against the newest such entry and appended in one transaction,
 * so two writers cannot both record the same change. SQLite: store/sqlite/operator-records.ts;
 * PostgreSQL: store/postgres/operator-records.ts.
 */
export interface OperatorRecords {
  /** The block and unblock entries after `afterSequence` (-1: all), in order. */
  blockEventsSince(afterSequence: number): Promise<BlockEvent[]>;
  /**
   * Records a block or an unblock of `agentId` unless its newest such entry already says so.
   * @returns the entry, or null when nothing changed.
   */
  recordAgentBlock(
    type: BlockEntryType,
    agentId: string,
    detail: Record<string, unknown>,
  ): Promise<RecordedEntry | null>;
  /** Open sessions of `agentId`, oldest first. */
  openSessionsOf(agentId: string): Promise<string[]>;
  /** Whether `agentId` ever opened a session (a token agent operators may block). */
  agentHasSessions(agentId: string): Promise<boolean>;
  /** The `policy_reload` entries after `afterSequence` (-1: all), in order. */
  reloadsSince(afterSequence: number): Promise<RecordedReload[]>;
  /**
   * Appends `entry` (a `policy_reload`) unless a reload of `version` or higher is recorded.
   * @returns the entry, or null (not newer).
   */
  recordReload(entry: EntryInput, version: number): Promise<RecordedEntry | null>;
  /** Open sessions whose recorded binding names another policy bundle (unrecorded bindings left out). */
  sessionsBoundToOtherPolicy(bundleHash: string): Promise<{ session_id: string; agent_id: string }[]>;
}

/** How a forwarded call ended: its execution's terminal state and its entry's disposition. */
export type Disposition = 'completed' | 'not_attempted' | 'outcome_unknown';

/** What an attempt records before the upstream is invoked (docs/spec/execution.md#attempts). */
export interface AttemptStart {
  callId: string;
  /** The MCP method forwarded, e.g. `tools/call`. */
  method: string;
  /** server_identity of the upstream invoked. */
  upstream: string;
  agentId: string;
  sessionId: string;
  /** The agent's execution_id, or null. */
  executionId: string | null;
  toolName: string | null;
  /** `sha256:` of JCS of the request, as the terminal entry would carry it, or null. */
  requestPayloadHash: string | null;
  workflowId: string | null;
}

/** A stored attempt (a row of `call_attempts`). */
export interface AttemptRow {
  call_id: string;
  method: string;
  upstream: string;
  agent_id: string;
  session_id: string;
  execution_id: string | null;
  tool_name: string | null;
  request_payload_hash: string | null;
  workflow_id: string | null;
  owner: string;
  started_at: string;
}

export type ExecutionState = 'in_flight' | 'completed' | 'not_attempted' | 'outcome_unknown';
export type TerminalState = Exclude<ExecutionState, 'in_flight'>;

/** An execution registry row (docs/spec/execution.md). */
export interface ExecutionRow {
  agent_id: string;
  execution_id: string;
  binding: string;
  state: ExecutionState;
  call_id: string;
  session_id: string;
  tool_name: string;
  owner: string;
  created_at: string;
  updated_at: string;
  terminal_entry_hash: string | null;
}

/** What admission reserves under (agent_id, execution_id). */
export interface Reservation {
  agentId: string;
  executionId: string;
  /** The action binding (execution/binding.ts), immutable once reserved. */
  binding: string;
  callId: string;
  sessionId: string;
  toolName: string;
}

/** Result of admission: only `admitted` may reach the upstream. */
export type Admission =
  | { kind: 'admitted' }
  | {
      kind: 'EXECUTION_COLLISION' | 'EXECUTION_IN_FLIGHT' | 'EXECUTION_REPLAY_REFUSED';
      existing: ExecutionRow;
    };

/** The execution a forwarded call moves to its terminal state. */
export interface ExecutionKey {
  agentId: string;
  executionId: string;
  callId: string;
}

/** A refusal recorded as a call's terminal entry. */
export interface Refusal {
  code: ErrorCode;
  message: string;
  /** Members this refusal adds to the terminal entry (e.g. `detail`, `server_identity`). */
  entry?: Partial<EntryInput>;
  /** Members added to the JSON-RPC `error.data`. */
  data?: Record<string, unknown>;
}

/**
 * The call path's durable writes: each command commits atomically on its own, in the order it
 * was sent, and is answered only once durable.
 */
export type WriteCommand =
  /**
   * Record a call's attempt before its upstream is invoked (docs/spec/execution.md#attempts),
   * and raise the session's durable sensitivity to `raiseSensitivity` (an index into
   * SENSITIVITY_LEVELS; null: already as high) in the same transaction.
   */
  | { kind: 'attempt'; attempt: AttemptStart; raiseSensitivity: number | null }
  /**
   * Admit an execution_id with its binding and the call's attempt, or classify the existing row
   * and record the refusal (`refusalEntry` completed with the refusal) in the same transaction.
   */
  | {
      kind: 'admission';
      admission: Reservation;
      attempt: AttemptStart;
      /** As the `attempt` command's, raised only when admitted. */
      raiseSensitivity: number | null;
      refusalEntry: EntryInput;
    }
  /** A forwarded call's terminal entry, its registry transition, its session count, its attempt's end. */
  | {
      kind: 'terminal';
      sessionId: string;
      entry: EntryInput;
      disposition: Disposition;
      execution: ExecutionKey | null;
    }
  /** A refusal as a call's terminal entry (session chain and count, or the gateway chain). */
  | { kind: 'refusal'; sessionId: string | null; entry: EntryInput };

export type AdmissionResult =
  | { kind: 'admitted' }
  | { kind: 'refused'; refusal: Refusal; entry: AuditEntry }
  | { kind: 'refusal-not-recorded'; refusal: Refusal; message: string };

/** What each command answers. */
export interface WriteResults {
  attempt: null;
  admission: AdmissionResult;
  terminal: AuditEntry;
  refusal: AuditEntry;
}

/** Where the call path sends its writes (the one write path of call/orchestrator.ts). */
export interface WriteStore {
  /**
   * @returns (resolves) the command's result once it is durable.
   * @throws (rejects) what the write threw; CmcpError STORE_QUEUE_FULL when the store's
   *   queue is full (nothing written); a busy error ({@link isStoreBusy}) when another process
   *   held the write lock for the whole busy timeout.
   */
  write<C extends WriteCommand>(cmd: C): Promise<WriteResults[C['kind']]>;
}

/** The call path's side of the port: its writes and the attempt log's end of life. */
export interface CallStore extends WriteStore {
  /**
   * No new attempt after this (a shutdown past its drain time). Resolves once every command
   * sent before it is durable or failed, so the recovery that follows sees every attempt.
   */
  closeAttempts(): Promise<void>;
  /**
   * Whether the call's attempt has not ended yet (a late terminal entry is written only then).
   * Engines that cannot answer without a round trip answer true (the write itself refuses an
   * ended attempt).
   */
  attemptOpen(callId: string): boolean;
}

/**
 * What a session's highest forwarded sensitivity is read back from after a restart
 * (call/sensitivity.ts) where it is not read with the session's row: SQLite's
 * `session_sensitivity` row, or, for a session older than that table, its chain's tool calls.
 * Absent on PostgreSQL, whose session rows carry `sensitivity_level`.
 */
export interface SensitivityReads {
  /** The level (index into the catalog's SENSITIVITY_LEVELS) the session's row holds, or undefined. */
  storedLevel(sessionId: string): number | undefined;
  /** The session chain's `tool_call` entries, in order (the replay of a session with no row). */
  toolCalls(sessionId: string): Iterable<Pick<AuditEntry, 'tool_name' | 'disposition'>>;
}

/**
 * Appends a relayed MCP request's terminal entry (docs/spec/audit-entries.md#relayed-requests)
 * to its session's chain while the session is open, else to the gateway chain, deciding which
 * inside the write's own transaction. @returns (resolves) the committed entry.
 */
export type RelayEntrySink = (sessionId: string | null, input: EntryInput) => Promise<AuditEntry>;

/** The read-only execution view (`GET /executions/:id`). */
export interface ExecutionReads {
  get(agentId: string, executionId: string): Answer<ExecutionRow | undefined>;
}

/**
 * What every engine's storage offers a runtime besides the port itself: its name and one way
 * to let go of it (the lock or lease, every connection). What only one engine needs (SQLite's
 * instance lock and store worker, a replica's pool and lease) stays on that adapter's storage.
 */
export interface StorageCapabilities {
  readonly engine: 'sqlite' | 'postgres';
  /** The chains' trees and their signed checkpoints. */
  readonly trees: TreeStore;
  /**
   * Readiness's database check (`GET /readyz`): a small write of `writer`'s probe row, null once
   * it committed, else a short reason (a code, `timeout`, `read-only`, `ENOSPC`…). Never throws.
   */
  writeProbe(writer: string): () => Promise<string | null>;
  /** Releases the lock or lease the adapter holds and closes its connections; idempotent. */
  close(): Promise<void>;
}

/**
 * Where the gateway chain's records of the domain go (availability changes, catalog drift,
 * measurements, refusals): each call resolves once the entry is stored. SQLite: its chain of
 * the connection; a replica: its session store's `appendEntries`.
 * @throws (rejects) what the adapter throws when the entry cannot be stored.
 */
export interface GatewayChainSink {
  appendAwaited(chainId: string, input: EntryInput): Promise<AuditEntry>;
}

/** Thrown when another live process holds the instance (its lock or lease). `code` is stable. */
export class InstanceBusyError extends CmcpError {
  declare readonly code: 'INSTANCE_RUNNING';
  constructor(message: string) {
    super('INSTANCE_RUNNING', message);
    this.name = 'InstanceBusyError';
  }
}

/**
 * Whether a write failed because another process held the store's write lock for the whole
 * wait (SQLite's SQLITE_BUSY): nothing of it was done, and trying again later may succeed.
 */
export function isStoreBusy(e: unknown): boolean {
  return typeof e === 'object' && e !== null && (e as { code?: unknown }).code === 'SQLITE_BUSY';
}

export type { AuditFeed, FeedEntry } from './feed.js';
