/**
 * What the engine needs to know of a bundle's Cedar schema to send each request whole and
 * have cedar-wasm check it against that schema (./engine.ts): the attributes each entity type
 * requires, and the context members each action declares.
 *
 * Read once per bundle load from Cedar's own JSON form of the schema
 * (`schemaToJsonWithResolvedTypes`: every type reference already classified as an entity or
 * a common type).
 *
 * Cedar reference: https://docs.cedarpolicy.com/schema/json-schema.html
 */
import * as cedar from '@cedar-policy/cedar-wasm/nodejs';
import { PolicyBundleError } from './bundle.js';

/** The declared members of a context record: names, or null when the record is open. */
export interface ContextShape {
  /** Top-level context members the action declares; null: any (an open record). */
  members: Set<string> | null;
  /**
   * Members of the declared `arguments` record; null: keep all of them (an open record, or
   * `arguments` declared as some other type, which Cedar then refuses).
   */
  arguments: Set<string> | null;
  /** The members of the declared `arguments` record that are required (empty when open). */
  requiredArguments: Set<string>;
}

/** A schema's facts (module doc). */
export interface SchemaFacts {
  /** Entity type name (`ns::Type`, bare in the empty namespace) → its required attributes. */
  required: Map<string, Set<string>>;
  /** Entity type name → every attribute it declares (required or optional). */
  declared: Map<string, Set<string>>;
  /** Action id → its declared context. An action missing here is not in the schema. */
  context: Map<string, ContextShape>;
  /** Entity type name → its declared shape (common types resolved at the top), for ./misfit.ts. */
  shapes: Map<string, TypeJson | undefined>;
  /** Action id → its declared context type, for ./misfit.ts. */
  contextTypes: Map<string, TypeJson | undefined>;
  /** Follows common-type references from `t` (a type met inside `shapes` or `contextTypes`). */
  resolve(t: TypeJson | undefined): TypeJson | undefined;
}

/** One type of Cedar's JSON schema form (as `schemaToJsonWithResolvedTypes` renders it). */
export interface TypeJson {
  type?: string;
  /** The entity type of an `Entity`, the extension of an `Extension`. */
  name?: string;
  /** The element type of a `Set`. */
  element?: TypeJson;
  attributes?: Record<string, TypeJson & { required?: boolean }>;
  additionalAttributes?: boolean;
}

interface NamespaceJson {
  commonTypes?: Record<string, TypeJson>;
  entityTypes?: Record<string, { shape?: TypeJson }>;
  actions?: Record<string, { appliesTo?: { context?: TypeJson } | null }>;
}

const qualified = (ns: string, name: string) => (ns ? `${ns}::${name}` : name);

/**
 * Follows common-type references until a type that is not one (at most 32 steps: Cedar
 * refuses cyclic common types, the bound only guards this walk).
 */
function resolve(
  t: TypeJson | undefined,
  ns: string,
  all: Record<string, NamespaceJson>,
): TypeJson | undefined {
  let cur = t;
  for (let i = 0; i < 32 && cur?.type !== undefined; i++) {
    const name = cur.type;
    const sep = name.lastIndexOf('::');
    const [tns, local] = sep >= 0 ? [name.slice(0, sep), name.slice(sep + 2)] : [ns, name];
    const common = all[tns]?.commonTypes?.[local] ?? (sep < 0 ? all['']?.commonTypes?.[local] : undefined);
    if (!common) return cur;
    cur = common;
  }
  return cur;
}

/** The names of a record type's attributes, or null when it is open or not a record. */
function recordMembers(t: TypeJson | undefined): Set<string> | null {
  if (t?.type !== 'Record' || t.additionalAttributes === true) return null;
  return new Set(Object.keys(t.attributes ?? {}));
}

/**
 * Reads a schema's facts (module doc).
 * @throws PolicyBundleError when Cedar cannot render the schema as JSON.
 */
export function schemaFacts(schema: string): SchemaFacts {
  const r = cedar.schemaToJsonWithResolvedTypes(schema);
  if (r.type !== 'success')
    throw new PolicyBundleError(
      'the Cedar schema cannot be read',
      r.errors.map((e) => e.message),
    );
  const all = r.json as unknown as Record<string, NamespaceJson>;
  const facts: SchemaFacts = {
    required: new Map(),
    declared: new Map(),
    context: new Map(),
    shapes: new Map(),
    contextTypes: new Map(),
    // Types inside the empty namespace's actions and its entity types: the requests' own.
    resolve: (t) => resolve(t, '', all),
  };
  for (const [ns, def] of Object.entries(all)) {
    for (const [name, et] of Object.entries(def.entityTypes ?? {})) {
      const shape = resolve(et.shape, ns, all);
      const required = new Set<string>();
      for (const [a, at] of Object.entries(shape?.attributes ?? {}))
        if (at.required !== false) required.add(a);
      facts.required.set(qualified(ns, name), required);
      facts.declared.set(qualified(ns, name), new Set(Object.keys(shape?.attributes ?? {})));
      facts.shapes.set(qualified(ns, name), shape);
    }
    // Requests name actions by bare id (Action::"call_tool"): only the empty namespace's count.
    if (ns !== '') continue;
    for (const [id, action] of Object.entries(def.actions ?? {})) {
      const ctx = resolve(action.appliesTo?.context ?? { type: 'Record', attributes: {} }, ns, all);
      const args = ctx?.type === 'Record' ? resolve(ctx.attributes?.arguments, ns, all) : undefined;
      const requiredArguments = new Set<string>();
      if (args?.type === 'Record')
        for (const [a, at] of Object.entries(args.attributes ?? {}))
          if (at.required !== false) requiredArguments.add(a);
      facts.context.set(id, {
        members: recordMembers(ctx),
        arguments: recordMembers(args),
        requiredArguments,
      });
      facts.contextTypes.set(id, ctx);
    }
  }
  return facts;
}
