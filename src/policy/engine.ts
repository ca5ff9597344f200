/**
 * Cedar decisions for `tools/call` (docs/spec/policy.md#cedar-requests). Every call is one Cedar request:
 *
 * - principal `Agent::"<agent_id>"` with the agent's configured `attributes` and, for a token,
 *   its `scopes` and mapped claims;
 * - action `Action::"call_tool"`;
 * - resource `Tool::"<exposed tool name>"`, a member of `Server::"<upstream name>"`, with
 *   attributes `server`, `name` (the upstream's own tool name), `sensitivity`,
 *   `sensitivity_level` and `annotations` (the MCP boolean hints present in the pinned
 *   definition) taken from the catalog;
 * - context `{arguments, workflow_id?, session: {calls, max_sensitivity,
 *   max_sensitivity_level}}`.
 *
 * JSON → Cedar value mapping (Cedar has no null and no floats): strings, booleans and
 * integers map to themselves; a non-integer number maps to the string of its ECMAScript
 * form; `null` members are omitted (so `has` is false); arrays become sets. An object member
 * named `__entity`, `__extn` or `__expr` (Cedar's JSON escapes) is refused, so arguments can
 * never forge an entity reference or an extension value.
 *
 * Fail-closed rule: Cedar skips a policy whose evaluation errors (which would let a
 * `forbid` that errors on unexpected input allow the call). The gateway instead treats any
 * evaluation error as a deny in every enforcement mode, naming the erroring policies
 * (`errored`; refused as `POLICY_EVALUATION_FAILED` when enforcing).
 *
 * Every request is checked against the bundle's schema by cedar-wasm itself (the schema is
 * preparsed once per bundle, `preparseSchema`, and named on each `statefulIsAuthorized` with
 * `validateRequest`): a Cedar `==` between values of different types is simply false, so an
 * attribute of the wrong type (a token claim `team: ["contractors"]`) would otherwise switch a
 * `forbid … when { principal.team == "contractors" }` off without any error. A request whose
 * principal, resource or context does not conform is a deny (`invalid`) following the mode:
 * `POLICY_ATTRIBUTE_INVALID` when enforcing. `invalid` is located by the gateway (./misfit.ts:
 * path and types, never a value, never Cedar's message, which quotes values). The principal is
 * sent with all its attributes (an undeclared one does not conform either); the other entities
 * keep the attributes that the policies deciding the action read by name
 * (./referenced-attributes.ts) and the schema declares, plus the required ones; the context is
 * narrowed to the top-level members the schema declares, and `arguments` likewise to the
 * declared members those policies read, plus the required ones ({@link
 * PolicyEngine.keptArguments}): one `arguments` record serves every tool, so an argument no
 * policy reads (another tool's, of another type) is dropped, not refused.
 * An action the schema does not declare is a deny (`failure`). Configured agents and catalog
 * tools are also checked at load ({@link checkEntities}).
 *
 * The entity types, attributes and actions are those ./vocabulary.ts declares (the schema
 * `cmcp policy init` writes is generated from the same description).
 *
 * Cedar reference: https://docs.cedarpolicy.com/auth/authorization.html (decision, reasons,
 * errors), https://docs.cedarpolicy.com/auth/entities-syntax.html (JSON entity format).
 *
 * Over 500 lines: the entities, the narrowing to what policies read and the decision share one
 * request shape; locating a misfit (./misfit.ts) and the schema (./schema-generator.ts) are apart.
 */
import { createHash } from 'node:crypto';
import * as cedar from '@cedar-policy/cedar-wasm/nodejs';
import { type Sensitivity, sensitivityLevel } from '../catalog/catalog.js';
import { CmcpError } from '../errors/index.js';
import { ActionPolicySets } from './action-sets.js';
import { type PolicyBundle, PolicyBundleError } from './bundle.js';
import { entityMisfit, GENERIC_MISFIT, locateMisfit } from './misfit.js';
import { onlyReferenced, referencedAttributes } from './referenced-attributes.js';
import { type SchemaFacts, schemaFacts } from './schema-facts.js';
import {
  type ActionId,
  type AttrsOf,
  ENTITY_TYPES,
  type EntityTypeName,
  sessionFacts,
} from './vocabulary.js';

