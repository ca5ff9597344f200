/**
 * The operators' records on SQLite (store/port.ts OperatorRecords): agent blocks and policy
 * reloads as gateway-chain entries, each checked against the newest such entry and appended in
 * one `BEGIN IMMEDIATE` transaction, waited for by awaiting (store/sqlite/db.ts immediateAsync).
 */
import { GATEWAY_CHAIN_ID } from '@cmcp/verify/formats';
import type { BlockEntryType, BlockEvent, OperatorRecords, RecordedReload } from '../port.js';
import { AuditChain } from './chain.js';
import { type Db, immediateAsync } from './db.js';
import { prepared } from './statements.js';

/** The operator records of one SQLite connection. */
export function sqliteOperatorRecords(db: Db, chain = new AuditChain(db)): OperatorRecords {
  return {
    blockEventsSince: async (after) =>
      prepared<[string, number], { seq: number; entry_type: BlockEntryType; agent_id: string }>(
        db,
        `SELECT sequence_number AS seq, entry_type, agent_id FROM audit_entries
          WHERE chain_id = ? AND sequence_number > ? AND entry_type IN ('agent_blocked', 'agent_unblocked')
          ORDER BY sequence_number`,
      )
        .all(GATEWAY_CHAIN_ID, after)
        .map((x): BlockEvent => ({ sequence: x.seq, type: x.entry_type, agentId: x.agent_id })),
    recordAgentBlock: (type, agentId, detail) =>
      immediateAsync(db, () => {
        const last = prepared<[string, string], { entry_type: BlockEntryType }>(
          db,
          `SELECT entry_type FROM audit_entries WHERE chain_id = ? AND agent_id = ?
              AND entry_type IN ('agent_blocked', 'agent_unblocked') ORDER BY sequence_number DESC LIMIT 1`,
        ).get(GATEWAY_CHAIN_ID, agentId);
        if ((last?.entry_type === 'agent_blocked') === (type === 'agent_blocked')) return null;
        const e = chain.append(GATEWAY_CHAIN_ID, { entry_type: type, agent_id: agentId, detail });
        return { entry_hash: e.entry_hash, sequence: e.sequence_number };
      }),
    openSessionsOf: async (agentId) =>
      prepared<[string], { session_id: string }>(
        db,
        "SELECT session_id FROM sessions WHERE agent_id = ? AND status = 'open' ORDER BY created_ms",
      )
        .all(agentId)
        .map((x) => x.session_id),
    agentHasSessions: async (agentId) =>
      prepared(db, 'SELECT 1 FROM sessions WHERE agent_id = ? LIMIT 1').get(agentId) !== undefined,
    reloadsSince: async (after) =>
      prepared<[string, number], { seq: number; canonical: string }>(
        db,
        `SELECT sequence_number AS seq, canonical FROM audit_entries
          WHERE chain_id = ? AND sequence_number > ? AND entry_type = 'policy_reload' ORDER BY sequence_number`,
      )
        .all(GATEWAY_CHAIN_ID, after)
        .map((x) => ({
          sequence: x.seq,
          detail: (JSON.parse(x.canonical) as { detail: RecordedReload['detail'] }).detail,
        })),
    recordReload: (entry, version) =>
      immediateAsync(db, () => {
        const last = prepared<[string], { canonical: string }>(
          db,
          `SELECT canonical FROM audit_entries WHERE chain_id = ? AND entry_type = 'policy_reload'
            ORDER BY sequence_number DESC LIMIT 1`,
        ).get(GATEWAY_CHAIN_ID);
        const recorded = last
          ? (JSON.parse(last.canonical) as { detail?: { version?: number } }).detail?.version
          : undefined;
        if (typeof recorded === 'number' && recorded >= version) return null;
        const e = chain.append(GATEWAY_CHAIN_ID, entry);
        return { entry_hash: e.entry_hash, sequence: e.sequence_number };
      }),
    sessionsBoundToOtherPolicy: async (bundleHash) =>
      prepared<[string], { session_id: string; agent_id: string }>(
        db,
        `SELECT session_id, agent_id FROM sessions
          WHERE status = 'open' AND binding_json <> '{}'
            AND json_extract(binding_json, '$.preimage.policy_bundle_hash') IS NOT ?
          ORDER BY created_ms`,
      ).all(bundleHash),
  };
}
