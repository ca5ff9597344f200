/**
 * Attested TLS to an upstream that runs in a TEE of its own (`upstreams[].attested_tls`,
 * docs/spec/attested-tls.md#upstreams): an undici dispatcher whose every connection is checked
 * by @cmcp/verify before a request (with the upstream's credentials) is written, and the binding
 * last accepted per upstream, which each call to it records (`detail.upstream_attested_tls`).
 */
import { type AttestedTlsOptions, attestedConnect, loadReferenceValues, loadTrustStore } from '@cmcp/verify';
import { Agent } from 'undici';
import type { UpstreamAttestedTlsConfig } from '../config/upstream-credentials.js';
import { CmcpError } from '../errors/index.js';

/** What a call records of the upstream's accepted binding (docs/spec/audit-entries.md). */
export interface AttestedUpstreamBinding {
  spki_sha256: string;
  instance_id: string;
  sequence: number;
  issued_at: string;
  gateway_measurement: string | null;
  policy_bundle_hash: string | null;
  catalog_hash: string | null;
  /** The evidence verdict (`hardware-attested`, or `hardware-unanchored` when allowed). */
  verdict: string;
}

const ACCEPTED = new Map<string, AttestedUpstreamBinding>();

/** The binding last accepted on a connection to `upstream`, or null (none, or not attested). */
export function attestedUpstreamBinding(upstream: string): AttestedUpstreamBinding | null {
  return ACCEPTED.get(upstream) ?? null;
}

/**
 * The dispatcher of an attested upstream.
 * @throws CmcpError UPSTREAM_CREDENTIAL_UNAVAILABLE when the trust store or reference values
 *   cannot be read or do not validate (the message names the file).
 */
export function attestedUpstreamDispatcher(upstream: string, cfg: UpstreamAttestedTlsConfig): Agent {
  const load = <T>(file: string, fn: (f: string) => T): T => {
    try {
      return fn(file);
    } catch (e) {
      throw new CmcpError(
        'UPSTREAM_CREDENTIAL_UNAVAILABLE',
        `upstream ${upstream}: attested_tls: cannot use ${file}: ${(e as Error).message.slice(0, 200)}`,
      );
    }
  };
  const pins: AttestedTlsOptions = {
    trustStore: load(cfg.trust_store, loadTrustStore),
    ...(cfg.reference_values ? { referenceValues: load(cfg.reference_values, loadReferenceValues) } : {}),
    gatewayMeasurements: cfg.measurements,
    ...(cfg.policy_hash ? { policyBundleHash: cfg.policy_hash } : {}),
    ...(cfg.catalog_hash ? { catalogHash: cfg.catalog_hash } : {}),
    ...(cfg.max_age_s ? { maxAgeS: cfg.max_age_s } : {}),
    allowUnanchored: cfg.allow_unanchored,
  };
  return new Agent({
    connect: attestedConnect(pins, ({ preimage: p, verdict }) => {
      ACCEPTED.set(upstream, {
        spki_sha256: p.spki_sha256,
        instance_id: p.instance_id,
        sequence: p.sequence,
        issued_at: p.issued_at,
        gateway_measurement: p.gateway_measurement,
        policy_bundle_hash: p.policy_bundle_hash,
        catalog_hash: p.catalog_hash,
        verdict,
      });
    }),
  });
}
