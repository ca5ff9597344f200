/**
 * X.509 for the verifier: strict PEM/DER input, parsing through node:crypto (signatures,
 * validity, issuer match) and @peculiar/x509 (extensions), and chain validation to a pinned
 * root with CA and end-entity rules. Everything here is synchronous.
 *
 * Parsing is cached by the SHA-256 of the DER (parsing is a pure function of the bytes), so
 * the same vendor certificates arriving with every report are parsed once.
 */
import 'reflect-metadata';
import { type KeyObject, X509Certificate as NodeCert } from 'node:crypto';
import * as px from '@peculiar/x509';
import * as asn1js from 'asn1js';
import { sha256hex } from './crypto/hash.js';
import { CmcpError } from './errors/index.js';
import type { AnchorUsed, ReasonCode } from './result.js';
import { colonFingerprint, type TrustRoot } from './trust.js';

/** A parsed certificate: both views, its DER and fingerprints. */
export interface Cert {
  der: Buffer;
  /** Lowercase hex SHA-256 of the DER. */
  sha256: string;
  node: NodeCert;
  px: px.X509Certificate;
  subject: string;
  notBefore: Date;
  notAfter: Date;
}

/** A certificate or chain that cannot be used; `code` is a stable reason. */
export class CertError extends CmcpError {
  declare readonly code: 'CERT_MALFORMED' | 'CHAIN_NOT_SUPPLIED' | 'AK_CHAIN_MALFORMED';

  constructor(code: 'CERT_MALFORMED' | 'CHAIN_NOT_SUPPLIED' | 'AK_CHAIN_MALFORMED', message: string) {
    super(code, message);
    this.name = 'CertError';
  }
}

const CACHE_MAX = 512;
const certCache = new Map<string, Cert>();
const linkCache = new Map<string, boolean>();

function remember<K, V>(map: Map<K, V>, k: K, v: V): V {
  if (map.size >= CACHE_MAX) {
    const first = map.keys().next();
    if (!first.done) map.delete(first.value);
  }
  map.set(k, v);
  return v;
}

export { sha256hex };

/**
 * Parses one DER certificate.
 * @throws CertError CERT_MALFORMED when either parser refuses it, or it has trailing bytes.
 */
export function parseCert(der: Uint8Array): Cert {
  const buf = Buffer.from(der);
  const sha256 = sha256hex(buf);
  const hit = certCache.get(sha256);
  if (hit) return hit;
  let node: NodeCert;
  let pc: px.X509Certificate;
  try {
    node = new NodeCert(buf);
    pc = new px.X509Certificate(buf);
  } catch (err) {
    throw new CertError('CERT_MALFORMED', `not an X.509 certificate (${errText(err)})`);
  }
  // Both parsers tolerate bytes after the outer SEQUENCE (a PEM body whose '=' padding became a
  // base64 character decodes to one): the DER must end exactly where the certificate does.
  if (!Buffer.from(pc.rawData).equals(buf) || asn1js.fromBER(new Uint8Array(buf)).offset !== buf.length) {
    throw new CertError('CERT_MALFORMED', 'certificate DER has trailing or re-encoded bytes');
  }
  const cert: Cert = {
    der: buf,
    sha256,
    node,
    px: pc,
    subject: node.subject.replace(/\n/g, ', '),
    notBefore: new Date(node.validFrom),
    notAfter: new Date(node.validTo),
  };
  if (Number.isNaN(cert.notBefore.getTime()) || Number.isNaN(cert.notAfter.getTime())) {
    throw new CertError('CERT_MALFORMED', 'certificate validity dates do not parse');
  }
  return remember(certCache, sha256, cert);
}

const PEM_RE = /-----BEGIN ([A-Z0-9 ]+)-----\r?\n([\s\S]*?)-----END \1-----(\r?\n|$)/g;

/**
 * Strict PEM: every block must be `CERTIFICATE` (or `X509 CRL` when `label` says so), the body
 * base64 must re-encode to exactly the text given (64-character lines), and nothing but
 * whitespace may sit between or after blocks (nothing at all when `exact`, e.g. for
 * certification data inside a quote). Returns the DER of each block in order.
 * @throws CertError CERT_MALFORMED
 */
