/**
 * The client-side check of attested TLS (docs/spec/attested-tls.md#client-checks): given the
 * server's leaf certificate (DER), it reads the evidence document from the certificate's CMW
 * extension (or takes the one fetched from the well-known route) and refuses — with a
 * {@link CmcpError} of its own code — unless the evidence verifies against the pinned roots,
 * binds this certificate's key, names the expected gateway measurement (and the pinned policy
 * and catalog hashes), and is fresh. Nothing here talks to the network.
 */
import 'reflect-metadata';
import * as px from '@peculiar/x509';
import { z } from 'zod';
import { claimEvidenceSchema } from '../claim-schema.js';
import { tryB64u } from '../common/kind.js';
import { CmcpError, type ErrorCode } from '../errors/index.js';
import { type Ed25519Jwk, jwkThumbprint, reportData } from '../format/binding.js';
import { b64u } from '../format/canonical.js';
import {
  decodeTlsEvidenceExtension,
  OID_TCG_DICE_CMW,
  spkiSha256,
  TLS_EVIDENCE_PROFILE,
  type TlsBindingPreimage,
  tlsBindingDigest,
} from '../format/tls.js';
import { evidenceKind } from '../kinds.js';
import { type AnchorUsed, computeVerdict, type Verdict } from '../result.js';
import { EMPTY_TRUST_STORE, type ReferenceValues, type TrustStore } from '../trust.js';
import { TlsBindingMemory } from './memory.js';

const b64url = z.string().regex(/^[A-Za-z0-9_-]+$/);
const rfc3339 = z.iso.datetime();
const tlsEvidenceSchema = z.object({
  profile: z.literal(TLS_EVIDENCE_PROFILE),
  cnf: z.object({ jwk: z.object({ kty: z.literal('OKP'), crv: z.literal('Ed25519'), x: b64url }) }),
  binding: z.object({
    preimage: z.object({
      domain: z.string(),
      version: z.number(),
      instance_id: z.string().min(1).max(200),
      spki_sha256: b64url,
      key_origin: z.enum(['generated', 'file']),
      sequence: z.number().int().min(0),
      issued_at: rfc3339,
      not_after: rfc3339,
      key_thumbprint: b64url,
      gateway_measurement: z.string().nullable(),
      policy_bundle_hash: z.string().nullable(),
      catalog_hash: z.string().nullable(),
    }),
  }),
  evidence: claimEvidenceSchema,
});

/** What the relying party pins and allows. */
export interface AttestedTlsOptions {
  /** Roots the hardware evidence must chain to (AK CAs, AMD/Intel roots). */
  trustStore?: TrustStore;
  /** Reference values for the evidence (PCRs, SNP/TDX measurements, accepted gateway measurements). */
  referenceValues?: ReferenceValues;
  /** Accepted `gateway_measurement` values (`sha256:<hex>`); else `referenceValues.gateway.measurements`. One is required. */
  gatewayMeasurements?: readonly string[];
  /** The policy bundle hash the binding must name (`sha256:<hex>`); unchecked when absent. */
  policyBundleHash?: string;
  /** The catalog hash the binding must name; unchecked when absent. */
  catalogHash?: string;
  /** Oldest acceptable `issued_at`, seconds before now. Default 172800 (two default rotation intervals). */
  maxAgeS?: number;
  /** Allowed clock difference for the time checks, seconds. Default 300. */
  clockSkewS?: number;
  /** Accept evidence that verifies but chains to no pinned root (swtpm without an enrolled AK). Default false. */
  allowUnanchored?: boolean;
  /** Accept a key from the operator's files (`key_origin: file`). Default false. */
  allowFileKey?: boolean;
  /** The evidence document from the well-known route, for a certificate that carries none. */
  evidence?: unknown;
  /** Newest bindings seen per server, to refuse replayed older ones (shared across connections). */
  memory?: TlsBindingMemory;
  /** Which server this is, for {@link memory} (e.g. `host:port`). */
  origin?: string;
  /** The time of the check. Default now. */
  now?: Date;
}

/** An accepted server. */
export interface AttestedTlsResult {
  preimage: TlsBindingPreimage;
  verdict: Verdict;
  anchors: AnchorUsed[];
}

const refuse = (code: ErrorCode, message: string): never => {
  throw new CmcpError(code, message);
};

/** The evidence document a certificate carries, parsed; or refuses. */
function evidenceOf(cert: px.X509Certificate, given: unknown) {
  let raw = given;
  if (raw === undefined) {
    const ext = cert.getExtension(OID_TCG_DICE_CMW);
    if (!ext)
      return refuse('TLS_EVIDENCE_MISSING', 'the server certificate carries no attested-TLS evidence');
    raw = decodeTlsEvidenceExtension(new Uint8Array(ext.value));
    if (raw === null)
      return refuse('TLS_EVIDENCE_MALFORMED', 'the evidence extension is not a cmcp CMW record');
  }
  const r = tlsEvidenceSchema.safeParse(raw);
  if (!r.success)
    return refuse(
      'TLS_EVIDENCE_MALFORMED',
      `not a ${TLS_EVIDENCE_PROFILE} document: ${r.error.issues[0]?.path.join('.') ?? ''}`,
    );
  return { doc: r.data, raw: raw as { binding: { preimage: TlsBindingPreimage } } };
}

