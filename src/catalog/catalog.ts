/**
 * The tool catalog (docs/spec/policy.md#catalog): `catalog.json` pins every tool agents may call.
 *
 * ```json
 * { "catalog_version": 1,
 *   "description": "optional text",
 *   "tools": [ { "server": "fs", "name": "read_text_file", "sensitivity": "internal",
 *                "sha256": "sha256:<hex>", "definition": { …the approved MCP tool definition… } } ] }
 * ```
 *
 * - `sha256` = `sha256:<hex>` of JCS({description, inputSchema, outputSchema, annotations}),
 *   each member taken from the definition and omitted when absent ({@link definitionHash}).
 *   Load refuses an entry whose `sha256` is not the hash of its own `definition`.
 * - A tool `name` holding a control character or a lone surrogate is refused
 *   ({@link toolNameFault}): such a tool could be listed but never called or recorded.
 * - `sensitivity` is one of unclassified | public | internal | confidential | secret.
 * - Catalog hash = `sha256:<hex>` of JCS(the whole parsed catalog document), so formatting
 *   does not change it but any member does.
 */
import { readFileSync } from 'node:fs';
import { jcsDigest } from '@cmcp/verify/formats';
import { z } from 'zod';
import { CmcpError } from '../errors/index.js';
import { toolNameFault } from '../upstream/tool-name.js';

/** Sensitivity levels, lowest first (`unclassified` = not set by a reviewer). */
export const SENSITIVITY_LEVELS = ['unclassified', 'public', 'internal', 'confidential', 'secret'] as const;
export type Sensitivity = (typeof SENSITIVITY_LEVELS)[number];

/** Rank of a sensitivity (0 = unclassified … 4 = secret). */
export function sensitivityLevel(s: Sensitivity): number {
  return SENSITIVITY_LEVELS.indexOf(s);
}

/** Members of a tool definition covered by its pin. */
export const PINNED_MEMBERS = ['description', 'inputSchema', 'outputSchema', 'annotations'] as const;

/** One pinned tool. */
export interface CatalogTool {
  server: string;
  name: string;
  sensitivity: Sensitivity;
  /** `sha256:<hex>` of the pinned members of `definition`. */
  sha256: string;
  /** The approved definition (returned by `tools/list` under the gateway name). */
  definition: { name: string } & Record<string, unknown>;
}

/** A loaded catalog. */
export interface Catalog {
  catalog_version: 1;
  description?: string;
  tools: CatalogTool[];
}

/** A catalog file that cannot be used. */
export class CatalogError extends CmcpError {
  declare readonly code: 'CATALOG_INVALID';
  constructor(
    message: string,
    readonly issues: string[] = [],
  ) {
    super('CATALOG_INVALID', issues.length ? `${message}:\n  ${issues.join('\n  ')}` : message);
    this.name = 'CatalogError';
  }
}

/**
 * `sha256:<hex>` of JCS of a definition's pinned members (absent members omitted).
 * @throws CanonicalJsonError when the definition holds a value JCS cannot carry.
 */
export function definitionHash(def: Record<string, unknown>): string {
  const pinned: Record<string, unknown> = {};
  for (const k of PINNED_MEMBERS) if (def[k] !== undefined) pinned[k] = def[k];
  return jcsDigest(pinned);
}

const toolSchema = z.strictObject({
  server: z.string().min(1).max(63),
  name: z.string().min(1).max(256),
  sensitivity: z.enum(SENSITIVITY_LEVELS),
  sha256: z.string().regex(/^sha256:[0-9a-f]{64}$/, 'must be sha256:<64 lowercase hex>'),
  definition: z.looseObject({ name: z.string() }),
});

const catalogSchema = z.strictObject({
  catalog_version: z.literal(1),
  description: z.string().max(1000).optional(),
  tools: z.array(toolSchema).max(10_000),
});

/** The catalog hash of a parsed catalog document (module doc). */
export function catalogHash(doc: unknown): string {
  return jcsDigest(doc);
}

/**
 * Validates a parsed catalog document: shape, pins matching their definitions, names
 * matching and servable (no control character, no lone surrogate), no duplicates.
 * @throws CatalogError listing every issue.
 */
export function parseCatalog(doc: unknown): Catalog {
  const r = catalogSchema.safeParse(doc);
  if (!r.success)
    throw new CatalogError(
      'catalog does not have the catalog v1 shape',
      r.error.issues.slice(0, 20).map((i) => `${i.path.join('.') || '(root)'}: ${i.message}`),
    );
  const issues: string[] = [];
  const seen = new Set<string>();
  r.data.tools.forEach((t, i) => {
    const key = `${t.server}\u0000${t.name}`;
    if (seen.has(key)) issues.push(`tools[${i}]: duplicate ${t.server}/${t.name}`);
    seen.add(key);
    if (t.definition.name !== t.name) issues.push(`tools[${i}]: definition.name differs from name`);
    const fault = toolNameFault(t.name);
    if (fault) issues.push(`tools[${i}] on server ${t.server}: ${fault}`);
    let h: string;
    try {
      h = definitionHash(t.definition);
    } catch (e) {
      issues.push(`tools[${i}]: definition is not canonical JSON (${(e as Error).message})`);
      return;
    }
    if (h !== t.sha256)
      issues.push(
        `tools[${i}] ${t.server}/${t.name}: sha256 ${t.sha256} is not the hash of its definition (${h})`,
      );
  });
  if (issues.length) throw new CatalogError('catalog pins do not hold', issues);
  return r.data as Catalog;
}

/**
 * Reads and validates `catalog.json`.
 * @returns the catalog and its hash.
 * @throws CatalogError (unreadable, not JSON, invalid).
 */
export function loadCatalogFile(file: string): { catalog: Catalog; hash: string } {
  let text: string;
  try {
    text = readFileSync(file, 'utf8');
  } catch (e) {
    throw new CatalogError(`cannot read catalog ${file} (${(e as NodeJS.ErrnoException).code ?? 'error'})`);
  }
  let doc: unknown;
  try {
    doc = JSON.parse(text);
  } catch {
    throw new CatalogError(`catalog ${file} is not JSON`);
  }
  const catalog = parseCatalog(doc);
  return { catalog, hash: catalogHash(doc) };
}

/**
 * Builds a catalog document from live tool lists (for `cmcp catalog snapshot`). Every tool
 * gets `sensitivity: "unclassified"`; a reviewer sets real values and removes tools that
 * must not be callable. A tool whose name the gateway cannot serve ({@link toolNameFault}) is
 * left out, as the gateway never lists it.
 */
export function snapshotCatalog(
  lists: { server: string; tools: ({ name: string } & Record<string, unknown>)[] }[],
  description?: string,
): Catalog {
  const tools: CatalogTool[] = [];
  for (const l of lists)
    for (const t of l.tools) {
      if (toolNameFault(t.name)) continue;
      tools.push({
        server: l.server,
        name: t.name,
        sensitivity: 'unclassified',
        sha256: definitionHash(t),
        definition: t,
      });
    }
  return { catalog_version: 1, ...(description ? { description } : {}), tools };
}
