/**
 * The configuration's JSON Schema, generated from the zod schema (./index.ts) for editors
 * (yaml-language-server and the like). Published as docs/config.schema.json and printed by
 * `cmcp config schema`; a test checks that the committed file is this output.
 */
import { z } from 'zod';
import { configSchema } from './index.js';
import { sectionDescription } from './sections.js';

/**
 * The JSON Schema (draft-07, which most YAML editors read) of what a config file may hold: the
 * input side of the zod schema (defaults shown, values before their transforms), with each
 * top-level section described. Cross-field rules (e.g. `software` only with `dev_mode`) are
 * checked by `cmcp start --check` and `cmcp config explain`, not by the schema.
 */
export function configJsonSchema(): Record<string, unknown> {
  const schema = z.toJSONSchema(configSchema, { io: 'input', target: 'draft-7' }) as Record<
    string,
    unknown
  > & {
    properties: Record<string, Record<string, unknown>>;
  };
  for (const [key, prop] of Object.entries(schema.properties)) {
    const description = sectionDescription(key);
    if (description) prop.description = description;
  }
  return {
    $schema: schema.$schema,
    title: 'cmcp gateway configuration',
    description: 'The YAML file given to `cmcp start --config` (docs/configuration.md).',
    ...schema,
  };
}

/** {@link configJsonSchema} as the text of docs/config.schema.json (two-space JSON, final newline). */
export function configJsonSchemaText(): string {
  return `${JSON.stringify(configJsonSchema(), null, 2)}\n`;
}