/** Freshness: certificate validity, the binding's window, the client's maximum age. */
function checkTimes(cert: px.X509Certificate, p: TlsBindingPreimage, o: AttestedTlsOptions, now: Date): void {
  const skew = (o.clockSkewS ?? 300) * 1000;
  const t = now.getTime();
  if (t > cert.notAfter.getTime() + skew || t + skew < cert.notBefore.getTime())
    refuse(
      'TLS_EVIDENCE_EXPIRED',
      `the certificate is valid ${cert.notBefore.toISOString()}..${cert.notAfter.toISOString()}`,
    );
  const issued = Date.parse(p.issued_at);
  if (t > Date.parse(p.not_after) + skew)
    refuse('TLS_EVIDENCE_EXPIRED', `the binding expired at ${p.not_after}`);
  if (issued > t + skew)
    refuse('TLS_EVIDENCE_EXPIRED', `the binding is issued in the future (${p.issued_at})`);
  const maxAge = (o.maxAgeS ?? 172_800) * 1000;
  if (t - issued > maxAge + skew)
    refuse('TLS_EVIDENCE_STALE', `the binding was issued at ${p.issued_at}, older than ${maxAge / 1000} s`);
}

/** The pins on what the gateway runs. */
function checkPins(p: TlsBindingPreimage, o: AttestedTlsOptions): void {
  const expected = o.gatewayMeasurements ?? o.referenceValues?.gateway?.measurements;
  if (!expected?.length)
    refuse(
      'TLS_MEASUREMENT_MISMATCH',
      'no expected gateway measurement is pinned: nothing says which gateway to trust',
    );
  if (p.gateway_measurement === null || !expected?.includes(p.gateway_measurement))
    refuse(
      'TLS_MEASUREMENT_MISMATCH',
      `the binding names gateway_measurement ${String(p.gateway_measurement)}`,
    );
  if (o.policyBundleHash !== undefined && p.policy_bundle_hash !== o.policyBundleHash)
    refuse('TLS_POLICY_MISMATCH', `the binding names policy_bundle_hash ${String(p.policy_bundle_hash)}`);
  if (o.catalogHash !== undefined && p.catalog_hash !== o.catalogHash)
    refuse('TLS_CATALOG_MISMATCH', `the binding names catalog_hash ${String(p.catalog_hash)}`);
}

/**
 * Checks a server's leaf certificate for attested TLS. Call it before sending anything.
 * @param certDer the leaf certificate, DER (node:tls `getPeerCertificate().raw`).
 * @returns the accepted binding and the evidence verdict.
 * @throws CmcpError with a code of ATTESTED_TLS_ERRORS (or CERT_MALFORMED) when the server is refused.
 */
export function verifyAttestedCertificate(
  certDer: Uint8Array,
  o: AttestedTlsOptions = {},
): AttestedTlsResult {
  let cert: px.X509Certificate;
  try {
    cert = new px.X509Certificate(new Uint8Array(certDer));
  } catch {
    return refuse('CERT_MALFORMED', 'the server certificate is not DER X.509');
  }
  const now = o.now ?? new Date();
  const { doc, raw } = evidenceOf(cert, o.evidence);
  const p = doc.binding.preimage as TlsBindingPreimage;
  if (p.domain !== 'cmcp.tls-binding' || p.version !== 1)
    refuse('TLS_BINDING_INVALID', 'the preimage is not cmcp.tls-binding version 1');
  if (spkiSha256(new Uint8Array(cert.publicKey.rawData)) !== p.spki_sha256)
    refuse('TLS_KEY_NOT_BOUND', "the evidence binds another key than this certificate's");
  if (p.key_origin === 'file' && !o.allowFileKey)
    refuse('TLS_KEY_NOT_GENERATED', 'the bound key came from files, not from the gateway process');
  checkTimes(cert, p, o, now);
  let rd: Buffer;
  try {
    if (b64u(jwkThumbprint(doc.cnf.jwk as Ed25519Jwk)) !== p.key_thumbprint) throw new Error('thumbprint');
    rd = reportData(jwkThumbprint(doc.cnf.jwk as Ed25519Jwk), tlsBindingDigest(raw.binding.preimage));
  } catch {
    return refuse(
      'TLS_BINDING_INVALID',
      'key_thumbprint is not the thumbprint of cnf.jwk, or the preimage does not canonicalise',
    );
  }
  const ev = doc.evidence;
  if (!tryB64u(ev.report_data)?.equals(rd))
    refuse('TLS_BINDING_INVALID', 'evidence.report_data is not key_thumbprint ‖ SHA-256(JCS(preimage))');
  if (ev.status === 'absent')
    refuse('TLS_EVIDENCE_ABSENT', `the gateway could not bind its TLS key (${String(ev.reason)})`);
  const kind = evidenceKind(ev.provider);
  if (!kind?.inClaim(ev)) return refuse('TLS_EVIDENCE_INVALID', `no checkable ${ev.provider} evidence`);
  const r = kind.fromClaim(ev, rd, {
    trustStore: o.trustStore ?? EMPTY_TRUST_STORE,
    at: now,
    ...(o.referenceValues ? { referenceValues: o.referenceValues } : {}),
  });
  const failed = r.checks.find((c) => c.status === 'fail');
  if (failed)
    refuse('TLS_EVIDENCE_INVALID', `${failed.id} ${failed.reason_code}: ${failed.detail.slice(0, 160)}`);
  const measured = (ev.measurement as { digest?: unknown } | undefined)?.digest;
  if (measured !== undefined && measured !== p.gateway_measurement)
    refuse('TLS_BINDING_INVALID', 'the evidence measures another gateway than the preimage names');
  const verdict = computeVerdict(r.checks);
  if (verdict !== 'hardware-attested' && !(verdict === 'hardware-unanchored' && o.allowUnanchored))
    refuse('TLS_EVIDENCE_UNANCHORED', `the evidence is ${verdict}: it chains to no pinned root`);
  checkPins(p, o);
  o.memory?.accept(o.origin ?? '', p);
  return { preimage: p, verdict, anchors: r.anchors };
}

export { TlsBindingMemory };
