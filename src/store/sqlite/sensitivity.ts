/**
 * The SQLite {@link SensitivityReads}: a session's `session_sensitivity` row, and its chain's
 * tool calls for a session made before that table existed.
 */

import type { SensitivityReads } from '../port.js';
import type { AuditChain } from './chain.js';
import type { Db } from './db.js';
import { prepared } from './statements.js';

/** The sensitivity reads of one SQLite connection and its chain. */
export function sqliteSensitivityReads(db: Db, chain: AuditChain): SensitivityReads {
  return {
    storedLevel: (sessionId) =>
      prepared<[string], { level: number }>(
        db,
        'SELECT level FROM session_sensitivity WHERE session_id = ?',
      ).get(sessionId)?.level,
    *toolCalls(sessionId) {
      for (const e of chain.entries(sessionId)) if (e.entry_type === 'tool_call') yield e;
    },
  };
}
