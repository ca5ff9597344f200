/**
 * The audit export cursor (docs/audit-export.md#cursor): the entry_hash of the last entry a
 * reader kept. Each engine finds that entry's position itself, so a cursor stays good across a
 * restart, a backup and its restore, and names nothing in another database.
 */
import { CmcpError } from '@cmcp/verify/errors';

/**
 * Checks a cursor's form (64 lowercase hex digits).
 * @throws CmcpError AUDIT_CURSOR_UNKNOWN when it is not one.
 */
export function parseFeedCursor(cursor: string): string {
  if (!/^[0-9a-f]{64}$/.test(cursor))
    throw new CmcpError('AUDIT_CURSOR_UNKNOWN', 'an audit cursor is the entry_hash of an exported entry');
  return cursor;
}

/** The error for a well-formed cursor that names no entry of this database. */
export function unknownCursor(): CmcpError {
  return new CmcpError(
    'AUDIT_CURSOR_UNKNOWN',
    'the audit cursor names no entry of this database (another database, or a restore from an older backup)',
  );
}
