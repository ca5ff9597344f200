/**
 * The operators' records on a shared PostgreSQL (store/port.ts OperatorRecords): agent blocks
 * (./agent-blocks.ts) and policy reloads (./policy-reloads.ts), each write fenced by the
 * replica's lease.
 */
import type pg from 'pg';
import type { EntryInput } from '../entries/next-entry.js';
import type { BlockEntryType, OperatorRecords } from '../port.js';
import { agentHasSessions, blockEventsSince, openSessionsOf, recordAgentBlock } from './agent-blocks.js';
import type { Fence } from './leases.js';
import { recordReload, reloadsSince, sessionsBoundToOtherPolicy } from './policy-reloads.js';

/** One replica's operator records. */
export function postgresOperatorRecords(pool: pg.Pool, fence: Fence): OperatorRecords {
  return {
    blockEventsSince: (after) => blockEventsSince(pool, after),
    recordAgentBlock: (type: BlockEntryType, agentId, detail) =>
      recordAgentBlock(pool, fence, type, agentId, detail),
    openSessionsOf: (agentId) => openSessionsOf(pool, agentId),
    agentHasSessions: (agentId) => agentHasSessions(pool, agentId),
    reloadsSince: (after) => reloadsSince(pool, after),
    recordReload: (entry: EntryInput, version) => recordReload(pool, fence, entry, version),
    sessionsBoundToOtherPolicy: (bundleHash) => sessionsBoundToOtherPolicy(pool, bundleHash),
  };
}
