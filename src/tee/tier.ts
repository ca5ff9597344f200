/**
 * What `attestation.minimum_tier` requires once the provider is chosen (docs/spec/refinements.md).
 * {@link selectProvider} already refuses a provider whose nominal tier is below the minimum;
 * here the tier must also be *reached*: at start-up the provider's own start must succeed, and
 * while running every session must be bound. `on_unavailable: serve_unbound` keeps the older
 * behaviour (log, record `attestation_binding_failed`, serve signed-only).
 *
 * A hardware provider named in the config (tpm, sev-snp, tdx, azure-cvm) must be reachable at
 * start-up even without `minimum_tier`: an operator who named one expects bound claims, so
 * silently serving signed-only would hide the outage. `serve_unbound` allows it explicitly; a
 * binding that fails later while serving stays a recorded warning. `auto` (which already refuses
 * when it finds no hardware) and `software` are unchanged.
 */
import type { AttestationConfig } from '../config/index.js';
import { AttestationStartError } from './detect.js';
import { type AttestationTier, TIER_RANK } from './provider.js';

/**
 * The tier every session must be bound at, or null when unbound sessions are served
 * (no `minimum_tier`, `minimum_tier: software`, or `on_unavailable: serve_unbound`).
 */
export function requiredBindingTier(a: AttestationConfig): AttestationTier | null {
  const min = a.minimum_tier;
  if (!min || TIER_RANK[min] <= TIER_RANK.software) return null;
  return a.on_unavailable === 'serve_unbound' ? null : min;
}

/** Providers a config names for hardware evidence (every provider but `auto` and `software`). */
export const NAMED_HARDWARE_PROVIDERS: readonly string[] = ['tpm', 'sev-snp', 'tdx', 'azure-cvm'];

/**
 * True when the config names a hardware provider and does not allow serving unbound: such a
 * provider that cannot be reached at start-up refuses start (exit {@link ATTESTATION_EXIT_CODE}).
 */
export function namedProviderRequired(a: AttestationConfig): boolean {
  return NAMED_HARDWARE_PROVIDERS.includes(a.provider) && a.on_unavailable !== 'serve_unbound';
}

/**
 * Start-up check after `provider.start()`: when a binding tier is required, or the config names
 * a hardware provider ({@link namedProviderRequired}), and the provider reported `ok: false`, the
 * gateway must not start.
 * @param started what `provider.start()` returned (`ok`, `reason`, optionally `error`).
 * @throws AttestationStartError ATTESTATION_UNAVAILABLE naming the provider and the reason.
 */
export function assertTierReached(
  a: AttestationConfig,
  provider: { name: string },
  started: Record<string, unknown>,
): void {
  if (started.ok !== false) return;
  const tier = requiredBindingTier(a);
  const reason = typeof started.reason === 'string' ? started.reason : 'PROVIDER_FAULT';
  const error = typeof started.error === 'string' ? `: ${started.error}` : '';
  const where = 'tcti' in a && typeof a.tcti === 'string' ? ` on ${a.tcti}` : '';
  if (tier === null) {
    if (!namedProviderRequired(a)) return;
    throw new AttestationStartError(
      'ATTESTATION_UNAVAILABLE',
      `attestation provider ${provider.name}${where} is configured but cannot be reached at start-up ` +
        `(${reason}${error}); fix the provider, or set attestation.on_unavailable: serve_unbound ` +
        'to serve sessions signed-only',
    );
  }
  throw new AttestationStartError(
    'ATTESTATION_UNAVAILABLE',
    `attestation provider ${provider.name}${where} cannot reach minimum_tier ${tier} at start-up ` +
      `(${reason}${error}); fix the provider, or set attestation.on_unavailable: serve_unbound ` +
      'to serve sessions signed-only',
  );
}

/** Process exit code of `cmcp start` when attestation refuses start-up (docs/getting-started.md). */
export const ATTESTATION_EXIT_CODE = 3;
