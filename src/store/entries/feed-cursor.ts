/**
 * The audit export cursor (docs/audit-export.md#cursor): an engine's position of an entry and
 * that entry's hash, `<position>/<entry_hash>`. The hash lets a resume check that the position
 * still names the entry the reader kept (not another database's, nor a rewritten one).
 */
import { CmcpError } from '@cmcp/verify/errors';

/** A cursor taken apart: the engine's position text and the entry hash it must name. */
export interface FeedCursor {
  position: string;
  entryHash: string;
}

/** `<position>/<entry_hash>`. */
export function formatFeedCursor(position: string, entryHash: string): string {
  return `${position}/${entryHash}`;
}

/**
 * Parses a cursor whose position must match `positionPattern` (the engine's form).
 * @throws CmcpError AUDIT_CURSOR_UNKNOWN when it does not.
 */
export function parseFeedCursor(cursor: string, positionPattern: RegExp): FeedCursor {
  const slash = cursor.indexOf('/');
  const position = slash < 0 ? '' : cursor.slice(0, slash);
  const entryHash = slash < 0 ? '' : cursor.slice(slash + 1);
  if (!positionPattern.test(position) || !/^[0-9a-f]{64}$/.test(entryHash))
    throw new CmcpError('AUDIT_CURSOR_UNKNOWN', 'the audit cursor is not one this database wrote');
  return { position, entryHash };
}

/** The error for a well-formed cursor whose position holds no entry with its hash. */
export function unknownCursor(): CmcpError {
  return new CmcpError(
    'AUDIT_CURSOR_UNKNOWN',
    'the audit cursor names no entry of this database (another database, or a restore from an older backup)',
  );
}