export function pemBlocks(text: string, label = 'CERTIFICATE', exact = false): Buffer[] {
  const out: Buffer[] = [];
  let last = 0;
  for (const m of text.matchAll(PEM_RE)) {
    const between = text.slice(last, m.index);
    if (exact ? between !== '' : between.trim() !== '') {
      throw new CertError('CERT_MALFORMED', 'text outside PEM blocks');
    }
    if (m[1] !== label) throw new CertError('CERT_MALFORMED', `PEM block is not ${label}`);
    const body = (m[2] ?? '').replace(/\r\n/g, '\n');
    const b64 = body.replace(/\n/g, '');
    if (!/^[A-Za-z0-9+/]+={0,2}$/.test(b64)) throw new CertError('CERT_MALFORMED', 'PEM body is not base64');
    const der = Buffer.from(b64, 'base64');
    const canonical = `${der
      .toString('base64')
      .match(/.{1,64}/g)
      ?.join('\n')}\n`;
    if (canonical !== body) throw new CertError('CERT_MALFORMED', 'PEM body is not canonical base64');
    out.push(der);
    last = (m.index ?? 0) + m[0].length;
  }
  const tail = text.slice(last);
  if (exact ? tail !== '' : tail.trim() !== '') {
    throw new CertError('CERT_MALFORMED', 'text after the last PEM block');
  }
  if (out.length === 0) throw new CertError('CERT_MALFORMED', `no ${label} PEM block`);
  return out;
}

/** Certificates from a file's bytes: DER (starts with SEQUENCE 0x30) or one or more PEM blocks. */
export function certsFromBytes(bytes: Uint8Array): Cert[] {
  const buf = Buffer.from(bytes);
  if (buf[0] === 0x30) return [parseCert(buf)];
  return pemBlocks(buf.toString('latin1')).map(parseCert);
}

/** True when `child`'s signature verifies under `issuer`'s key and the names/key ids match. */
export function issuedBy(child: Cert, issuer: Cert): boolean {
  const k = `${child.sha256}:${issuer.sha256}`;
  const hit = linkCache.get(k);
  if (hit !== undefined) return hit;
  let ok = false;
  try {
    ok = child.node.checkIssued(issuer.node) && child.node.verify(issuer.node.publicKey);
  } catch {
    ok = false;
  }
  return remember(linkCache, k, ok);
}

/** True when names match but the signature does not (distinguishes a forged link from a missing one). */
function namesMatch(child: Cert, issuer: Cert): boolean {
  try {
    return child.node.checkIssued(issuer.node);
  } catch {
    return false;
  }
}

/** Node public key of a certificate. */
export function certKey(c: Cert): KeyObject {
  return c.node.publicKey;
}

/** SHA-256 of a key's SubjectPublicKeyInfo DER. */
export function spkiSha256(key: KeyObject): string {
  return sha256hex(key.export({ format: 'der', type: 'spki' }));
}

/** Extended key usages of a certificate, or null when it has no EKU extension. */
export function extendedKeyUsages(c: Cert): string[] | null {
  const e = c.px.getExtension(px.ExtendedKeyUsageExtension);
  return e ? e.usages.map(String) : null;
}

/** Key usage flags (@peculiar/x509 KeyUsageFlags bits), or null when absent. */
export function keyUsage(c: Cert): number | null {
  const e = c.px.getExtension(px.KeyUsagesExtension);
  return e ? e.usages : null;
}

function basicConstraints(c: Cert): { ca: boolean; pathLength?: number } | null {
  const e = c.px.getExtension(px.BasicConstraintsExtension);
  return e ? { ca: e.ca, ...(e.pathLength === undefined ? {} : { pathLength: e.pathLength }) } : null;
}

/** KeyUsageFlags.digitalSignature. */
export const KU_DIGITAL_SIGNATURE = px.KeyUsageFlags.digitalSignature;

/** Raw extension value (DER of extnValue contents) by OID, or null. */
export function extensionValue(c: Cert, oid: string): Buffer | null {
  const e = c.px.extensions.find((x) => x.type === oid);
  return e ? Buffer.from(e.value) : null;
}

/** Leaf rules a caller imposes on top of "not a CA". @returns a problem, or null. */
export type LeafProfile = (leaf: Cert) => string | null;

