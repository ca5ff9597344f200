/**
 * Which upstream tool names the gateway can serve. A name holding a control character (Unicode
 * Cc: U+0000–U+001F, U+007F, U+0080–U+009F) or a lone surrogate is refused wherever a tool
 * name enters: a pinned catalog refuses to load (CATALOG_INVALID), and a live upstream's tool
 * of that name is not listed or routed (src/upstream/pool.ts). U+0000 cannot be stored in
 * PostgreSQL text, a lone surrogate cannot be carried by JCS (RFC 8785 §3.2.2.2), and the
 * other control characters are terminal escapes, newlines and bells that agents, logs and
 * operators' terminals would otherwise receive; SEP-986 tool names hold none of them.
 */
import { assertCanonicalizable } from '@cmcp/verify/format/canonical';

const CONTROL = /\p{Cc}/u;

/**
 * Why a tool of this name cannot be served, or null when it can. The reason names the first
 * offending code point as `U+XXXX` (never the character itself).
 */
export function toolNameFault(name: string): string | null {
  const m = CONTROL.exec(name);
  if (m) {
    const cp = (m[0].codePointAt(0) as number).toString(16).toUpperCase().padStart(4, '0');
    return `its name holds the control character U+${cp}`;
  }
  try {
    assertCanonicalizable(name); // the check call/ingress.ts makes of the name a call carries
  } catch {
    return 'its name holds a lone surrogate, which JCS cannot carry';
  }
  return null;
}
