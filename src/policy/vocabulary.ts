/**
 * What the gateway sends Cedar, described once: the entity types with the attributes each
 * carries, and the actions with their resource type and context. The request builders
 * (./engine.ts for `tools/call`, src/relay/policy.ts for the relayed methods) take their
 * entity types, attribute names and action ids from here (their types are derived from it, so
 * a builder that adds, drops or renames an attribute does not compile), and
 * ./schema-generator.ts renders the Cedar schema of `cmcp policy init` from the same text.
 *
 * Cedar reference: https://docs.cedarpolicy.com/schema/human-readable-schema.html
 */
import { type Sensitivity, sensitivityLevel } from '../catalog/catalog.js';

/** A Cedar attribute type the gateway sends. */
export type AttrType =
  | { type: 'String' | 'Long' | 'Bool' | 'Set<String>' }
  | { type: 'Record'; attributes: Readonly<Record<string, AttrSpec>> };

/** One attribute: its type, whether every request carries it, and a short note for the schema. */
export type AttrSpec = AttrType & { readonly required: boolean; readonly note?: string };

/** One entity type: its parent types, its attributes and a note for the schema. */
export interface EntityTypeSpec {
  readonly note: string;
  readonly parents: readonly string[];
  readonly attributes: Readonly<Record<string, AttrSpec>>;
}

const str = (note?: string) => ({ type: 'String', required: true, ...(note ? { note } : {}) }) as const;
const optBool = { type: 'Bool', required: false } as const;

/** Every entity type the gateway sends (the Agent's attributes come from the config, not from here). */
export const ENTITY_TYPES = {
  Server: {
    note: 'An upstream MCP server (its `name` in the gateway config). Every resource below is a member of one.',
    parents: [],
    attributes: {},
  },
  Agent: {
    note: 'The authenticated caller: attributes from `agents[].attributes` in the config and, for an OAuth token, `scopes` and the `oauth.attribute_claims` claims.',
    parents: [],
    attributes: {},
  },
  Tool: {
    note: 'A tool as the gateway exposes it (`Tool::"<prefix>.<tool>"`), described by its catalog pin.',
    parents: ['Server'],
    attributes: {
      server: str('upstream name'),
      name: str("the upstream's own tool name"),
      sensitivity: str('unclassified | public | internal | confidential | secret'),
      sensitivity_level: { type: 'Long', required: true, note: '0 .. 4 in that order' },
      annotations: {
        type: 'Record',
        required: true,
        note: "the pinned definition's MCP hints (only those it sets)",
        attributes: {
          readOnlyHint: optBool,
          destructiveHint: optBool,
          idempotentHint: optBool,
          openWorldHint: optBool,
        },
      },
    },
  },
  Resource: {
    note: 'A resource as an upstream lists it (`Resource::"<uri>"`, the URI unchanged).',
    parents: ['Server'],
    attributes: { server: str('upstream name'), uri: str() },
  },
  Prompt: {
    note: 'A prompt as the gateway lists it (`Prompt::"<prefix>.<prompt>"`).',
    parents: ['Server'],
    attributes: { server: str('upstream name'), name: str("the upstream's own prompt name") },
  },
  Completion: {
    note: 'What a completion/complete asks about (`Completion::"ref/prompt:<name>"` or `Completion::"ref/resource:<uri template>"`).',
    parents: ['Server'],
    attributes: { server: str('upstream name'), ref_type: str('ref/prompt | ref/resource'), ref: str() },
  },
  ClientRequest: {
    note: 'A request an upstream sends the client through the gateway (`ClientRequest::"<method>"`).',
    parents: ['Server'],
    attributes: { server: str('the upstream asking'), method: str() },
  },
} as const satisfies Record<string, EntityTypeSpec>;

/** An entity type name the gateway sends. */
export type EntityTypeName = keyof typeof ENTITY_TYPES;

type TsOf<A> = A extends { type: 'String' }
  ? string
  : A extends { type: 'Long' }
    ? number
    : A extends { type: 'Bool' }
      ? boolean
      : A extends { type: 'Set<String>' }
        ? string[]
        : A extends { type: 'Record'; attributes: infer R }
          ? { [K in keyof R as R[K] extends { required: true } ? K : never]: TsOf<R[K]> } & {
              [K in keyof R as R[K] extends { required: true } ? never : K]?: TsOf<R[K]>;
            }
          : never;

/** The TypeScript shape of an entity type's attributes, as declared above. */
export type AttrsOf<T extends EntityTypeName> = TsOf<{
  type: 'Record';
  attributes: (typeof ENTITY_TYPES)[T]['attributes'];
}>;

/** The session facts every action's context carries (`context.session`). */
export const SESSION_FACTS = {
  type: 'Record',
  required: true,
  attributes: {
    calls: { type: 'Long', required: true, note: 'tool calls earlier in this session (allowed or refused)' },
    max_sensitivity: {
      type: 'String',
      required: true,
      note: 'highest sensitivity of the tools this session has run',
    },
    max_sensitivity_level: { type: 'Long', required: true },
  },
} as const satisfies AttrSpec;

/** One action: the resource type it applies to and its context members besides `session`. */
export interface ActionSpec {
  readonly resource: EntityTypeName;
  /** The MCP method(s) it decides, for the schema's note. */
  readonly methods: string;
  /** `arguments`: the request's arguments, declared per deployment (see the generator). */
  readonly arguments: boolean;
  readonly workflowId: boolean;
}

/** Every action the gateway decides. */
export const ACTIONS = {
  call_tool: { resource: 'Tool', methods: 'tools/call', arguments: true, workflowId: true },
  read_resource: { resource: 'Resource', methods: 'resources/read', arguments: false, workflowId: false },
  subscribe_resource: {
    resource: 'Resource',
    methods: 'resources/subscribe, resources/unsubscribe',
    arguments: false,
    workflowId: false,
  },
  get_prompt: { resource: 'Prompt', methods: 'prompts/get', arguments: true, workflowId: false },
  complete: { resource: 'Completion', methods: 'completion/complete', arguments: false, workflowId: false },
  relay_sampling: {
    resource: 'ClientRequest',
    methods: 'sampling/createMessage (upstream to client)',
    arguments: false,
    workflowId: false,
  },
  relay_elicitation: {
    resource: 'ClientRequest',
    methods: 'elicitation/create (upstream to client)',
    arguments: false,
    workflowId: false,
  },
  relay_roots: {
    resource: 'ClientRequest',
    methods: 'roots/list (upstream to client)',
    arguments: false,
    workflowId: false,
  },
} as const satisfies Record<string, ActionSpec>;

/** An action id the gateway sends (`Action::"<id>"`). */
export type ActionId = keyof typeof ACTIONS;

/** The resource types of the relayed methods (every action but `call_tool`). */
export type RelayResourceType = Exclude<(typeof ACTIONS)[ActionId]['resource'], 'Tool'>;

/** `context.session` of a request, as {@link SESSION_FACTS} declares it. */
export function sessionFacts(
  calls: number,
  max: Sensitivity,
): { calls: number; max_sensitivity: string; max_sensitivity_level: number } {
  return { calls, max_sensitivity: max, max_sensitivity_level: sensitivityLevel(max) };
}