/** Input of {@link validateChain}. */
export interface ChainInput {
  /** The leaf first, then any intermediates / root in any order. */
  certs: readonly Cert[];
  /** Pinned roots acceptable for this use. */
  roots: readonly TrustRoot[];
  /** Pinned roots of the store that are NOT acceptable here (to name a wrong anchor). */
  otherRoots?: readonly TrustRoot[];
  /** Verification time (inject a fixed clock in tests). */
  at: Date;
  /** Extra end-entity rules. */
  leafProfile?: LeafProfile;
  /** Label for details, e.g. "AK", "VCEK", "PCK". */
  what: string;
  /** `used_for` of the anchor. */
  usedFor: string;
}

/** Outcome of {@link validateChain}. */
export type ChainResult =
  | { status: 'anchored'; path: Cert[]; anchor: AnchorUsed; root: TrustRoot; detail: string }
  | { status: 'unpinned'; path: Cert[]; code: ReasonCode; detail: string }
  | { status: 'invalid'; path: Cert[]; code: ReasonCode; detail: string };

const MAX_DEPTH = 6;

function shortName(c: Cert): string {
  const cn = /CN=([^,\n]+)/.exec(c.node.subject)?.[1];
  return JSON.stringify((cn ?? c.subject).slice(0, 60));
}

/**
 * Builds the path leaf → … → pinned root from the supplied certificates and validates it:
 * every link's signature and issuer name, CA rules on issuers (basicConstraints cA, keyUsage
 * keyCertSign when present, pathLen), validity of every certificate at `at`, the end-entity
 * rules on the leaf (not a CA; `leafProfile`), and the anchor: the path ends at a certificate
 * whose SHA-256 is pinned in `roots`.
 *
 * - `anchored`: everything holds.
 * - `unpinned`: the path is valid up to a self-signed root that is not pinned for this use
 *   (ROOT_NOT_PINNED, or ANCHOR_PURPOSE_MISMATCH when pinned for another use), or it passes a
 *   pinned certificate that is not self-signed and whose entry does not say
 *   `anchor: intermediate` (ANCHOR_NOT_ROOT) — pinning an intermediate anchors nothing unless
 *   the store says so explicitly; then the anchor is marked `intermediate` (a warning).
 * - `invalid`: anything else (CHAIN_INCOMPLETE, CHAIN_SIGNATURE_INVALID, CHAIN_CA_INVALID,
 *   CERT_NOT_VALID_AT_TIME, END_ENTITY_INVALID).
 */