/** How a deny takes effect. */
export type EnforcementMode = 'enforcing' | 'advisory' | 'silent';

/** MCP tool annotation hints carried into Cedar (booleans only; ./vocabulary.ts declares them). */
export const ANNOTATION_HINTS = Object.keys(ENTITY_TYPES.Tool.attributes.annotations.attributes) as (
  | 'readOnlyHint'
  | 'destructiveHint'
  | 'idempotentHint'
  | 'openWorldHint'
)[];

/** What the gateway knows about the tool being called. */
export interface ToolFacts {
  exposedName: string;
  server: string;
  toolName: string;
  sensitivity: Sensitivity;
  /** The tool definition's `annotations` object (only boolean hints are used). */
  annotations: unknown;
}

/** One call to decide. */
export interface PolicyRequest {
  agentId: string;
  agentAttributes: Record<string, unknown>;
  tool: ToolFacts;
  arguments: Record<string, unknown>;
  workflowId: string | null;
  session: { calls: number; maxSensitivity: Sensitivity };
}

/** A decision. `decision` is Cedar's; `effective` says what the gateway does with it. */
export interface PolicyDecision {
  decision: 'allow' | 'deny';
  /** Ids of the policies that determined the decision (Cedar's `reason`). */
  matched: string[];
  /** Ids of policies whose evaluation errored (non-empty ⇒ deny, fail closed). */
  errored: string[];
  /** Why the request could not be evaluated at all (input or engine fault), else null. */
  failure: string | null;
  /**
   * Where the request's principal, resource or context does not conform to the bundle's schema
   * (`principal.team: expected String, got array`; ./misfit.ts: names and types only, never a
   * value nor Cedar's message), else null. Non-null ⇒ deny.
   */
  invalid: string | null;
}

/** Thrown by {@link toCedarValue} for input Cedar cannot carry honestly. */
export class CedarValueError extends CmcpError {
  declare readonly code: 'CEDAR_VALUE_INVALID';
  /**
   * @param reason a fixed phrase (it names no value)
   * @param path the JSON pointer of the member (its names may be the request's own)
   */
  constructor(
    readonly reason: string,
    readonly path: string,
  ) {
    super('CEDAR_VALUE_INVALID', `${reason} at ${path || '/'}`);
    this.name = 'CedarValueError';
  }
}

const ESCAPES = new Set(['__entity', '__extn', '__expr']);

/**
 * Maps JSON to a Cedar JSON value (module doc). `undefined`/`null` → undefined (omitted).
 * @throws CedarValueError for escape members or non-JSON values.
 */
export function toCedarValue(v: unknown, path = ''): cedar.CedarValueJson | undefined {
  if (v === null || v === undefined) return undefined;
  switch (typeof v) {
    case 'string':
    case 'boolean':
      return v;
    case 'number':
      if (!Number.isFinite(v)) throw new CedarValueError('not a finite number', path);
      return Number.isSafeInteger(v) ? v : String(v);
    case 'object': {
      if (Array.isArray(v)) {
        const out: cedar.CedarValueJson[] = [];
        v.forEach((x, i) => {
          const c = toCedarValue(x, `${path}/${i}`);
          if (c !== undefined) out.push(c);
        });
        return out;
      }
      // No prototype: an own "__proto__" member (JSON.parse makes one) stays a member Cedar
      // sees, instead of setting the record's prototype and vanishing from the request.
      const out: Record<string, cedar.CedarValueJson> = Object.create(null);
      for (const [k, x] of Object.entries(v as Record<string, unknown>)) {
        if (ESCAPES.has(k)) throw new CedarValueError(`member name ${k} is reserved by Cedar`, path);
        const c = toCedarValue(x, `${path}/${k}`);
        if (c !== undefined) out[k] = c;
      }
      return out;
    }
    default:
      throw new CedarValueError(`${typeof v} is not JSON`, path);
  }
}

