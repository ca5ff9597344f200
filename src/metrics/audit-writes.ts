/**
 * The call path's audit writes as metrics see them: each command sent to the store counts in
 * `cmcp_audit_write_queue_depth` until it is durable or failed, and its time from sending to
 * that answer in `cmcp_audit_write_duration_seconds{kind}`. Either engine's store (store/port.ts
 * CallStore) is wrapped unchanged.
 */
import type { CallStore, WriteCommand, WriteResults } from '../store/port.js';
import type { GatewayMetrics } from './registry.js';

/** `store` with its writes counted in `metrics`. */
export function countedWrites(store: CallStore, metrics: GatewayMetrics): CallStore {
  return {
    write<C extends WriteCommand>(cmd: C): Promise<WriteResults[C['kind']]> {
      const done = metrics.auditWriteSent(cmd.kind);
      return store.write(cmd).finally(done);
    },
    closeAttempts: () => store.closeAttempts(),
    attemptOpen: (callId) => store.attemptOpen(callId),
  };
}
