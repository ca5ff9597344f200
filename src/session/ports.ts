/**
 * What the running gateway asks of its sessions and executions, engine-neutral: the
 * SessionService (service.ts) over SQLite's store and the ExecutionRegistry answer synchronously
 * where they can (a better-sqlite3 read is a function call; wrapping it in a promise would cost
 * every request a turn of the loop), over PostgreSQL's with a promise. Callers `await` the answer either way, off the call path's hot loop only: the call
 * path itself (call/orchestrator.ts) awaits `resolve` as it always has.
 */
import type { Readable } from 'node:stream';
import type { ConsistencyProofJson, ReceiptJson } from '@cmcp/verify/formats';
import type { Answer, ExecutionReads } from '../store/port.js';
import type { SessionCreated, SessionRow } from './types.js';

export type { Answer, ExecutionReads };

/** The session a `tools/call` (or a relayed request) runs in. */
export interface CallSessions {
  /**
   * The named open session of `agentId`, or the agent's default session (opened or rotated).
   * @throws (rejects) CmcpError UNKNOWN_SESSION | SESSION_CLOSED | SESSION_BINDING_REQUIRED.
   */
  resolve(agentId: string, sessionId: string | undefined): Promise<SessionRow>;
}

/** What the relayed methods read of sessions (src/relay/: evidenced requests, server-to-client requests). */
export interface RelaySessionReads extends CallSessions {
  /** The session row if it exists and belongs to `agentId`. */
  get(agentId: string, sessionId: string): Answer<SessionRow | undefined>;
}

/** The session routes' view (`POST /sessions`, `…/close`, `…/claim`, `…/audit`: routes/agent.ts). */
export interface AgentSessions extends CallSessions {
  create(agentId: string, opts: { challenge?: string | null }): Promise<SessionCreated>;
  /** Sessions of `agentId` open now (limits.agent_max_open_sessions). */
  openCount(agentId: string): Answer<number>;
  /**
   * Closes with a claim and answers its canonical text (UTF-8 JCS): the text just issued, or a
   * closed session's stored text, not parsed (a version-1 claim of a long session is ~1.5 MB).
   * @throws CmcpError UNKNOWN_SESSION.
   */
  closeText(agentId: string, sessionId: string): Promise<Buffer>;
  /** The stored canonical text of a closed session's claim. @throws CmcpError UNKNOWN_SESSION | SESSION_OPEN. */
  claimText(agentId: string, sessionId: string): Answer<Buffer>;
  /** The session's audit bundle as JSON text. @throws CmcpError UNKNOWN_SESSION. */
  bundle(agentId: string, sessionId: string): Answer<Readable>;
}

/** What the receipt routes ask (`GET /sessions/{id}/receipts/{call_id}`, `…/consistency`): ./receipts.ts. */
export interface ReceiptReads {
  /**
   * The complete receipt of a recorded call of the agent's session (an unknown call: UNKNOWN_SESSION).
   * @throws (rejects) CmcpError UNKNOWN_SESSION.
   */
  receipt(agentId: string, sessionId: string, callId: string): Promise<ReceiptJson>;
  /**
   * The consistency proof between two tree sizes of the agent's session (`to` absent: the newest
   * signed checkpoint's size). @throws (rejects) CmcpError UNKNOWN_SESSION | INVALID_PARAMS.
   */
  consistency(
    agentId: string,
    sessionId: string,
    from: number,
    to: number | undefined,
  ): Promise<ConsistencyProofJson>;
}
