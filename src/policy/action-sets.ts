/**
 * One preparsed policy set per action: Cedar evaluates every policy of the set
 * it is given, and a policy whose action scope cannot hold for the request's action is only ever
 * "not satisfied" — its scope is checked before its conditions (the scope constraints are the
 * first operands of the policy's `&&`), so it neither matches nor errors. Leaving such policies
 * out of the set a request is decided against gives the same decision, reasons and errors, for
 * less Wasm work per request (cedar-wasm's cost grows with the policies it evaluates).
 *
 * A policy is left out of an action's set only when its action scope is `action == Action::"X"`
 * or `action in [Action::"X", …]` with no `Action::"<action>"` among them. Requests carry no
 * Action entities and no schema (policy/engine.ts), so `in` holds for a listed action only; any
 * other form (`action`, another entity type) stays in. Policy scopes: Cedar's JSON policy format,
 * https://docs.cedarpolicy.com/policies/json-format.html#action.
 */
import * as cedar from '@cedar-policy/cedar-wasm/nodejs';

/** A scope entity as the JSON policy format writes it (`{type, id}` or `{__entity: {type, id}}`). */
function uidOf(e: cedar.EntityUidJson): cedar.TypeAndId {
  return '__entity' in e ? e.__entity : e;
}

/**
 * The actions a policy's action scope names, when it names them all as `Action::"…"` entities;
 * null when it holds for any action or for something this module does not read (kept everywhere).
 */
function scopedActions(policyText: string): Set<string> | null {
  const r = cedar.policyToJson(policyText);
  if (r.type !== 'success') return null;
  const a = r.json.action;
  if (a.op === 'All') return null;
  const listed = 'entities' in a ? a.entities : 'entity' in a ? [a.entity] : null; // `slot`: templates only
  if (!listed) return null;
  const ids = new Set<string>();
  for (const e of listed) {
    const uid = uidOf(e);
    if (uid.type !== 'Action') return null;
    ids.add(uid.id);
  }
  return ids;
}

/** The preparsed policy sets of one bundle, one per action decided (module doc). */
export class ActionPolicySets {
  /** Per policy id: the actions its scope is limited to, or null (any). */
  private readonly scopes = new Map<string, Set<string> | null>();
  /** Per action: the id of its preparsed set in cedar-wasm's cache. */
  private readonly ids = new Map<string, string>();

  /**
   * @param fullSetId the id the whole bundle is preparsed under (kept for actions whose set is
   *   the whole bundle).
   * @param policies the bundle's static policies by id, already parsed once (policy/engine.ts).
   */
  constructor(
    private readonly fullSetId: string,
    private readonly policies: Readonly<Record<string, string>>,
  ) {
    for (const [id, text] of Object.entries(policies)) this.scopes.set(id, scopedActions(text));
  }

  /** The ids of the policies whose action scope can hold for `action`. */
  policyIdsFor(action: string): string[] {
    return [...this.scopes].filter(([, s]) => s === null || s.has(action)).map(([id]) => id);
  }

  /**
   * The id of the preparsed set that decides `action` (preparsed on first use).
   * @throws Error when cedar-wasm refuses the subset (it parsed as part of the whole bundle).
   */
  idFor(action: string): string {
    const known = this.ids.get(action);
    if (known !== undefined) return known;
    const keep = this.policyIdsFor(action);
    let id = this.fullSetId;
    if (keep.length < this.scopes.size) {
      id = `${this.fullSetId}:${action}`;
      const staticPolicies = Object.fromEntries(keep.map((k) => [k, this.policies[k] as string]));
      const parsed = cedar.preparsePolicySet(id, { staticPolicies });
      if (parsed.type !== 'success')
        throw new Error(`cedar: the ${action} policies do not parse: ${parsed.errors[0]?.message}`);
    }
    this.ids.set(action, id);
    return id;
  }
}
