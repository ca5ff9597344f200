/**
 * Where a request that Cedar refused against the bundle's schema does not conform, said without
 * any value of the request (docs/spec/policy.md#cedar-requests): Cedar's own message quotes the
 * offending values (a token's claims, a call's arguments), which must reach neither the audit
 * chain nor the agent. The gateway walks the schema's types beside the request it sent and
 * names the first misfit by its attribute path (made of names the schema or the gateway
 * declares, never of a member name taken from the request), the schema's type and the JSON type
 * it found; when it finds none, a fixed {@link GENERIC_MISFIT}.
 */
import type * as cedar from '@cedar-policy/cedar-wasm/nodejs';
import type { SchemaFacts, TypeJson } from './schema-facts.js';

/** The reason given when the walk finds no misfit Cedar's refusal could be pinned on. */
export const GENERIC_MISFIT = 'the request does not conform to the schema';

/** The JSON type of a Cedar JSON value (after the gateway's JSON → Cedar mapping). */
function jsonType(v: cedar.CedarValueJson | undefined): string {
  if (v === undefined) return 'absent';
  if (Array.isArray(v)) return 'array';
  if (v === null) return 'null';
  return typeof v === 'object' ? 'object' : typeof v;
}

/** A schema type as a short name (`String`, `Set<String>`, `Record`, `entity Agent`). */
function typeName(t: TypeJson | undefined, facts: SchemaFacts, depth = 0): string {
  const r = facts.resolve(t);
  if (r?.type === undefined) return 'unknown';
  switch (r.type) {
    case 'Set':
      return depth > 4 ? 'Set' : `Set<${typeName(r.element, facts, depth + 1)}>`;
    case 'Entity':
      return `entity ${r.name ?? ''}`.trim();
    case 'Extension':
      return r.name ?? 'extension';
    default:
      return r.type;
  }
}

const isRecord = (v: unknown): v is Record<string, cedar.CedarValueJson> =>
  typeof v === 'object' && v !== null && !Array.isArray(v);

/** The first member of `value` that does not fit `type`, as `path: …`, else null. */
function misfit(
  t: TypeJson | undefined,
  value: cedar.CedarValueJson,
  path: string,
  facts: SchemaFacts,
  depth = 0,
): string | null {
  const r = facts.resolve(t);
  if (!r || depth > 32) return null;
  const wrong = () => `${path}: expected ${typeName(r, facts)}, got ${jsonType(value)}`;
  switch (r.type) {
    case 'String':
      return typeof value === 'string' ? null : wrong();
    case 'Long':
      return typeof value === 'number' ? null : wrong();
    case 'Bool':
    case 'Boolean':
      return typeof value === 'boolean' ? null : wrong();
    case 'Set':
      if (!Array.isArray(value)) return wrong();
      for (const x of value) {
        const m = misfit(r.element, x, `${path}[]`, facts, depth + 1);
        if (m) return m;
      }
      return null;
    case 'Record':
      return isRecord(value) ? recordMisfit(r, value, path, facts, depth) : wrong();
    case 'Entity':
      // The gateway never sends an entity reference in a value (escapes are refused): any value
      // given for an entity-typed attribute is a misfit.
      return wrong();
    default:
      // An extension type (`ipaddr`, `decimal`, …): Cedar may read a string as one; anything
      // else is a misfit. A string it refused is left to the generic reason.
      return typeof value === 'string' ? null : wrong();
  }
}

/**
 * The first misfit of a record: a member it does not declare (named by the record's path only:
 * the member's name is the request's, not the schema's), a required member absent, or a member
 * of the wrong type.
 */
function recordMisfit(
  r: TypeJson,
  value: Record<string, cedar.CedarValueJson>,
  path: string,
  facts: SchemaFacts,
  depth: number,
): string | null {
  const attrs = r.attributes ?? {};
  if (r.additionalAttributes !== true)
    for (const k of Object.keys(value))
      if (!Object.hasOwn(attrs, k)) return `${path}: has a member the schema does not declare`;
  for (const [k, at] of Object.entries(attrs)) {
    const v = Object.hasOwn(value, k) ? value[k] : undefined;
    if (v === undefined) {
      if (at.required !== false) return `${path}.${k}: expected ${typeName(at, facts)}, got absent`;
      continue;
    }
    const m = misfit(at, v, `${path}.${k}`, facts, depth + 1);
    if (m) return m;
  }
  return null;
}

/**
 * The first misfit of an entity's attributes against its type's declared shape, under `path`
 * (`principal`, `resource`). An undeclared attribute is named: an entity's attribute names are
 * the gateway's (configured attributes, `scopes`, `attribute_claims` targets, catalog facts).
 * @returns null when none is found.
 */
export function entityMisfit(
  entity: cedar.EntityJson | undefined,
  path: string,
  facts: SchemaFacts,
): string | null {
  if (!entity) return null;
  const type = (entity.uid as cedar.TypeAndId).type;
  if (!facts.shapes.has(type)) return `${path}: its entity type is not declared by the schema`;
  const shape = facts.resolve(facts.shapes.get(type)) ?? { type: 'Record', attributes: {} };
  const attrs = (entity.attrs ?? {}) as Record<string, cedar.CedarValueJson>;
  const declared = shape.attributes ?? {};
  for (const k of Object.keys(attrs))
    if (!Object.hasOwn(declared, k)) return `${path}.${k}: not declared by the schema`;
  return recordMisfit(shape, attrs, path, facts, 0);
}

/**
 * Locates the first misfit of a request Cedar refused against the schema (module doc): the
 * principal, then the resource, then the context.
 * @returns `path: expected T, got json-type` (or another fixed phrase after the path), or
 *   {@link GENERIC_MISFIT} when no misfit is found.
 */
export function locateMisfit(
  facts: SchemaFacts,
  action: string,
  principal: cedar.TypeAndId,
  resource: cedar.TypeAndId,
  context: cedar.Context,
  entities: cedar.EntityJson[],
): string {
  const find = (uid: cedar.TypeAndId) =>
    entities.find((e) => {
      const u = e.uid as cedar.TypeAndId;
      return u.type === uid.type && u.id === uid.id;
    });
  const ctxType = facts.contextTypes.get(action);
  return (
    entityMisfit(find(principal), 'principal', facts) ??
    entityMisfit(find(resource), 'resource', facts) ??
    (ctxType ? misfit(ctxType, context as cedar.CedarValueJson, 'context', facts) : null) ??
    GENERIC_MISFIT
  );
}
