/**
 * The policy bundle `cmcp policy init` writes (docs/policy.md#a-bundle-for-your-servers): the
 * Cedar schema of what the gateway sends, rendered from ./vocabulary.ts (the description the
 * request builders use), a manifest, and a starter policy that permits the listed tools.
 *
 * What is per deployment is read from the config and the tools: the Agent's attributes (typed
 * from `agents[].attributes`, plus `scopes` and the `oauth.attribute_claims` targets for
 * tokens), and the `arguments` members of `call_tool` (every top-level tool argument whose
 * JSON Schema type maps to one Cedar type across all tools; others are left out, and a policy
 * cannot read what the schema does not declare).
 */
import { CmcpError } from '../errors/index.js';
import {
  ACTIONS,
  type ActionId,
  type AttrSpec,
  ENTITY_TYPES,
  type EntityTypeName,
  SESSION_FACTS,
} from './vocabulary.js';

/** One tool the bundle is written for. */
export interface InitTool {
  /** The gateway name (`<prefix>.<tool>`): the Tool entity's id. */
  exposedName: string;
  server: string;
  /** The tool definition's `inputSchema`, if any. */
  inputSchema?: unknown;
}

/** What the generated schema declares beyond ./vocabulary.ts. */
export interface SchemaInputs {
  agentAttributes: Record<string, AttrSpec>;
  toolArguments: Record<string, AttrSpec>;
}

/**
 * Thrown when the config cannot be described by one schema (e.g. an attribute of two types):
 * `CONFIG_INVALID`, since the configured attributes are what must change.
 */
export class SchemaInitError extends CmcpError {
  declare readonly code: 'CONFIG_INVALID';
  constructor(message: string) {
    super('CONFIG_INVALID', message);
    this.name = 'SchemaInitError';
  }
}

/** The Cedar type of a JSON value as the engine maps it (./engine.ts), or null when it has none. */
function cedarTypeOf(v: unknown): AttrSpec['type'] | null {
  if (typeof v === 'string') return 'String';
  if (typeof v === 'boolean') return 'Bool';
  if (typeof v === 'number') return Number.isSafeInteger(v) ? 'Long' : 'String';
  if (Array.isArray(v) && v.every((x) => typeof x === 'string')) return 'Set<String>';
  return null;
}

/**
 * The Agent attributes the schema must declare: each configured attribute typed from its
 * values (all agents must agree), `scopes` when tokens are accepted, and every
 * `attribute_claims` target (declared `String`: a claim of another type is refused per call).
 * @throws SchemaInitError when an attribute has no Cedar type or two different ones.
 */
export function agentAttributesOf(
  agents: readonly { agent_id: string; attributes: Record<string, unknown> }[],
  oauth: { attribute_claims: Record<string, string> } | undefined,
): Record<string, AttrSpec> {
  const out: Record<string, AttrSpec> = {};
  for (const a of agents)
    for (const [k, v] of Object.entries(a.attributes)) {
      const t = cedarTypeOf(v);
      if (t === null || t === 'Record')
        throw new SchemaInitError(
          `agents[${a.agent_id}].attributes.${k}: use a string, boolean, integer or list of strings`,
        );
      const prev = out[k];
      if (prev && prev.type !== t)
        throw new SchemaInitError(
          `agents[].attributes.${k} is ${prev.type} for one agent and ${t} for another`,
        );
      out[k] = { type: t, required: false } as AttrSpec;
    }
  if (oauth) {
    out.scopes = { type: 'Set<String>', required: false, note: "the access token's scopes" };
    for (const [claim, attr] of Object.entries(oauth.attribute_claims))
      out[attr] ??= { type: 'String', required: false, note: `token claim ${claim}` };
  }
  return out;
}

/** The Cedar type of one JSON Schema property, when every value it allows maps to it. */
function argumentType(prop: unknown): AttrSpec['type'] | null {
  if (typeof prop !== 'object' || prop === null) return null;
  const p = prop as { type?: unknown; items?: { type?: unknown } };
  if (p.type === 'string') return 'String';
  if (p.type === 'boolean') return 'Bool';
  if (p.type === 'integer') return 'Long';
  if (p.type === 'array' && p.items?.type === 'string') return 'Set<String>';
  // "number": an integer value maps to Long, any other to String (./engine.ts): no one type.
  return null;
}

/**
 * The `arguments` members `call_tool` declares: every top-level argument of the tools whose
 * type maps to one Cedar type in every tool that has it (all optional: tools differ).
 */
export function toolArgumentsOf(tools: readonly InitTool[]): Record<string, AttrSpec> {
  const types = new Map<string, AttrSpec['type'] | null>();
  for (const t of tools) {
    const props = (t.inputSchema as { properties?: unknown } | undefined)?.properties;
    if (typeof props !== 'object' || props === null) continue;
    for (const [k, p] of Object.entries(props as Record<string, unknown>)) {
      if (!/^[A-Za-z_][A-Za-z0-9_]*$/.test(k)) continue; // Cedar `has` and `.` need identifiers
      const ty = argumentType(p);
      const prev = types.get(k);
      types.set(k, prev === undefined || prev === ty ? ty : null);
    }
  }
  const out: Record<string, AttrSpec> = {};
  for (const [k, ty] of [...types].sort(([a], [b]) => (a < b ? -1 : 1)))
    if (ty !== null && ty !== 'Record') out[k] = { type: ty, required: false } as AttrSpec;
  return out;
}

function renderType(a: AttrSpec, indent: string): string {
  if (a.type !== 'Record') return a.type;
  const inner = renderAttrs(a.attributes, `${indent}  `);
  return inner ? `{\n${inner}${indent}}` : '{}';
}

