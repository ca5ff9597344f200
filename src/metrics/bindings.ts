/** Counts failed attestation bindings (`cmcp_attestation_binding_failures_total`) at the provider. */
import type { AttestationProvider } from '../tee/provider.js';
import type { GatewayMetrics } from './registry.js';

/**
 * Wraps `provider.bind` so that every binding that throws (no evidence produced: a session
 * binding, a measurement binding or a readiness probe) is counted under the provider's name.
 */
export function countBindingFailures(provider: AttestationProvider, metrics: GatewayMetrics): void {
  const bind = provider.bind.bind(provider);
  provider.bind = async (reportData) => {
    try {
      return await bind(reportData);
    } catch (e) {
      metrics.bindingFailed(provider.name);
      throw e;
    }
  };
}
