/**
 * Upstream credentials never reach an agent (SECURITY.md, "Upstream secrets leaking into logs,
 * evidence or errors"): every message an upstream sends back passes through
 * {@link redactTransport} before the SDK, the relay, the audit recorder or a log sees it, and
 * every configured secret in it is replaced by `[redacted]`.
 *
 * What counts as a secret (registered at start-up by ./credentials.ts): the value of each
 * configured HTTP header (from an environment variable or a file), the contents of an mTLS
 * `client_key` and `client_cert` file, the userinfo password and secret-named query values of
 * an HTTP upstream's `url`, and a stdio upstream's `env` values that are secrets (marked so, or
 * named like a credential, and a URL value's password: `envSecrets`). The registry is
 * process-wide: a secret of one upstream is redacted from what any upstream sends.
 *
 * Each secret is looked for in the forms an echo would take: as is; escaped inside a JSON
 * string (`\"`, `\\`, `\/`, `\n`), up to three strings deep (JSON text in a text member of a
 * JSON text in …); base64 and base64url of the secret anywhere in a longer encoded text
 * (`Bearer …`, `user:…`: the characters that depend on the secret alone, at each of the three
 * byte offsets); for a value that is itself base64 of `user:password` (HTTP Basic), the decoded
 * text and the password. A PEM file is also looked for line by line (each base64 line of 16
 * characters or more), so that a partial or re-wrapped echo is caught. Each of these forms is
 * matched with any of its characters other than ASCII letters and digits either literal or
 * percent-encoded (the `%HH` escapes of its UTF-8 bytes, hex in either case; a space also as
 * `+`): every percent-encoder (encodeURIComponent, strict RFC 3986, Python's `quote`, form
 * encoding, upper- or lower-case hex, partial escaping) is one pattern, not a list of variants.
 *
 * Short values: a secret under {@link MIN_SECRET_CHARS} characters is not redacted (replacing
 * every occurrence of a 5-letter value would blank out ordinary words in results), nor is an
 * encoded form under that length. Not covered: `\uXXXX` escapes, JSON nested deeper, letters or
 * digits percent-encoded, percent-encoding twice, base64 of a percent-encoded secret, other
 * encodings (hex, HTML entities, compression, encryption) and a numeric secret sent as a JSON
 * number. This guards against an
 * upstream echoing a credential by accident; an upstream that means to leak one it was given
 * can always re-encode it.
 */
import type { Transport } from '@modelcontextprotocol/sdk/shared/transport.js';
import type { JSONRPCMessage } from '@modelcontextprotocol/sdk/types.js';

/** What replaces a secret. */
export const REDACTED = '[redacted]';
/** Shortest secret (and encoded form of one) that is redacted, characters. */
export const MIN_SECRET_CHARS = 8;
/** Shortest letters-and-digits run worth a literal pre-scan ({@link Redactor}). */
const MIN_ANCHOR = 4;
/** Shortest base64 line of a PEM file looked for on its own, characters. */
const MIN_PEM_LINE = 16;
/**
 * Broad: environment variable names that may hold secrets, for the gateway's own variables
 * redacted from a stdio child's stderr in start-up errors (diagnose.ts). What a stdio upstream's
 * `env` registers for redaction is decided in ./credentials.ts, more narrowly.
 */
export const SECRET_NAME = /TOKEN|SECRET|PASSW|KEY|CREDENTIAL|AUTH|COOKIE|SESSION/i;

const secrets = new Set<string>();
const pems = new Set<string>();
let version = 0;
let built = -1;
let current: Redactor | null = null;

/** Registers a credential value (a header value, a stdio `env` value) to be redacted. */
export function registerSecret(value: string): void {
  if (value.length < MIN_SECRET_CHARS || secrets.has(value)) return;
  secrets.add(value);
  version++;
}

/** Registers the text of a PEM file (an mTLS client key or certificate) to be redacted. */
export function registerPem(text: string): void {
  if (pems.has(text)) return;
  pems.add(text);
  version++;
}

/**
 * The redactor of every secret registered so far (built once per set of secrets, then
 * reused), or null when none is: the caller then has nothing to do.
 */
export function secretRedactor(): Redactor | null {
  if (built !== version) {
    built = version;
    const needles = new Set<string>();
    for (const s of secrets) for (const n of secretForms(s)) needles.add(n);
    for (const p of pems) for (const n of pemForms(p)) needles.add(n);
    current = needles.size ? new Redactor([...needles]) : null;
  }
  return current;
}

