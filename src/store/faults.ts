/**
 * Test seam for persistence faults. `CMCP_FAULT_INJECT=terminal_commit` makes every
 * terminal transaction throw after its writes, so it rolls back whole. It can only make
 * the gateway fail closed (a fault reported, nothing recorded as done); it is read once at
 * start-up and logged loudly when set.
 */
import { CmcpError } from '@cmcp/verify/errors/index';

export type FaultPoint = 'terminal_commit';

const active = new Set<string>((process.env.CMCP_FAULT_INJECT ?? '').split(',').filter(Boolean));

/** The fault points switched on for this process. */
export function activeFaults(): string[] {
  return [...active];
}

/** Throws when `point` is switched on. Call inside the transaction to be failed. */
export function maybeFail(point: FaultPoint): void {
  if (active.has(point)) throw new CmcpError('INJECTED_FAULT', `injected fault at ${point}`);
}
