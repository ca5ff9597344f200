/**
 * A relayed MCP request's terminal entry on SQLite (docs/spec/audit-entries.md#relayed-requests):
 * its own IMMEDIATE transaction (a write lock held by another process waited for by awaiting,
 * store/sqlite/db.ts immediateAsync, up to the busy timeout) that appends the entry to the session's
 * chain while the session is open, else to the gateway chain (PostgreSQL's is
 * store/postgres/relay-entries.ts).
 */
import { GATEWAY_CHAIN_ID } from '@cmcp/verify/formats';
import type { RelayEntrySink } from '../port.js';
import type { AuditChain } from './chain.js';
import { immediateAsync } from './db.js';

/** The SQLite {@link RelayEntrySink} over one connection's chain. */
export function sqliteRelayEntries(
  chain: AuditChain,
  sessions: { isOpen(sessionId: string): boolean },
): RelayEntrySink {
  return (sessionId, input) =>
    immediateAsync(chain.db, () => {
      const open = sessionId !== null && sessions.isOpen(sessionId);
      return chain.append(open ? sessionId : GATEWAY_CHAIN_ID, input);
    });
}
