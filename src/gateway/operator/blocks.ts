/**
 * The agent blocks' ledger ({@link BlockLedger}) over the storage port's operator records
 * (store/port.ts `OperatorRecords`): the gateway chain's `agent_blocked` / `agent_unblocked`
 * entries, each recorded unless the agent's newest such entry already says so, on either
 * engine. What differs by engine comes in: how a blocked agent's open sessions are closed, and
 * whether an agent that opened a session before counts as known.
 */
import type { OperatorRecords } from '../../store/port.js';
import type { BlockLedger, ClosedSession } from './controls.js';

export interface BlockLedgerOptions {
  /** Closes every open session of `agentId` with a claim (reason `agent_blocked`). */
  closeOpenOf(agentId: string): Promise<ClosedSession[]>;
  /**
   * An agent that opened a session counts as known (replicas: token agents are not in the
   * config); false: only the known agents (SQLite notes token agents as they authenticate).
   */
  knownBySessions: boolean;
  /** This replica's id, named by `GET /operator/status`; absent on SQLite. */
  replicaId?: string;
}

/** The blocks' ledger of one gateway over its storage's operator records. */
export function blockLedger(records: OperatorRecords, o: BlockLedgerOptions): BlockLedger {
  return {
    since: (sequence) => records.blockEventsSince(sequence),
    async record(type, agentId, detail, apply) {
      const entry = await records.recordAgentBlock(type, agentId, detail);
      if (entry) apply(entry.sequence);
      return entry;
    },
    closeOpenOf: (agentId) => o.closeOpenOf(agentId),
    ...(o.knownBySessions ? { hasSessions: (agentId: string) => records.agentHasSessions(agentId) } : {}),
    ...(o.replicaId !== undefined ? { replicaId: o.replicaId } : {}),
  };
}

/**
 * Closes a blocked agent's open sessions one by one, whichever replica opened them, each with
 * its claim awaited.
 */
export function closeEachOpen(
  records: OperatorRecords,
  close: (agentId: string, sessionId: string) => Promise<{ claim_sequence: number }>,
): (agentId: string) => Promise<ClosedSession[]> {
  return async (agentId) => {
    const closed: ClosedSession[] = [];
    for (const sid of await records.openSessionsOf(agentId)) {
      const claim = await close(agentId, sid);
      closed.push({ session_id: sid, agent_id: agentId, claim_sequence: claim.claim_sequence });
    }
    return closed;
  };
}
