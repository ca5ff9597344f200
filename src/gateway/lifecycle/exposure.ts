/**
 * Start-up warnings about how exposed this gateway is: fault injection on, dev mode, a listener
 * beyond loopback without TLS (docs/operations.md).
 */
import type { Logger } from 'pino';
import { type GatewayConfig, isLoopback } from '../../config/index.js';
import { activeFaults } from '../../store/faults.js';

/** Start-up warnings about how exposed this gateway is. */
export function warnExposure(cfg: GatewayConfig, log: Logger): void {
  if (activeFaults().length)
    log.warn(
      { faults: activeFaults() },
      'FAULT INJECTION IS ON: writes or the start-up will fail on purpose (test seam)',
    );
  if (cfg.dev_mode)
    log.warn(
      'DEV MODE: loopback only; unauthenticated requests act as agent "dev"; do not use in production',
    );
  else if (!isLoopback(cfg.listen.host))
    log.warn(
      { host: cfg.listen.host },
      'listening beyond loopback without TLS: terminate TLS in front of the gateway',
    );
}
