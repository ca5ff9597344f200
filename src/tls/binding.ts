/**
 * Binds a TLS key into hardware evidence (docs/spec/attested-tls.md#binding):
 * REPORT_DATA = key_thumbprint ‖ SHA-256(JCS(tls_preimage)) for the `cmcp.tls-binding`
 * preimage — the session binding's construction under another domain, so no REPORT_DATA can be
 * read as both — quoted by the same provider as sessions (TPM, SEV-SNP, TDX, Azure CVM).
 */
import {
  b64u,
  type EvidenceJson,
  reportData,
  TLS_EVIDENCE_PROFILE,
  type TlsBindingPreimage,
  type TlsEvidence,
  tlsBindingDigest,
} from '@cmcp/verify/formats';
import { absentEvidence } from '../session/binding-record.js';
import type { GatewayKey, SessionFacts } from '../session/types.js';
import { type AttestationProvider, BindingError } from '../tee/provider.js';
import type { TlsKey } from './key.js';

/** When and where a binding is made. */
export interface TlsBindingFacts {
  instanceId: string;
  sequence: number;
  issuedAt: Date;
  notAfter: Date;
}

/** RFC 3339 UTC at whole seconds (what X.509 validity can carry too). */
const rfc3339 = (d: Date) => `${d.toISOString().slice(0, 19)}Z`;

/** The preimage naming `tls`'s SubjectPublicKeyInfo hash, the gateway key and what the gateway runs. */
export function tlsPreimage(
  tls: TlsKey,
  key: GatewayKey,
  facts: SessionFacts,
  at: TlsBindingFacts,
): TlsBindingPreimage {
  return {
    domain: 'cmcp.tls-binding',
    version: 1,
    instance_id: at.instanceId,
    spki_sha256: tls.spkiSha256,
    key_origin: tls.origin,
    sequence: at.sequence,
    issued_at: rfc3339(at.issuedAt),
    not_after: rfc3339(at.notAfter),
    key_thumbprint: b64u(key.thumbprint),
    gateway_measurement: facts.gatewayMeasurement,
    policy_bundle_hash: facts.policyBundleHash,
    catalog_hash: facts.catalogHash,
  };
}

/**
 * Quotes the TLS key's binding.
 * @returns the evidence document; when the provider cannot bind, a document whose evidence is
 *   `absent` with the provider's reason (an attested-TLS client refuses it). Never throws for a
 *   failed bind.
 */
export async function attestTlsKey(
  tls: TlsKey,
  key: GatewayKey,
  facts: SessionFacts,
  provider: AttestationProvider,
  at: TlsBindingFacts,
): Promise<{ evidence: TlsEvidence; failure: string | null }> {
  const preimage = tlsPreimage(tls, key, facts, at);
  const rd = reportData(key.thumbprint, tlsBindingDigest(preimage));
  let evidence: EvidenceJson;
  let failure: string | null = null;
  try {
    const bound = await provider.bind(rd);
    evidence = { provider: provider.name, status: 'bound', reason: null, report_data: b64u(rd), ...bound };
  } catch (e) {
    failure = e instanceof BindingError ? e.reason : 'PROVIDER_FAULT';
    evidence = absentEvidence(provider.name, failure, rd, provider.measurementEvidence?.() ?? null);
  }
  return {
    evidence: { profile: TLS_EVIDENCE_PROFILE, cnf: { jwk: key.jwk }, binding: { preimage }, evidence },
    failure,
  };
}