function renderAttrs(attrs: Readonly<Record<string, AttrSpec>>, indent: string): string {
  let out = '';
  for (const [k, a] of Object.entries(attrs)) {
    const line = `${indent}${k}${a.required ? '' : '?'}: ${renderType(a, indent)},`;
    if (a.note && a.type === 'Record') out += `${indent}// ${a.note}\n${line}\n`;
    else out += a.note ? `${line.padEnd(40)} // ${a.note}\n` : `${line}\n`;
  }
  return out;
}

/** Cedar schema text for the gateway's requests (module doc). */
export function generateSchema(inputs: SchemaInputs): string {
  let out =
    '// Cedar schema of the requests the cmcp gateway sends (docs/policy.md#the-entity-model).\n' +
    '// Written by `cmcp policy init`; policies are validated against it in strict mode.\n\n';
  for (const [name, spec] of Object.entries(ENTITY_TYPES) as [
    EntityTypeName,
    (typeof ENTITY_TYPES)[EntityTypeName],
  ][]) {
    const attrs: Record<string, AttrSpec> = name === 'Agent' ? inputs.agentAttributes : spec.attributes;
    out += `// ${spec.note}\n`;
    if (name === 'Agent')
      out += '// Declare every attribute the config or a token gives: an undeclared one refuses the start.\n';
    const parents = spec.parents.length ? ` in [${spec.parents.join(', ')}]` : '';
    const body = renderAttrs(attrs, '  ');
    out += body ? `entity ${name}${parents} = {\n${body}};\n\n` : `entity ${name}${parents};\n\n`;
  }
  out += `// Facts about the gateway session the request runs in.\ntype SessionFacts = {\n${renderAttrs(SESSION_FACTS.attributes, '  ')}};\n`;
  for (const [id, a] of Object.entries(ACTIONS) as [ActionId, (typeof ACTIONS)[ActionId]][]) {
    out += `\n// ${a.methods}\naction ${id} appliesTo {\n  principal: [Agent],\n  resource: [${a.resource}],\n  context: {\n`;
    if (a.arguments) {
      const args = id === 'call_tool' ? inputs.toolArguments : {};
      out +=
        '    // The arguments: only declared members reach the policies, each with its declared type.\n' +
        `    arguments: ${renderType({ type: 'Record', required: true, attributes: args }, '    ')},\n`;
    }
    if (a.workflowId) out += '    workflow_id?: String,\n';
    out += '    session: SessionFacts,\n  },\n};\n';
  }
  return out;
}

const cedarString = (s: string) => JSON.stringify(s);

/**
 * The starter policies: one permit for the listed tools, and one commented `forbid` per kind
 * of request to start from (Cedar denies what no permit allows; a forbid always wins).
 */
export function starterPolicies(tools: readonly InitTool[]): Record<string, string> {
  const list = tools.map((t) => `    Tool::${cedarString(t.exposedName)}`).join(',\n');
  const permit =
    '// Cedar denies by default: a request no permit matches is refused.\n\n' +
    (tools.length
      ? `// The tools listed when this bundle was written.\n@id("allow-listed-tools")\npermit (principal, action == Action::"call_tool", resource)\nwhen {\n  resource in [\n${list}\n  ]\n};\n`
      : '// No tools were listed: permit the ones agents may call, e.g.\n// permit (principal, action == Action::"call_tool", resource == Tool::"server.tool");\n') +
    '\n// Resources, prompts, completions and client requests stay denied until a permit says\n' +
    '// otherwise, e.g.:\n// permit (principal, action in [Action::"read_resource", Action::"get_prompt", Action::"complete"], resource);\n';
  const forbid =
    '// Guardrails: a matching forbid overrides every permit. Uncomment and adapt.\n\n' +
    '// Tools: no tool the catalog marks confidential or above.\n' +
    '// @id("no-confidential-tools")\n// forbid (principal, action == Action::"call_tool", resource)\n// when { resource.sensitivity_level >= 3 };\n\n' +
    '// Resources: no URI that names a secret.\n' +
    '// @id("no-secret-resources")\n// forbid (principal, action in [Action::"read_resource", Action::"subscribe_resource"], resource)\n// when { resource.uri like "*secret*" };\n\n' +
    '// Prompts: none from one server.\n' +
    '// @id("no-prompts-from-server")\n// forbid (principal, action == Action::"get_prompt", resource in Server::"server");\n\n' +
    '// Completions: none for resource templates.\n' +
    '// @id("no-resource-completions")\n// forbid (principal, action == Action::"complete", resource)\n// when { resource.ref_type == "ref/resource" };\n\n' +
    "// Sampling, elicitation, roots: an upstream never reaches the client's model.\n" +
    '// @id("no-sampling")\n// forbid (principal, action == Action::"relay_sampling", resource);\n';
  return { '00-permit.cedar': permit, '10-guardrails.cedar': forbid };
}

/** Every file of the starter bundle, by name. */
export function initBundleFiles(inputs: SchemaInputs, tools: readonly InitTool[]): Record<string, string> {
  const servers = [...new Set(tools.map((t) => t.server))].sort();
  return {
    'manifest.json': `${JSON.stringify(
      {
        version: 1,
        description: `Starter policy for ${servers.length ? servers.join(', ') : 'the configured upstreams'} (cmcp policy init)`,
      },
      null,
      2,
    )}\n`,
    'schema.cedarschema': generateSchema(inputs),
    ...starterPolicies(tools),
  };
}
