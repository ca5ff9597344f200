/**
 * Records upstream availability changes (docs/spec/refinements.md) in the gateway chain:
 * `upstream_unavailable` (not reached at start-up, with the reason), `upstream_available`
 * (brought in after a retry) and `upstream_authorization_required` (waiting for a user); and
 * each OAuth token acquisition, refresh and refusal of a protected upstream as
 * `upstream_oauth` (./oauth/: scope, lifetime, authorization server; never a token value).
 */
import { GATEWAY_CHAIN_ID } from '@cmcp/verify/formats';
import type { Logger } from 'pino';
import type { GatewayChainSink } from '../store/port.js';
import { authorizerFor } from './oauth/index.js';
import type { UpstreamPool } from './pool.js';

/** Starts recording; the unavailable upstreams found at start-up are recorded at once. */
export function recordAvailability(upstreams: UpstreamPool, chain: GatewayChainSink, log: Logger): void {
  const append = (entry_type: string, detail: Record<string, unknown>) =>
    // At once when the lock is free; a lock held by another process is waited for by awaiting.
    chain
      .appendAwaited(GATEWAY_CHAIN_ID, {
        entry_type,
        server_identity: typeof detail.upstream === 'string' ? detail.upstream : null,
        detail,
      })
      .catch((e) => log.error({ err: (e as Error).message }, `could not record ${entry_type}`));
  upstreams.availability.listen(append);
  for (const name of upstreams.names()) {
    const cfg = upstreams.shared(name)?.cfg;
    if (cfg?.transport !== 'http') continue;
    authorizerFor(cfg).listen(({ upstream, event, detail }) => {
      log.info({ upstream, event }, 'upstream OAuth');
      append('upstream_oauth', { upstream, event, ...detail });
    });
  }
}
