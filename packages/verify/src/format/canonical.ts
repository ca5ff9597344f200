/**
 * Canonical JSON (RFC 8785, JCS) for everything cmcp hashes or signs.
 *
 * Serialisation is done by the maintained `canonicalize` library; this module only
 * adds the input checks cmcp's profile needs (docs/spec/canonical-json.md) and a typed error, so that
 * nothing un-canonicalisable is ever silently replaced and hashed.
 */
import canonicalize from 'canonicalize';
import { digest, digestUtf8 } from '../crypto/hash.js';
import { CmcpError } from '../errors/index.js';

/** Thrown when a value cannot be canonicalised under cmcp's JCS profile. `code` is stable. */
export class CanonicalJsonError extends CmcpError {
  declare readonly code: 'CANONICAL_JSON_INVALID';
  constructor(
    message: string,
    /** JSON pointer-ish path of the offending member, e.g. `/arguments/a`. */
    readonly path: string,
  ) {
    super('CANONICAL_JSON_INVALID', `${message} at ${path || '/'}`);
    this.name = 'CanonicalJsonError';
  }
}

/** Largest integer JCS/ECMAScript can carry exactly (2^53 − 1). */
const MAX_SAFE = Number.MAX_SAFE_INTEGER;

/** Deepest nesting of arrays/objects accepted; deeper input is refused, not recursed into. */
export const MAX_JSON_DEPTH = 128;

/** ES2024 `String.prototype.isWellFormed` (Node 20+, current browsers): native, no JS loop. */
const nativeWellFormed = (String.prototype as { isWellFormed?: () => boolean }).isWellFormed;

function hasLoneSurrogate(s: string): boolean {
  if (nativeWellFormed) return !nativeWellFormed.call(s);
  for (let i = 0; i < s.length; i++) {
    const c = s.charCodeAt(i);
    if (c >= 0xd800 && c <= 0xdbff) {
      const n = s.charCodeAt(i + 1);
      if (!(n >= 0xdc00 && n <= 0xdfff)) return true;
      i++;
    } else if (c >= 0xdc00 && c <= 0xdfff) {
      return true;
    }
  }
  return false;
}

/**
 * Checks that `value` is plain JSON data that JCS can represent exactly.
 * Refuses: lone surrogates (RFC 8785 §3.2.2.2), NaN/Infinity, BigInt, functions, symbols,
 * `undefined` inside arrays, non-plain objects (Date, Map, Buffer, class instances),
 * nesting deeper than {@link MAX_JSON_DEPTH}, and — when `integersExact` is set — integers
 * outside ±(2^53 − 1) (docs/spec/canonical-json.md).
 * `undefined` object members are dropped exactly as JSON.stringify drops them.
 *
 * @throws CanonicalJsonError naming the path of the first offending member.
 */
export function assertCanonicalizable(
  value: unknown,
  opts: { integersExact?: boolean } = {},
  path = '',
  depth = 0,
): void {
  switch (typeof value) {
    case 'string':
      if (hasLoneSurrogate(value)) throw new CanonicalJsonError('lone surrogate in string', path);
      return;
    case 'boolean':
      return;
    case 'number':
      if (!Number.isFinite(value)) throw new CanonicalJsonError('NaN or Infinity is not JSON', path);
      if (opts.integersExact && Number.isInteger(value) && Math.abs(value) > MAX_SAFE)
        throw new CanonicalJsonError('integer outside ±(2^53−1) cannot be carried exactly', path);
      return;
    case 'bigint':
      throw new CanonicalJsonError('BigInt is not JSON', path);
    case 'object': {
      if (value === null) return;
      if (depth >= MAX_JSON_DEPTH)
        throw new CanonicalJsonError(`nested deeper than ${MAX_JSON_DEPTH} levels`, path);
      if (Array.isArray(value)) {
        value.forEach((v, i) => {
          if (v === undefined) throw new CanonicalJsonError('undefined array element', `${path}/${i}`);
          assertCanonicalizable(v, opts, `${path}/${i}`, depth + 1);
        });
        return;
      }
      const proto = Object.getPrototypeOf(value);
      if (proto !== Object.prototype && proto !== null)
        throw new CanonicalJsonError('not a plain JSON object', path);
      for (const [k, v] of Object.entries(value as Record<string, unknown>)) {
        if (hasLoneSurrogate(k)) throw new CanonicalJsonError('lone surrogate in member name', path);
        if (v === undefined) continue;
        assertCanonicalizable(v, opts, `${path}/${k}`, depth + 1);
      }
      return;
    }
    default:
      throw new CanonicalJsonError(`${typeof value} is not JSON`, path);
  }
}

/**
 * RFC 8785 canonical text of `value` (a JS string; encode as UTF-8 for hashing).
 * Member order is UTF-16 code-unit order (RFC 8785 §3.2.3); numbers are printed as
 * ECMAScript does (§3.2.2.3).
 * @throws CanonicalJsonError when `value` fails {@link assertCanonicalizable}.
 */
export function canonicalJson(value: unknown, opts: { integersExact?: boolean } = {}): string {
  assertCanonicalizable(value, opts);
  const text = canonicalize(value);
  if (typeof text !== 'string') throw new CanonicalJsonError('value has no JSON form', '');
  return text;
}

/** SHA-256 of a string's UTF-8 bytes or of raw bytes; 32-byte Buffer. */
export function sha256(data: string | Uint8Array): Buffer {
  return typeof data === 'string' ? digestUtf8('sha256', data) : digest('sha256', data);
}

/** Lowercase hex SHA-256 (64 chars) of a string's UTF-8 bytes or of raw bytes. */
export function sha256Hex(data: string | Uint8Array): string {
  return sha256(data).toString('hex');
}

/** `sha256:<lowercase hex>` digest string (docs/spec/canonical-json.md). */
export function sha256Tagged(data: string | Uint8Array): string {
  return `sha256:${sha256Hex(data)}`;
}

/** `sha256:<hex>` of JCS(value). @throws CanonicalJsonError */
export function jcsDigest(value: unknown): string {
  return sha256Tagged(canonicalJson(value));
}

/** Node's Buffer has 'base64url'; the browser bundle's (the `buffer` package) has not. */
const NATIVE_B64URL = Buffer.isEncoding('base64url');

/** base64url without padding (RFC 4648 §5), as used throughout claims. */
export function b64u(bytes: Uint8Array): string {
  if (NATIVE_B64URL) return Buffer.from(bytes).toString('base64url');
  return Buffer.from(bytes).toString('base64').replace(/\+/g, '-').replace(/\//g, '_').replace(/=+$/, '');
}

/**
 * Strict base64url decode: refuses padding, `+`/`/` and any other non-alphabet character
 * instead of skipping it the way Buffer.from does.
 * @throws Error with `code = 'BASE64URL_INVALID'`.
 */
export function fromB64u(text: string): Buffer {
  if (typeof text !== 'string' || !/^[A-Za-z0-9_-]*$/.test(text) || text.length % 4 === 1) {
    throw Object.assign(new Error('not unpadded base64url'), { code: 'BASE64URL_INVALID' });
  }
  return Buffer.from(text, NATIVE_B64URL ? 'base64url' : 'base64'); // `buffer` reads -_ in base64
}
