/**
 * Records upstream availability changes (docs/spec/refinements.md) in the gateway chain:
 * `upstream_unavailable` (not reached at start-up, with the reason) and `upstream_available`
 * (brought in after a retry).
 */
import { GATEWAY_CHAIN_ID } from '@cmcp/verify/formats';
import type { Logger } from 'pino';
import type { GatewayChainSink } from '../store/port.js';
import type { UpstreamPool } from './pool.js';

/** Starts recording; the unavailable upstreams found at start-up are recorded at once. */
export function recordAvailability(upstreams: UpstreamPool, chain: GatewayChainSink, log: Logger): void {
  upstreams.availability.listen((entry_type, detail) => {
    // At once when the lock is free; a lock held by another process is waited for by awaiting.
    chain
      .appendAwaited(GATEWAY_CHAIN_ID, {
        entry_type,
        server_identity: typeof detail.upstream === 'string' ? detail.upstream : null,
        detail,
      })
      .catch((e) => log.error({ err: (e as Error).message }, `could not record ${entry_type}`));
  });
}