export function validateChain(input: ChainInput): ChainResult {
  const [leaf, ...pool] = input.certs;
  if (!leaf) return { status: 'invalid', path: [], code: 'CHAIN_NOT_SUPPLIED', detail: 'no certificates' };
  const pinned = new Map(input.roots.map((r) => [r.sha256, r]));
  const other = new Map((input.otherRoots ?? []).map((r) => [r.sha256, r]));
  const path: Cert[] = [leaf];
  let root: TrustRoot | undefined;
  let end: 'pinned' | 'self-signed' | null = null;
  // A pinned certificate anchors only as a root (self-signed) unless its entry says
  // `anchor: intermediate`; a pinned intermediate without it is walked past like any other.
  let pinnedNotRoot: TrustRoot | undefined;
  for (let cur = leaf; ; ) {
    const hit = pinned.get(cur.sha256);
    if (hit && (hit.anchor === 'intermediate' || issuedBy(cur, cur))) {
      root = hit;
      end = 'pinned';
      break;
    }
    if (hit) pinnedNotRoot ??= hit;
    if (path.length > MAX_DEPTH) {
      return { status: 'invalid', path, code: 'CHAIN_CA_INVALID', detail: `chain longer than ${MAX_DEPTH}` };
    }
    const issuer = pool.find((c) => !path.includes(c) && issuedBy(cur, c));
    if (!issuer) {
      if (cur !== leaf && issuedBy(cur, cur)) {
        end = 'self-signed';
        break;
      }
      const forged = pool.some((c) => c !== cur && namesMatch(cur, c));
      if (pinnedNotRoot && !forged) return notRoot(path, pinnedNotRoot);
      return {
        status: 'invalid',
        path,
        code: forged ? 'CHAIN_SIGNATURE_INVALID' : 'CHAIN_INCOMPLETE',
        detail: forged
          ? `the signature of ${shortName(cur)} does not verify under its named issuer`
          : `no supplied certificate issued ${shortName(cur)}: the chain to a pinned root is incomplete`,
      };
    }
    const bc = basicConstraints(issuer);
    const ku = keyUsage(issuer);
    const below = path.length - 1; // CA certificates below this issuer (excluding the leaf)
    if (!bc?.ca) {
      return {
        status: 'invalid',
        path,
        code: 'CHAIN_CA_INVALID',
        detail: `${shortName(issuer)} is not a CA`,
      };
    }
    if (ku !== null && (ku & px.KeyUsageFlags.keyCertSign) === 0) {
      return {
        status: 'invalid',
        path,
        code: 'CHAIN_CA_INVALID',
        detail: `${shortName(issuer)} lacks keyUsage keyCertSign`,
      };
    }
    if (bc.pathLength !== undefined && below > bc.pathLength) {
      return {
        status: 'invalid',
        path,
        code: 'CHAIN_CA_INVALID',
        detail: `${shortName(issuer)} pathLen ${bc.pathLength} exceeded`,
      };
    }
    path.push(issuer);
    cur = issuer;
  }
  // validity of every certificate on the path
  for (const c of path) {
    if (input.at < c.notBefore || input.at > c.notAfter) {
      return {
        status: 'invalid',
        path,
        code: 'CERT_NOT_VALID_AT_TIME',
        detail: `${shortName(c)} is valid ${c.notBefore.toISOString()} to ${c.notAfter.toISOString()}, not at ${input.at.toISOString()}`,
      };
    }
  }
  // end-entity rules
  if (path.length > 1 || end !== 'pinned') {
    const bc = basicConstraints(leaf);
    if (bc?.ca) {
      return {
        status: 'invalid',
        path,
        code: 'END_ENTITY_INVALID',
        detail: `${input.what} certificate is a CA`,
      };
    }
    const problem = input.leafProfile?.(leaf);
    if (problem) return { status: 'invalid', path, code: 'END_ENTITY_INVALID', detail: problem };
  }
  const top = path[path.length - 1] as Cert;
  const names = path.map(shortName).join(' ← ');
  if (end === 'pinned' && root) {
    return {
      status: 'anchored',
      path,
      root,
      anchor: {
        name: root.name,
        sha256_fingerprint: colonFingerprint(root.sha256),
        used_for: input.usedFor,
        ...(root.anchor === 'intermediate' ? { intermediate: true } : {}),
      },
      detail: `${names}; valid at ${input.at.toISOString()}; ${
        root.anchor === 'intermediate'
          ? `anchored at the INTERMEDIATE pinned as ${JSON.stringify(root.name)} (anchor: intermediate)`
          : `root pinned as ${JSON.stringify(root.name)}`
      }`,
    };
  }
  if (pinnedNotRoot) return notRoot(path, pinnedNotRoot);
  const elsewhere = other.get(top.sha256);
  return {
    status: 'unpinned',
    path,
    code: elsewhere ? 'ANCHOR_PURPOSE_MISMATCH' : 'ROOT_NOT_PINNED',
    detail: elsewhere
      ? `${names}; the root is pinned as ${JSON.stringify(elsewhere.name)} (${elsewhere.purpose}${elsewhere.product ? ` ${elsewhere.product}` : ''}), not for this use`
      : `${names}; root SHA-256 ${colonFingerprint(top.sha256)} is not pinned`,
  };
}

/** A path through a pinned certificate that is not self-signed and not marked `anchor: intermediate`. */
function notRoot(path: Cert[], entry: TrustRoot): ChainResult {
  return {
    status: 'unpinned',
    path,
    code: 'ANCHOR_NOT_ROOT',
    detail: `${path.map(shortName).join(' ← ')}; ${JSON.stringify(entry.name)} is pinned but is not self-signed: a trust-store entry anchors only as a root unless it says anchor: intermediate`,
  };
}

function errText(err: unknown): string {
  return (err instanceof Error ? err.message : String(err)).slice(0, 100);
}
