/**
 * The execution registry's rules shared by both engines (store/sqlite/executions.ts,
 * store/postgres/executions.ts): how an admission that found its key taken is refused.
 */
import { timingSafeEqual } from 'node:crypto';
import type { Admission, ExecutionRow } from './port.js';

/** Constant-time equality of two rendered bindings (length leaks only the algorithm). */
export function bindingsEqual(a: string, b: string): boolean {
  const x = Buffer.from(a, 'utf8');
  const y = Buffer.from(b, 'utf8');
  if (x.length !== y.length) return false;
  return timingSafeEqual(x, y);
}

/**
 * Why an admission that found `existing` under its key is refused (docs/spec/execution.md#admission),
 * the one order of checks both engines use: a different binding is a collision whatever the
 * state (checked first); then in_flight; then any terminal state is a replay.
 */
export function classifyExisting(
  existing: ExecutionRow,
  binding: string,
): Exclude<Admission, { kind: 'admitted' }> {
  if (!bindingsEqual(existing.binding, binding)) return { kind: 'EXECUTION_COLLISION', existing };
  if (existing.state === 'in_flight') return { kind: 'EXECUTION_IN_FLIGHT', existing };
  return { kind: 'EXECUTION_REPLAY_REFUSED', existing };
}
