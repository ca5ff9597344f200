/**
 * Which upstream tool names the gateway can serve. A name holding a control character (Unicode
 * Cc: U+0000–U+001F, U+007F, U+0080–U+009F), an invisible or direction-changing character
 * (Unicode Cf: zero-width U+200B–U+200F, bidi embeddings and overrides U+202A–U+202E, U+2060–U+2064,
 * bidi isolates U+2066–U+2069, U+FEFF and the rest of Cf), a line or paragraph separator (U+2028,
 * U+2029) or a lone surrogate is refused wherever a tool name enters: a pinned catalog refuses to
 * load (CATALOG_INVALID), and a live upstream's tool of that name is not listed or routed
 * (src/upstream/pool.ts). U+0000 cannot be stored in PostgreSQL text, a lone surrogate cannot be
 * carried by JCS (RFC 8785 §3.2.2.2), the other control characters are terminal escapes,
 * newlines and bells that agents, logs and operators' terminals would otherwise receive, and
 * format characters and separators let a name read as another one to a person (Trojan Source,
 * CVE-2021-42574); SEP-986 tool names hold none of them.
 */
import { assertCanonicalizable } from '@cmcp/verify/formats';

const CONTROL = /\p{Cc}/u;
/** Unicode Cf (format: zero-width, bidi controls, BOM) and Zl/Zp (U+2028, U+2029). */
const INVISIBLE = /[\p{Cf}\p{Zl}\p{Zp}]/u;

/** `U+XXXX` of the first code point of `ch`. */
const codePoint = (ch: string): string =>
  `U+${(ch.codePointAt(0) as number).toString(16).toUpperCase().padStart(4, '0')}`;

/**
 * Why a tool of this name cannot be served, or null when it can. The reason names the first
 * offending code point as `U+XXXX` (never the character itself).
 */
export function toolNameFault(name: string): string | null {
  const m = CONTROL.exec(name);
  if (m) return `its name holds the control character ${codePoint(m[0])}`;
  const f = INVISIBLE.exec(name);
  if (f) return `its name holds the invisible or direction-changing character ${codePoint(f[0])}`;
  try {
    assertCanonicalizable(name); // the check call/ingress.ts makes of the name a call carries
  } catch {
    return 'its name holds a lone surrogate, which JCS cannot carry';
  }
  return null;
}
