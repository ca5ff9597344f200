/**
 * Ingress rule for `params._cmcp.execution_id` (docs/spec/execution.md): an absent key means no
 * correlation; a string of 1–200 characters, each 0x21–0x7E, is valid; anything else that
 * is present (null, numbers, objects, empty, too long, spaces, controls, non-ASCII) is
 * refused as EXECUTION_ID_INVALID before any reservation.
 */

export type ExecutionIdCheck =
  | { kind: 'absent' }
  | { kind: 'valid'; value: string }
  | { kind: 'invalid'; reason: string };

const VALID = /^[\x21-\x7e]{1,200}$/;

/** Classifies the `_cmcp` object's execution_id member (pass the whole `_cmcp` object). */
export function checkExecutionId(cmcp: Record<string, unknown>): ExecutionIdCheck {
  if (!Object.hasOwn(cmcp, 'execution_id')) return { kind: 'absent' };
  const v = cmcp.execution_id;
  if (typeof v !== 'string')
    return {
      kind: 'invalid',
      reason: `must be a string, not ${v === null ? 'null' : Array.isArray(v) ? 'array' : typeof v}`,
    };
  if (v.length === 0) return { kind: 'invalid', reason: 'must not be empty' };
  if (v.length > 200) return { kind: 'invalid', reason: 'must be at most 200 characters' };
  if (!VALID.test(v))
    return { kind: 'invalid', reason: 'characters must be 0x21–0x7E (printable ASCII, no space)' };
  return { kind: 'valid', value: v };
}