function record(v: unknown, path: string): Record<string, cedar.CedarValueJson> {
  const c = toCedarValue(v ?? {}, path);
  return c !== undefined && typeof c === 'object' && !Array.isArray(c)
    ? (c as Record<string, cedar.CedarValueJson>)
    : {};
}

/** The boolean MCP hints of an `annotations` value, as a Cedar record. */
export function annotationHints(annotations: unknown): Record<string, boolean> {
  const out: Record<string, boolean> = {};
  if (typeof annotations !== 'object' || annotations === null) return out;
  for (const h of ANNOTATION_HINTS) {
    const v = (annotations as Record<string, unknown>)[h];
    if (typeof v === 'boolean') out[h] = v;
  }
  return out;
}

/** The Agent entity of a request. */
export function agentEntity(agentId: string, attributes: Record<string, unknown>): cedar.EntityJson {
  return { uid: { type: 'Agent', id: agentId }, attrs: record(attributes, '/principal'), parents: [] };
}

/** The Tool entity of a request, a member of its Server. */
export function toolEntity(t: ToolFacts): cedar.EntityJson {
  const attrs: AttrsOf<'Tool'> = {
    server: t.server,
    name: t.toolName,
    sensitivity: t.sensitivity,
    sensitivity_level: sensitivityLevel(t.sensitivity),
    annotations: annotationHints(t.annotations),
  };
  return {
    uid: { type: 'Tool' satisfies EntityTypeName, id: t.exposedName },
    attrs,
    parents: [{ type: 'Server' satisfies EntityTypeName, id: t.server }],
  };
}

/** The Tool entity and its Server entity (checked against the schema at load). */
export function toolEntities(t: ToolFacts): cedar.EntityJson[] {
  return [toolEntity(t), { uid: { type: 'Server', id: t.server }, attrs: {}, parents: [] }];
}

/**
 * Checks entities against the bundle's schema (Cedar `checkParseEntities`), so a configured
 * agent or a catalog tool that does not fit the schema is found at load, not at call time.
 * @returns one line per problem (empty when all conform).
 */
export function checkEntities(bundle: PolicyBundle, entities: cedar.EntityJson[]): string[] {
  const problems: string[] = [];
  let facts: SchemaFacts | null = null;
  for (const e of entities) {
    const r = cedar.checkParseEntities({ entities: [e], schema: bundle.schema });
    if (r.type !== 'success') {
      // Located by the gateway (./misfit.ts): Cedar's message would quote the attribute's value.
      facts ??= schemaFacts(bundle.schema);
      const uid = e.uid as cedar.TypeAndId;
      const where = entityMisfit(e, uid.type === 'Agent' ? 'principal' : 'resource', facts) ?? GENERIC_MISFIT;
      problems.push(`${uid.type}::${JSON.stringify(uid.id)}: ${where}`);
    }
  }
  return problems;
}

/**
 * Checks that the bundle's schema declares every Agent attribute a token can carry (`scopes`
 * and the `oauth.attribute_claims` targets): each call would otherwise be refused as
 * `POLICY_ATTRIBUTE_INVALID`, so the start (or the reload) is refused instead.
 * @returns one line per undeclared attribute (empty when all are declared).
 */
export function checkTokenAttributes(bundle: PolicyBundle, names: readonly string[]): string[] {
  if (names.length === 0) return [];
  const declared = schemaFacts(bundle.schema).declared.get('Agent') ?? new Set<string>();
  return names
    .filter((n) => !declared.has(n))
    .map((n) => `Agent: the schema does not declare ${JSON.stringify(n)}, which access tokens carry`);
}

