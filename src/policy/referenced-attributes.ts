/**
 * Which entity attribute names a policy set can read, so that a request's Tool carries only
 * those (and the ones the schema requires; ./engine.ts)
 * (cedar-wasm parses every attribute of every entity on every request, ~5 µs each: with the
 * example bundle, the Tool entity's three unread attributes are ~15 µs of ~200 µs).
 *
 * Sound by construction: in Cedar an entity attribute is observable only through attribute
 * access (`e.a`, `e["a"]`) and `has` (`e has a`, `e has a.b`) — equality, `in`, `is` and the
 * extension functions look at an entity's uid and parents, never its attributes. Both forms
 * carry the attribute name literally in the policy's JSON form (Cedar EST: `{".": {left, attr}}`
 * and `{"has": {left, attr}}`, `attr` a name or, for `has a.b`, a path of names), so an attribute whose name is not among the names any access
 * in the set uses can be left out of an entity without changing any decision, reason or error.
 * The receiver is not tracked (any expression may evaluate to any entity): a name counts for every
 * entity wherever it appears. Only entities' top-level attributes are dropped: inside a record
 * value (a record compared with `==`, a context) every member stays.
 *
 * Cedar reference: https://docs.cedarpolicy.com/policies/syntax-operators.html (`.`, `has`),
 * https://docs.cedarpolicy.com/policies/json-format.html (the JSON policy format).
 */
import * as cedar from '@cedar-policy/cedar-wasm/nodejs';

/**
 * Adds every attribute name a `.` or `has` node uses anywhere in one EST value to `out`
 * (`has a.b` carries its path as an array of names).
 * @returns false for a `.` or `has` node of a shape this does not know (then nothing may be left out).
 */
function collect(node: unknown, out: Set<string>): boolean {
  if (Array.isArray(node)) return node.every((x) => collect(x, out));
  if (typeof node !== 'object' || node === null) return true;
  for (const [k, v] of Object.entries(node as Record<string, unknown>)) {
    if (k === '.' || k === 'has') {
      const attr = typeof v === 'object' && v !== null ? (v as { attr?: unknown }).attr : undefined;
      const names = typeof attr === 'string' ? [attr] : attr;
      if (!Array.isArray(names) || !names.every((n) => typeof n === 'string')) return false;
      for (const n of names) out.add(n);
    }
    if (!collect(v, out)) return false;
  }
  return true;
}

/**
 * The attribute names the static policies (id → Cedar text) can read, or null when one of them
 * cannot be converted to its JSON form or holds an access of an unknown shape (then nothing may
 * be left out).
 */
export function referencedAttributes(policies: Record<string, string>): Set<string> | null {
  const names = new Set<string>();
  for (const text of Object.values(policies)) {
    const r = cedar.policyToJson(text);
    if (r.type !== 'success' || !collect(r.json, names)) return null;
  }
  return names;
}

/** `attrs` without the members `names` does not list (all of them when `names` is null). */
export function onlyReferenced<T>(attrs: Record<string, T>, names: Set<string> | null): Record<string, T> {
  if (names === null) return attrs;
  const out: Record<string, T> = Object.create(null); // keeps an own "__proto__" member (engine.ts)
  for (const k of Object.keys(attrs)) if (names.has(k)) out[k] = attrs[k] as T;
  return out;
}
