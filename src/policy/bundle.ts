/**
 * Policy bundles (docs/spec/policy.md#policy-bundle): a folder holding `manifest.json`, one Cedar schema
 * (`*.cedarschema`, Cedar schema syntax) and any number of `*.cedar` policy files. Loading
 * parses the schema, splits every file into policies, validates each policy against the
 * schema in Cedar's strict mode (`@cedar-policy/cedar-wasm` `validate`), and refuses the
 * whole bundle with Cedar's diagnostics on any problem.
 *
 * Bundle hash (documented in docs/policy.md): `sha256:<hex>` of the UTF-8 bytes of
 * JCS([{path, sha256}, …]) where the list holds every loaded file (`manifest.json`, the
 * schema, the `*.cedar` files — nothing else), sorted by `path` (the bare file name), and
 * `sha256` is `sha256:<hex>` of the file's exact bytes.
 *
 * Policy ids: the value of a policy's `@id("…")` annotation, else `<file>#<n>` (0-based
 * position of the policy in its file). Ids are what audit entries record in
 * `policy_rule_matched`; duplicates refuse the bundle.
 *
 * Cedar references: https://docs.cedarpolicy.com/policies/syntax-policy.html,
 * https://docs.cedarpolicy.com/schema/human-readable-schema.html,
 * https://docs.cedarpolicy.com/policies/validation.html
 */