/**
 * A loaded bundle ready to decide requests. The policy text is parsed once, here (at load and at
 * each reload), into cedar-wasm's cache of preparsed policy sets (`preparsePolicySet`), keyed by
 * a digest of the policies so that the cache holds one entry per distinct bundle however often it reloads;
 * each call then decides with `statefulIsAuthorized` instead of parsing the text again, against
 * the subset of policies whose action scope can hold for its action (./action-sets.ts: the same
 * answer, with less to evaluate), preparsed once per action under an id derived from that key.
 */
export class PolicyEngine {
  /** The key of this bundle's preparsed policy set in cedar-wasm's cache. */
  private readonly policySetId: string;
  /**
   * Per action, the attribute names its policies read (./referenced-attributes.ts, over the
   * policies ./action-sets.ts keeps for it); null: any.
   */
  private readonly attributeNames = new Map<string, Set<string> | null>();
  /** Per action, the set of the policies whose scope can hold for it (./action-sets.ts). */
  private readonly actionSets: ActionPolicySets;
  /** The key of this bundle's preparsed schema in cedar-wasm's cache. */
  private readonly schemaName: string;
  /** The schema's required attributes and declared contexts (./schema-facts.ts). */
  private readonly facts: SchemaFacts;
  /** Per action and entity type, the attributes a request keeps (see {@link keptAttributes}). */
  private readonly kept = new Map<string, Set<string> | null>();
  /** Per action, the `arguments` members a request keeps (see {@link keptArguments}). */
  private readonly keptArgs = new Map<string, Set<string> | null>();

  /** @throws PolicyBundleError when Cedar cannot parse the bundle's policies. */
  constructor(
    readonly bundle: PolicyBundle,
    readonly mode: EnforcementMode,
  ) {
    const text = JSON.stringify(Object.entries(bundle.policies).sort(([a], [b]) => (a < b ? -1 : 1)));
    this.policySetId = `cmcp-${createHash('sha256').update(text).digest('hex')}`;
    const parsed = cedar.preparsePolicySet(this.policySetId, { staticPolicies: bundle.policies });
    if (parsed.type !== 'success')
      throw new PolicyBundleError(
        'policies do not parse',
        parsed.errors.map((e) => e.message),
      );
    this.actionSets = new ActionPolicySets(this.policySetId, bundle.policies);
    this.schemaName = `cmcp-schema-${createHash('sha256').update(bundle.schema).digest('hex')}`;
    const schema = cedar.preparseSchema(this.schemaName, bundle.schema);
    if (schema.type !== 'success')
      throw new PolicyBundleError(
        'the Cedar schema does not parse',
        schema.errors.map((e) => e.message),
      );
    this.facts = schemaFacts(bundle.schema);
  }

  /** The attribute names the policies deciding `action` can read; null: any. */
  private referencedFor(action: string): Set<string> | null {
    let names = this.attributeNames.get(action);
    if (names === undefined) {
      const ids = this.actionSets.policyIdsFor(action);
      names = referencedAttributes(
        Object.fromEntries(ids.map((id) => [id, this.bundle.policies[id] as string])),
      );
      this.attributeNames.set(action, names);
    }
    return names;
  }

  /**
   * `read` (the names a policy reads; null: any) within `declared` (the schema's; null: any),
   * plus `required`: the members a request keeps. A member no policy can read changes no
   * decision, so it is left out rather than checked; an undeclared one cannot be read by a
   * validated policy; a required one must stay (dropping it would not conform).
   */
  private static keep(
    read: Set<string> | null,
    declared: Set<string> | null | undefined,
    required: Iterable<string> | undefined,
  ): Set<string> | null {
    if (read === null && !declared) return null;
    const base =
      read === null ? [...(declared ?? [])] : [...read].filter((n) => !declared || declared.has(n));
    return new Set([...base, ...(required ?? [])]);
  }

