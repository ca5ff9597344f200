/**
 * Why a JSON-RPC id was refused (JSON-RPC 2.0 §4: a String, Number or Null; cmcp takes strings
 * and safe integers only, null is refused — field case C-MCP-2), naming the id as sent so the
 * caller can find the request: `1.5` is named, not reported as null.
 */

/** The refusal message for an id that is not a string or a safe integer. */
export function invalidIdMessage(id: unknown): string {
  const rule = 'must be a string or an integer';
  if (id === null) return `id ${rule} (null is not allowed)`;
  if (typeof id === 'number') {
    if (Number.isInteger(id)) return `id ${id} ${rule} within ±(2^53 − 1) (RFC 8259 §6)`;
    return `id ${Number.isFinite(id) ? id : JSON.stringify(id)} ${rule} (it has a fraction)`;
  }
  if (typeof id === 'boolean') return `id ${id} ${rule}`;
  return `id ${rule}, not ${Array.isArray(id) ? 'an array' : 'an object'}`;
}
