/**
 * The agent blocks' ledger on each engine ({@link BlockLedger}): the gateway chain's
 * `agent_blocked` / `agent_unblocked` entries, on SQLite through the audit chain under the
 * instance's write lock, on PostgreSQL fenced by the replica's lease
 * (store/postgres/agent-blocks.ts).
 */
import { GATEWAY_CHAIN_ID } from '@cmcp/verify/format/entry';
import type pg from 'pg';
import type { AuditChain } from '../../audit/chain.js';
import type { ReplicaSessionService } from '../../session/replica-service.js';
import type { SessionService } from '../../session/service.js';
import { immediateAsync } from '../../store/db.js';
import {
  agentHasSessions,
  blockEventsSince,
  openSessionsOf,
  recordAgentBlock,
} from '../../store/postgres/agent-blocks.js';
import type { Fence } from '../../store/postgres/leases.js';
import type { BlockEvent, BlockLedger, ClosedSession } from './controls.js';

/**
 * Blocks in a SQLite gateway's chain. The check, the record and the in-memory state change
 * happen together once the write lock is held (awaited: store/db.ts immediateAsync).
 */
export function sqliteBlocks(chain: AuditChain, sessions: SessionService): BlockLedger {
  return {
    async since(sequence) {
      const events: BlockEvent[] = [];
      for (const e of chain.entriesOfTypes(GATEWAY_CHAIN_ID, ['agent_blocked', 'agent_unblocked']))
        if (e.sequence_number > sequence)
          events.push({
            agentId: e.agent_id as string,
            type: e.entry_type as BlockEvent['type'],
            sequence: e.sequence_number,
          });
      return events;
    },
    record: (type, agentId, detail, state) =>
      immediateAsync(chain.db, () => {
        if (state.already()) return null;
        const e = chain.append(GATEWAY_CHAIN_ID, { entry_type: type, agent_id: agentId, detail });
        state.apply(e.sequence_number);
        return { entry_hash: e.entry_hash, sequence: e.sequence_number };
      }),
    closeOpenOf: (agentId) => sessions.closeOpenInBatches(agentId, 'agent_blocked'),
  };
}

/**
 * Blocks in the gateway chain replicas share on PostgreSQL: recorded unless the agent's newest
 * entry already says so (under the chain tip's lock), and a block closes the agent's open
 * sessions whichever replica opened them. An agent that opened a session before counts as known
 * (token agents are not in the config).
 */
export function postgresBlocks(pool: pg.Pool, fence: Fence, sessions: ReplicaSessionService): BlockLedger {
  return {
    since: (sequence) => blockEventsSince(pool, sequence),
    async record(type, agentId, detail, state) {
      const entry = await recordAgentBlock(pool, fence, type, agentId, detail);
      if (entry) state.apply(entry.sequence);
      return entry;
    },
    async closeOpenOf(agentId) {
      const closed: ClosedSession[] = [];
      for (const sid of await openSessionsOf(pool, agentId)) {
        const claim = await sessions.closeAwaited(agentId, sid, 'agent_blocked');
        closed.push({ session_id: sid, agent_id: agentId, claim_sequence: claim.claim_sequence });
      }
      return closed;
    },
    hasSessions: (agentId) => agentHasSessions(pool, agentId),
    replicaId: fence.replicaId,
  };
}