  /**
   * The attributes a request of `action` keeps on an entity of `type` other than the principal:
   * those its policies read that the schema declares, and those the schema requires; null: all.
   */
  private keptAttributes(action: string, type: string): Set<string> | null {
    const key = `${action}\u0000${type}`;
    let kept = this.kept.get(key);
    if (kept === undefined) {
      kept = PolicyEngine.keep(
        this.referencedFor(action),
        this.facts.declared.get(type),
        this.facts.required.get(type),
      );
      this.kept.set(key, kept);
    }
    return kept;
  }

  /**
   * The members of a request's `arguments` that a request of `action` keeps: those its policies
   * read that the schema declares for the action, and the required ones; null: all. An argument
   * no policy reads (another tool's argument of the same name, of another type) is left out, so
   * it is neither checked nor refused.
   */
  keptArguments(action: string): Set<string> | null {
    let kept = this.keptArgs.get(action);
    if (kept === undefined) {
      const shape = this.facts.context.get(action);
      kept = shape
        ? PolicyEngine.keep(this.referencedFor(action), shape.arguments, shape.requiredArguments)
        : null;
      this.keptArgs.set(action, kept);
    }
    return kept;
  }

  /**
   * Where a value Cedar cannot carry sits, named without the request's own member names: the
   * schema-declared argument or principal attribute holding it, else the record holding it.
   */
  escapeMisfit(action: string, e: CedarValueError): string {
    const seg = e.path.split('/').slice(1);
    if (seg[0] === 'context') seg.shift();
    const [top, name] = seg;
    let at = 'context';
    if (top === 'principal')
      at =
        name !== undefined && this.facts.declared.get('Agent')?.has(name) ? `principal.${name}` : 'principal';
    else if (top === 'arguments')
      at =
        name !== undefined && this.facts.context.get(action)?.arguments?.has(name)
          ? `context.arguments.${name}`
          : 'context.arguments';
    return `${at}: ${e.reason}`;
  }

  /**
   * The context narrowed for `action` (module doc): top-level members the schema does not
   * declare, and members of `arguments` outside {@link keptArguments}, are left out.
   */
  private declaredContext(action: string, context: cedar.Context): cedar.Context {
    const shape = this.facts.context.get(action);
    if (!shape) return context;
    const out: cedar.Context = Object.create(null);
    for (const [k, v] of Object.entries(context)) {
      if (shape.members !== null && !shape.members.has(k)) continue;
      const kept = k === 'arguments' ? this.keptArguments(action) : null;
      if (kept !== null && typeof v === 'object' && v !== null && !Array.isArray(v))
        out[k] = onlyReferenced(v as Record<string, cedar.CedarValueJson>, kept);
      else out[k] = v;
    }
    return out;
  }

  /** Evaluates one request. Never throws: faults come back as `failure` (a deny). */
  evaluate(req: PolicyRequest): PolicyDecision {
    let context: cedar.Context;
    let entities: cedar.EntityJson[];
    try {
      // Only the kept arguments are converted: one no policy reads is not refused either for
      // a member Cedar could not carry.
      context = {
        arguments: record(
          onlyReferenced(req.arguments ?? {}, this.keptArguments('call_tool' satisfies ActionId)),
          '/arguments',
        ),
        session: sessionFacts(req.session.calls, req.session.maxSensitivity),
      };
      if (req.workflowId !== null) context.workflow_id = req.workflowId;
      // The Server entity has no attributes and no parents: `resource in Server::"…"` is
      // decided by the Tool's parents alone, so the request leaves it out (each entity costs
      // cedar-wasm about a fifth of a decision to parse).
      // Every attribute is converted (a value Cedar cannot carry still fails the call), then
      // the ones no policy can read are left out: cedar-wasm parses each one per request.
      // The principal keeps every attribute: each one is checked against the schema.
      entities = [agentEntity(req.agentId, req.agentAttributes), toolEntity(req.tool)];
    } catch (e) {
      // A value Cedar cannot carry (an entity or extension escape) does not conform either.
      if (e instanceof CedarValueError)
        return {
          decision: 'deny',
          matched: [],
          errored: [],
          failure: null,
          invalid: this.escapeMisfit('call_tool', e),
        };
      return {
        decision: 'deny',
        matched: [],
        errored: [],
        failure: 'request not representable in Cedar',
        invalid: null,
      };
    }
    return this.authorize(
      { type: 'Agent', id: req.agentId },
      'call_tool' satisfies ActionId,
      { type: 'Tool', id: req.tool.exposedName },
      context,
      entities,
    );
  }

