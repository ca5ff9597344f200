/**
 * Test seams for persistence and start-up faults, switched on by `CMCP_FAULT_INJECT` (a comma
 * list), read once at start-up and logged loudly when set:
 * - `terminal_commit` makes every terminal transaction throw after its writes, so it rolls
 *   back whole: the gateway fails closed (a fault reported, nothing recorded as done).
 * - `die_at:<step>` SIGKILLs the process itself when its start-up reaches `<step>` (the one start,
 *   gateway/lifecycle/start.ts; the lease and evidence steps are a replica's only)
 *   ({@link StartStep}): a crash at a known point of the start, without racing its log.
 */
import { CmcpError } from '../errors/index.js';

export type FaultPoint = 'terminal_commit';

/**
 * The steps of a replica's start-up at which `die_at:<step>` kills it, in start-up order
 * (docs/replicas.md#start-up-order): its lease acquired; its start records written; its
 * measurement taken; its key's evidence recorded; its previous run's calls sealed and its sweep
 * started; listening.
 */
export type StartStep =
  | 'lease_acquired'
  | 'start_recorded'
  | 'measured'
  | 'evidence_recorded'
  | 'own_work_recovered'
  | 'listening';

const active = new Set<string>((process.env.CMCP_FAULT_INJECT ?? '').split(',').filter(Boolean));

/** The fault points switched on for this process. */
export function activeFaults(): string[] {
  return [...active];
}

/** Throws when `point` is switched on. Call inside the transaction to be failed. */
export function maybeFail(point: FaultPoint): void {
  if (active.has(point)) throw new CmcpError('INJECTED_FAULT', `injected fault at ${point}`);
}

/** SIGKILLs this process when `die_at:<step>` is switched on (nothing runs after it). */
export function maybeDie(step: StartStep): void {
  if (active.has(`die_at:${step}`)) process.kill(process.pid, 'SIGKILL');
}
