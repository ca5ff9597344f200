/**
 * Attested TLS (docs/spec/attested-tls.md): the gateway binds the SHA-256 of its TLS key's
 * SubjectPublicKeyInfo into hardware evidence with the `cmcp.tls-binding` preimage (the session
 * binding's construction under another domain), and carries that evidence in its certificate as
 * a RATS Conceptual Message Wrapper (draft-ietf-rats-msg-wrap §6, "CMW in X.509 extensions")
 * under the TCG DICE OID `tcg-dice-conceptual-message-wrapper` (TCG DICE Attestation
 * Architecture v1.1 §6.1.8, 2.23.133.5.4.9). Shared by the gateway (which writes) and the
 * verifier (which reads).
 */
import * as asn1js from 'asn1js';
import type { Ed25519Jwk } from './binding.js';
import { b64u, canonicalJson, fromB64u, sha256 } from './canonical.js';
import type { EvidenceJson } from './claim.js';

/** tcg-dice-conceptual-message-wrapper (TCG DICE Attestation Architecture v1.1 §6.1.8). */
export const OID_TCG_DICE_CMW = '2.23.133.5.4.9';
/** The CMW record's type: the JSON document {@link TlsEvidence}. */
export const TLS_EVIDENCE_MEDIA_TYPE = 'application/vnd.cmcp.tls-evidence+json';
/** Where a gateway serves the same document for clients that cannot read certificate extensions. */
export const TLS_EVIDENCE_PATH = '/.well-known/cmcp/tls-evidence';
/** The document's profile. */
export const TLS_EVIDENCE_PROFILE = 'cmcp.tls-evidence/1';

/** What a gateway binds about its TLS key (docs/spec/attested-tls.md#binding). */
export interface TlsBindingPreimage {
  domain: 'cmcp.tls-binding';
  version: 1;
  /** The gateway instance (or replica id) that holds the key. */
  instance_id: string;
  /** base64url SHA-256 of the DER SubjectPublicKeyInfo (RFC 5280 §4.1.2.7) of the TLS key. */
  spki_sha256: string;
  /** `generated`: made in the gateway process and never exported; `file`: the operator's key. */
  key_origin: 'generated' | 'file';
  /** 0 for the key made at start, +1 at each rotation of this process. */
  sequence: number;
  /** RFC 3339 UTC, the gateway's clock when the binding was made. */
  issued_at: string;
  /** RFC 3339 UTC, after which a client refuses the binding (the certificate's notAfter). */
  not_after: string;
  /** base64url RFC 7638 thumbprint of the gateway key (docs/spec/binding.md#gateway-key). */
  key_thumbprint: string;
  gateway_measurement: string | null;
  policy_bundle_hash: string | null;
  catalog_hash: string | null;
}

/** The evidence document: in the certificate's CMW extension and at {@link TLS_EVIDENCE_PATH}. */
export interface TlsEvidence {
  profile: typeof TLS_EVIDENCE_PROFILE;
  /** The gateway key whose thumbprint is the first half of REPORT_DATA. */
  cnf: { jwk: Ed25519Jwk };
  binding: { preimage: TlsBindingPreimage };
  /** Hardware evidence over REPORT_DATA = key_thumbprint ‖ {@link tlsBindingDigest}. */
  evidence: EvidenceJson;
}

/** TLS binding digest: SHA-256(JCS(preimage)), 32 bytes. */
export function tlsBindingDigest(preimage: TlsBindingPreimage): Buffer {
  return sha256(canonicalJson(preimage));
}

/** SHA-256 of a DER SubjectPublicKeyInfo, base64url (the preimage's `spki_sha256`). */
export function spkiSha256(spkiDer: Uint8Array): string {
  return b64u(sha256(spkiDer));
}

/**
 * The extension value: DER of `CMW ::= CHOICE { json UTF8String, … }` holding the JSON CMW
 * record `[media-type, base64url(JCS(doc))]` (draft-ietf-rats-msg-wrap §3.1 and §6).
 */
export function encodeTlsEvidenceExtension(doc: TlsEvidence): Buffer {
  const record = JSON.stringify([TLS_EVIDENCE_MEDIA_TYPE, b64u(Buffer.from(canonicalJson(doc), 'utf8'))]);
  return Buffer.from(new asn1js.Utf8String({ value: record }).toBER(false));
}

/**
 * Reads the extension value back.
 * @returns the parsed document (its members are not checked here), or null when the value is
 *   not a DER UTF8String holding a JSON CMW record of {@link TLS_EVIDENCE_MEDIA_TYPE}.
 */
export function decodeTlsEvidenceExtension(value: Uint8Array): unknown {
  try {
    const bytes = new Uint8Array(value);
    const parsed = asn1js.fromBER(bytes.buffer.slice(bytes.byteOffset, bytes.byteOffset + bytes.length));
    if (parsed.offset !== bytes.length || !(parsed.result instanceof asn1js.Utf8String)) return null;
    const record = JSON.parse(parsed.result.getValue()) as unknown;
    if (!Array.isArray(record) || record[0] !== TLS_EVIDENCE_MEDIA_TYPE || typeof record[1] !== 'string')
      return null;
    return JSON.parse(fromB64u(record[1]).toString('utf8')) as unknown;
  } catch {
    return null;
  }
}