  /**
   * One Cedar request of any gateway action (`call_tool`, and the relayed MCP methods of
   * src/relay/policy.ts), checked against the bundle's schema, with the fail-closed rule of the
   * module doc. Never throws.
   */
  authorize(
    principal: cedar.TypeAndId,
    action: string,
    resource: cedar.TypeAndId,
    context: cedar.Context,
    entities: cedar.EntityJson[],
  ): PolicyDecision {
    const deny = (failure: string | null, invalid: string | null = null): PolicyDecision => ({
      decision: 'deny',
      matched: [],
      errored: [],
      failure: failure?.slice(0, 200) ?? null,
      invalid: invalid?.slice(0, 300) ?? null,
    });
    // An action the schema does not declare has no valid request: a deny, not an input fault.
    if (!this.facts.context.has(action))
      return deny(`action ${action.slice(0, 64)} is not declared in the policy schema`);
    // Entities other than the principal keep what the policies can read (the principal keeps
    // every attribute: each one is checked against the schema).
    const sent = entities.map((e) => {
      const uid = e.uid as cedar.TypeAndId;
      if (uid.type === principal.type && uid.id === principal.id) return e;
      return { ...e, attrs: onlyReferenced(e.attrs ?? {}, this.keptAttributes(action, uid.type)) };
    });
    const narrowed = this.declaredContext(action, context);
    const call: cedar.StatefulAuthorizationCall = {
      principal,
      action: { type: 'Action', id: action },
      resource,
      context: narrowed,
      preparsedPolicySetId: this.actionSets.idFor(action),
      preparsedSchemaName: this.schemaName,
      validateRequest: true,
      entities: sent,
    };
    let answer: cedar.AuthorizationAnswer;
    try {
      answer = cedar.statefulIsAuthorized(call);
    } catch {
      // Its message may quote the request: a fixed reason instead.
      return deny('cedar-wasm failed on the request');
    }
    if (answer.type !== 'success') {
      // Told apart by asking again without the schema (only on this refusal path): a request
      // Cedar takes without the schema but not with it does not conform to the schema.
      let unchecked: cedar.AuthorizationAnswer | null = null;
      try {
        unchecked = cedar.statefulIsAuthorized({
          ...call,
          preparsedSchemaName: undefined,
          validateRequest: false,
        });
      } catch {
        // A throw here too: not a conformance question, the failure stands.
      }
      // Cedar's message quotes the request's values: the misfit is located by the gateway.
      if (unchecked?.type !== 'success') return deny('cedar refused the request even without the schema');
      let where = GENERIC_MISFIT;
      try {
        where = locateMisfit(this.facts, action, principal, resource, narrowed, sent);
      } catch {
        // Never Cedar's message: the generic reason stands.
      }
      return deny(null, where);
    }
    const { decision, diagnostics } = answer.response;
    const errored = diagnostics.errors.map((e) => e.policyId);
    return {
      decision: errored.length ? 'deny' : decision,
      matched: [...diagnostics.reason].sort(),
      errored: [...new Set(errored)].sort(),
      failure: null,
      invalid: null,
    };
  }
}
