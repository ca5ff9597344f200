/**
 * Records, in the gateway chain, every upstream session the gateway had to initialise again
 * because the upstream no longer knew it (HTTP 404: it expired it, or it restarted):
 * `upstream_session_renewed` with the upstream and why (docs/spec/audit-entries.md).
 */
import { GATEWAY_CHAIN_ID } from '@cmcp/verify/formats';
import type { Logger } from 'pino';
import type { GatewayChainSink } from '../store/port.js';
import type { UpstreamPool } from '../upstream/pool.js';

/** Starts recording renewals of every connection of the pool (shared and per client session). */
export function recordRenewals(upstreams: UpstreamPool, chain: GatewayChainSink, log: Logger): void {
  upstreams.observeRenewals((upstream, failure) => {
    // At once when the lock is free; a lock held by another process is waited for by awaiting.
    chain
      .appendAwaited(GATEWAY_CHAIN_ID, {
        entry_type: 'upstream_session_renewed',
        server_identity: upstream,
        detail: { upstream, failure },
      })
      .catch((e) => log.error({ err: (e as Error).message }, 'could not record upstream_session_renewed'));
  });
}