import { lstatSync, readdirSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import * as cedar from '@cedar-policy/cedar-wasm/nodejs';
import { jcsDigest, sha256Tagged } from '@cmcp/verify/formats';
import { CmcpError } from '../errors/index.js';

/** `manifest.json` of a bundle. */
export interface PolicyManifest {
  /** Positive integer; a signed reload must carry a strictly higher version (no downgrade). */
  version: number;
  description: string;
}

/** One file of a bundle as hashed. */
export interface BundleFileDigest {
  path: string;
  /** `sha256:<hex>` of the file bytes. */
  sha256: string;
}

/** A loaded, validated bundle. */
export interface PolicyBundle {
  /** `sha256:<hex>` (see module doc). */
  hash: string;
  manifest: PolicyManifest;
  /** Sorted by path: exactly the list the hash covers. */
  files: BundleFileDigest[];
  /** Cedar schema text. */
  schema: string;
  /** Policy id → Cedar policy text, in file order. */
  policies: Record<string, string>;
  /** Policy id → the file it came from. */
  sources: Record<string, string>;
}

/** Largest file accepted in a bundle (bytes). */
export const MAX_BUNDLE_FILE_BYTES = 1024 * 1024;
/** Most files accepted in a bundle. */
export const MAX_BUNDLE_FILES = 256;

/** A bundle that cannot be loaded. `diagnostics` are one line each (Cedar's messages included). */
export class PolicyBundleError extends CmcpError {
  declare readonly code: 'POLICY_BUNDLE_INVALID';
  constructor(
    message: string,
    readonly diagnostics: string[] = [],
  ) {
    super(
      'POLICY_BUNDLE_INVALID',
      diagnostics.length ? `${message}:\n  ${diagnostics.join('\n  ')}` : message,
    );
    this.name = 'PolicyBundleError';
  }
}

/** True for a file name that belongs to a bundle (and so is hashed). */
export function isBundleFile(name: string): boolean {
  return name === 'manifest.json' || name.endsWith('.cedar') || name.endsWith('.cedarschema');
}

/**
 * Reads a bundle folder's files (top level only; other names are ignored and not hashed).
 * @throws PolicyBundleError when the folder is unreadable, a bundle file is not a regular
 *   file, too large, or there are too many files.
 */
export function readBundleDir(dir: string): Map<string, Buffer> {
  let names: string[];
  try {
    names = readdirSync(dir);
  } catch (e) {
    throw new PolicyBundleError(
      `cannot read policy bundle folder ${dir} (${(e as NodeJS.ErrnoException).code ?? 'error'})`,
    );
  }
  const files = new Map<string, Buffer>();
  for (const name of names.filter(isBundleFile).sort()) {
    const p = join(dir, name);
    const st = lstatSync(p);
    if (!st.isFile()) throw new PolicyBundleError(`${name} is not a regular file`);
    if (st.size > MAX_BUNDLE_FILE_BYTES)
      throw new PolicyBundleError(`${name} is larger than ${MAX_BUNDLE_FILE_BYTES} bytes`);
    files.set(name, readFileSync(p));
  }
  if (files.size > MAX_BUNDLE_FILES) throw new PolicyBundleError(`more than ${MAX_BUNDLE_FILES} files`);
  return files;
}

/**
 * The bundle hash of a set of files (module doc). Only bundle files are covered.
 * @throws PolicyBundleError for a file name that is not a plain bundle file name.
 */
export function bundleDigests(files: Map<string, Buffer>): { hash: string; files: BundleFileDigest[] } {
  const list: BundleFileDigest[] = [];
  for (const [path, bytes] of files) {
    if (!isBundleFile(path) || !/^[A-Za-z0-9._-]{1,128}$/.test(path) || path.startsWith('.'))
      throw new PolicyBundleError(`invalid bundle file name ${JSON.stringify(path.slice(0, 64))}`);
    list.push({ path, sha256: sha256Tagged(bytes) });
  }
  list.sort((a, b) => (a.path < b.path ? -1 : a.path > b.path ? 1 : 0));
  return { hash: jcsDigest(list), files: list };
}

/** The bundle hash of a folder, without validating the policies (for `cmcp policy hash`). */
export function hashBundleDir(dir: string): string {
  return bundleDigests(readBundleDir(dir)).hash;
}

/** Renders Cedar's DetailedError list as single lines with line:column when known. */
function describe(errors: cedar.DetailedError[], text?: string, file?: string): string[] {
  return errors.map((e) => {
    let where = file ?? '';
    const loc = e.sourceLocations?.[0];
    if (loc && text !== undefined) {
      const before = text.slice(0, loc.start);
      const line = before.split('\n').length;
      const col = loc.start - before.lastIndexOf('\n');
      where = `${where}:${line}:${col}`;
    }
    const help = e.help ? ` (${e.help})` : '';
    return `${where ? `${where}: ` : ''}${e.message}${help}`.slice(0, 400);
  });
}

function parseManifest(bytes: Buffer): PolicyManifest {
  let raw: unknown;
  try {
    raw = JSON.parse(bytes.toString('utf8'));
  } catch {
    throw new PolicyBundleError('manifest.json is not JSON');
  }
  const m = raw as Record<string, unknown>;
  if (typeof m !== 'object' || m === null || Array.isArray(m))
    throw new PolicyBundleError('manifest.json must be an object');
  const problems: string[] = [];
  if (typeof m.version !== 'number' || !Number.isSafeInteger(m.version) || m.version < 1)
    problems.push('manifest.json: version must be a positive integer');
  if (typeof m.description !== 'string' || m.description.length > 1000)
    problems.push('manifest.json: description must be a string of at most 1000 characters');
  for (const k of Object.keys(m))
    if (k !== 'version' && k !== 'description')
      problems.push(`manifest.json: unknown member ${JSON.stringify(k.slice(0, 40))}`);
  if (problems.length) throw new PolicyBundleError('invalid manifest', problems);
  return { version: m.version as number, description: m.description as string };
}

/** The `@id` annotation of one policy's text, if any. */
function annotatedId(policyText: string): string | undefined {
  const j = cedar.policyToJson(policyText);
  if (j.type !== 'success') return undefined;
  return j.json.annotations?.id;
}

/**
 * Loads and validates a bundle from its files (a folder's or a reload request's).
 * @throws PolicyBundleError with Cedar's diagnostics (schema parse errors, policy parse
 *   errors, strict validation errors and warnings, duplicate ids, a bad manifest).
 */
export function loadBundleFromFiles(files: Map<string, Buffer>): PolicyBundle {
  const { hash, files: digests } = bundleDigests(files);
  const manifestBytes = files.get('manifest.json');
  if (!manifestBytes) throw new PolicyBundleError('the bundle has no manifest.json');
  const manifest = parseManifest(manifestBytes);
  const schemaNames = [...files.keys()].filter((n) => n.endsWith('.cedarschema'));
  if (schemaNames.length !== 1)
    throw new PolicyBundleError(
      `the bundle must hold exactly one *.cedarschema file (found ${schemaNames.length})`,
    );
  const schemaName = schemaNames[0] as string;
  const schema = (files.get(schemaName) as Buffer).toString('utf8');
  const sp = cedar.checkParseSchema(schema);
  if (sp.type !== 'success')
    throw new PolicyBundleError('the Cedar schema does not parse', describe(sp.errors, schema, schemaName));

  const policies: Record<string, string> = {};
  const sources: Record<string, string> = {};
  const offsets = new Map<string, { file: string; text: string; offset: number }>();
  const problems: string[] = [];
  for (const [name, bytes] of files) {
    if (!name.endsWith('.cedar')) continue;
    const text = bytes.toString('utf8');
    const parts = cedar.policySetTextToParts(text);
    if (parts.type !== 'success') {
      problems.push(...describe(parts.errors, text, name));
      continue;
    }
    if (parts.policy_templates.length)
      problems.push(`${name}: policy templates are not supported (use static policies)`);
    let searchFrom = 0;
    parts.policies.forEach((p, i) => {
      const id = annotatedId(p) ?? `${name}#${i}`;
      if (Object.hasOwn(policies, id)) {
        problems.push(`${name}: duplicate policy id ${JSON.stringify(id)} (also in ${sources[id]})`);
        return;
      }
      policies[id] = p;
      sources[id] = name;
      const at = text.indexOf(p, searchFrom);
      if (at >= 0) searchFrom = at + p.length;
      offsets.set(id, { file: name, text, offset: Math.max(at, 0) });
    });
  }
  if (problems.length) throw new PolicyBundleError('policies do not parse', problems);
  if (Object.keys(policies).length === 0) throw new PolicyBundleError('the bundle holds no policies');

  const v = cedar.validate({
    schema,
    policies: { staticPolicies: policies },
    validationSettings: { mode: 'strict' },
  });
  if (v.type !== 'success')
    throw new PolicyBundleError('Cedar validation failed', describe(v.errors, schema, schemaName));
  const found = [...v.validationErrors, ...v.validationWarnings];
  if (found.length) {
    throw new PolicyBundleError(
      'policies do not validate against the schema',
      found.map((e) => {
        const o = offsets.get(e.policyId);
        if (!o) return describe([e.error])[0] as string;
        const shifted: cedar.DetailedError = {
          ...e.error,
          sourceLocations: (e.error.sourceLocations ?? []).map((l) => ({
            ...l,
            start: l.start + o.offset,
            end: l.end + o.offset,
          })),
        };
        return `${describe([shifted], o.text, o.file)[0]} [policy ${e.policyId}]`;
      }),
    );
  }
  return { hash, manifest, files: digests, schema, policies, sources };
}

/**
 * Loads and validates a bundle folder.
 * @throws PolicyBundleError (see {@link loadBundleFromFiles}).
 */
export function loadBundleDir(dir: string): PolicyBundle {
  return loadBundleFromFiles(readBundleDir(dir));
}