/** The base64 characters that depend on `s` alone when it sits `k` bytes into a longer text. */
function base64Cores(s: string): string[] {
  const bytes = Buffer.from(s, 'utf8');
  const out: string[] = [];
  for (let k = 0; k < 3; k++) {
    const b64 = Buffer.concat([Buffer.alloc(k), bytes]).toString('base64');
    const core = b64.slice(Math.ceil((8 * k) / 6), Math.floor((8 * (k + bytes.length)) / 6));
    out.push(core, core.replace(/\+/g, '-').replace(/\//g, '_'));
  }
  return out;
}

/** Every form of one secret looked for (see the module comment), each percent-encoded or not. */
export function secretForms(s: string): string[] {
  if (s.length < MIN_SECRET_CHARS) return [];
  const out = new Set<string>([s]);
  // Escaped inside a JSON string, in JSON text inside a string, and once more.
  let json = s;
  for (let level = 0; level < 3; level++) {
    json = JSON.stringify(json).slice(1, -1);
    out.add(json);
    out.add(json.replace(/\//g, '\\/'));
  }
  for (const c of base64Cores(s)) out.add(c);
  // An HTTP Basic value (base64 of user:password): the decoded pair and the password too.
  if (s.length % 4 === 0 && /^[A-Za-z0-9+/]+={0,2}$/.test(s)) {
    const plain = Buffer.from(s, 'base64').toString('latin1');
    const colon = plain.indexOf(':');
    if (colon > 0 && /^[\x20-\x7e]+$/.test(plain))
      for (const p of [plain, plain.slice(colon + 1)])
        if (p !== s) for (const f of secretForms(p)) out.add(f);
  }
  return [...out].filter((n) => n.length >= MIN_SECRET_CHARS);
}

/** Every form of a PEM file looked for: the whole text's forms and each long base64 line. */
export function pemForms(text: string): string[] {
  const out = new Set<string>(secretForms(text.trim()));
  for (const raw of text.split(/\r?\n/)) {
    const line = raw.trim();
    if (line.length < MIN_PEM_LINE || !/^[A-Za-z0-9+/=]+$/.test(line)) continue;
    out.add(line);
    out.add(line.replace(/\+/g, '-').replace(/\//g, '_').replace(/=+$/, ''));
  }
  return [...out];
}

/** `%HH` for one byte, each hex letter in either case. */
function pctByte(b: number): string {
  const h = b.toString(16).toUpperCase().padStart(2, '0');
  return `%${h.replace(/[A-F]/g, (c) => `[${c}${c.toLowerCase()}]`)}`;
}

/**
 * A regular expression source matching `needle` with each character that is not an ASCII letter
 * or digit either literal or percent-encoded (its UTF-8 bytes as `%HH`, either hex case; a space
 * also `+`). Letters and digits stay literal: no encoder escapes them, and the pattern stays
 * as fast as a literal wherever it starts with one.
 */
export function percentTolerant(needle: string): string {
  let out = '';
  for (const ch of needle) {
    if (/^[A-Za-z0-9]$/.test(ch)) {
      out += ch;
      continue;
    }
    const pct = [...Buffer.from(ch, 'utf8')].map(pctByte).join('');
    const lit = ch.replace(/[.*+?^${}()|[\]\\/-]/g, '\\$&');
    out += ch === ' ' ? `(?: |\\+|${pct})` : `(?:${lit}|${pct})`;
  }
  return out;
}

/**
 * One precompiled matcher over a fixed set of needles, each matched literally or
 * percent-encoded ({@link percentTolerant}). Returns its input unchanged (the same object) when
 * nothing matched, so that a clean message costs one scan of its strings and no copy.
 */
export class Redactor {
  private readonly re: RegExp;
  /** Literal letters-and-digits runs one of which any match holds; null: none long enough. */
  private readonly anchors: RegExp | null;
  private readonly min: number;

  constructor(needles: string[]) {
    const sorted = [...new Set(needles)].sort((a, b) => b.length - a.length);
    // Longest first, so that a longer form is replaced whole rather than around a shorter one.
    this.re = new RegExp(sorted.map(percentTolerant).join('|'), 'g');
    // A percent-encoded form is never shorter than the literal one.
    this.min = sorted.at(-1)?.length ?? 0;
    // Letters and digits are never escaped, so each needle's longest run of them appears
    // literally in every match: a scan for those literals (as fast as before percent-tolerance)
    // clears a clean text without running the slower pattern.
    const runs = sorted.map((n) =>
      (n.match(/[A-Za-z0-9]+/g) ?? []).reduce((a, b) => (b.length > a.length ? b : a), ''),
    );
    this.anchors = runs.every((r) => r.length >= MIN_ANCHOR)
      ? new RegExp([...new Set(runs)].join('|'))
      : null;
  }

  /** `s` with every needle replaced by {@link REDACTED}. */
  text(s: string): string {
    if (s.length < this.min) return s;
    if (this.anchors !== null && !this.anchors.test(s)) return s;
    this.re.lastIndex = 0;
    if (!this.re.test(s)) return s;
    return s.replace(this.re, REDACTED);
  }

  /** A JSON value with every string (member names included) redacted; copied only where changed. */
  value<T>(v: T): T {
    if (typeof v === 'string') return this.text(v) as T;
    if (typeof v !== 'object' || v === null) return v;
    if (Array.isArray(v)) {
      let out: unknown[] | null = null;
      for (let i = 0; i < v.length; i++) {
        const r = this.value(v[i]);
        if (r !== v[i]) {
          out ??= v.slice();
          out[i] = r;
        }
      }
      return (out ?? v) as T;
    }
    const o = v as Record<string, unknown>;
    const keys = Object.keys(o);
    let out: Record<string, unknown> | null = null;
    for (let i = 0; i < keys.length; i++) {
      const k = keys[i] as string;
      const nk = this.text(k);
      const nv = this.value(o[k]);
      if (out === null && (nk !== k || nv !== o[k])) {
        out = {};
        for (let j = 0; j < i; j++) own(out, keys[j] as string, o[keys[j] as string]);
      }
      if (out !== null) own(out, nk, nv);
    }
    return (out ?? o) as T;
  }

  /** An Error (and its causes) with the secrets taken out of their messages, in place. */
  error<E>(e: E): E {
    let cur: unknown = e;
    for (let i = 0; i < 6 && cur instanceof Error; i++) {
      const m = this.text(cur.message);
      // An own member: some errors (DOMException) have a getter-only message on their prototype.
      if (m !== cur.message)
        Object.defineProperty(cur, 'message', { value: m, writable: true, configurable: true });
      cur = cur.cause;
    }
    return e;
  }
}

/** Sets an own enumerable member (a `__proto__` member name stays a member, as JSON.parse made it). */
function own(o: Record<string, unknown>, k: string, v: unknown): void {
  Object.defineProperty(o, k, { value: v, enumerable: true, writable: true, configurable: true });
}

/**
 * A message with no secret in it. One that cannot be checked (nested past the stack) does not
 * pass: a response becomes a JSON-RPC internal error, anything else is dropped (null).
 */
function cleanMessage(r: Redactor, m: JSONRPCMessage): JSONRPCMessage | null {
  try {
    return r.value(m);
  } catch {
    const id = (m as { id?: unknown }).id;
    if ('method' in m || (typeof id !== 'string' && typeof id !== 'number')) return null;
    return {
      jsonrpc: '2.0',
      id,
      error: { code: -32603, message: 'the upstream answer could not be checked for secrets' },
    };
  }
}

/**
 * Puts redaction between an upstream transport and everything above it: each message handed to
 * `onmessage` (responses, errors, notifications, server-to-client requests), each error handed
 * to `onerror` and each error `send` rejects with (an HTTP error body is quoted in its message).
 * Call after any other wrapper of `onmessage` (./answers.ts), so that redaction comes first.
 * Costs one registry check per message when no secret is configured.
 */
export function redactTransport(transport: Transport): void {
  interpose(transport, 'onmessage', (h) => (message, extra) => {
    const r = secretRedactor();
    if (r === null) return h(message, extra);
    const clean = cleanMessage(r, message);
    if (clean !== null) h(clean, extra);
  });
  interpose(transport, 'onerror', (h) => (e) => h(secretRedactor()?.error(e) ?? e));
  const send = transport.send.bind(transport);
  transport.send = (message, options) =>
    send(message, options).catch((e: unknown) => {
      throw secretRedactor()?.error(e) ?? e;
    });
}

/**
 * Replaces a handler property of `t` by one that hands what the transport reads through `wrap`,
 * keeping whatever the property did before (an accessor another wrapper defined, or a plain
 * value) for what the SDK assigns.
 */
function interpose<K extends 'onmessage' | 'onerror'>(
  t: Transport,
  key: K,
  wrap: (h: NonNullable<Transport[K]>) => NonNullable<Transport[K]>,
): void {
  const prev = Object.getOwnPropertyDescriptor(t, key);
  let value: Transport[K] = prev && !prev.get ? prev.value : undefined;
  let inner: Transport[K] | undefined;
  let wrapped: Transport[K] | undefined;
  Object.defineProperty(t, key, {
    configurable: true,
    enumerable: true,
    get: () => {
      const h = (prev?.get ? prev.get.call(t) : value) as Transport[K];
      if (!h) return h;
      if (h !== inner) {
        inner = h;
        wrapped = wrap(h as NonNullable<Transport[K]>);
      }
      return wrapped;
    },
    set: (h: Transport[K]) => {
      if (prev?.set) prev.set.call(t, h);
      else value = h;
    },
  });
}
