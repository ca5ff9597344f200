/**
 * The audit chain as the domain names it: hash chains of entries (docs/spec/audit-entries.md),
 * appended and read over the SQLite connection by the storage adapter (store/sqlite/chain.ts),
 * built by the engine-neutral entry builder (store/entries/).
 */
export type {
  ChainTip,
  ClaimPageEntry,
  ClaimPageRow,
  EntryInput,
  PreparedEntry,
} from '../store/sqlite/chain.js';
export { AuditChain, claimPageEntry } from '../store/sqlite/chain.js';
