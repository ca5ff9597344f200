/**
 * A relayed MCP request's terminal entry on PostgreSQL (docs/spec/audit-entries.md#relayed-requests):
 * one fenced transaction of the replica's lease that appends the entry to the session's chain
 * while the session is open, else to the gateway chain — decided under the session row's lock
 * (sessions.ts lockLiveChain), so a close committed by another replica cannot slip between.
 * Relayed entries do not count as tool calls (the session's call count is not raised).
 */
import type { AuditEntry } from '@cmcp/verify/formats';
import { GATEWAY_CHAIN_ID } from '@cmcp/verify/formats';
import type pg from 'pg';
import type { EntryInput } from '../entries/next-entry.js';
import { appendEntry } from './chain.js';
import type { Fence } from './leases.js';
import { lockLiveChain } from './sessions.js';
import { fencedTransaction } from './transaction.js';

/**
 * @returns (resolves) the committed entry.
 * @throws (rejects) LeaseLostError (LEASE_LOST); pg errors — nothing written.
 */
export function appendRelayEntry(
  pool: pg.Pool,
  fence: Fence,
  sessionId: string | null,
  input: EntryInput,
): Promise<AuditEntry> {
  return fencedTransaction(pool, fence, async (client) => {
    const chainId = sessionId ? await lockLiveChain(client, sessionId) : GATEWAY_CHAIN_ID;
    // Signed by this replica like every other entry it writes: a /2 claim checks each one.
    return appendEntry(client, chainId, input, undefined, fence.writer);
  });
}
