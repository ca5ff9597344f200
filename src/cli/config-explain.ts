/**
 * What `cmcp config explain` prints: the effective configuration (validated, defaults filled in,
 * relative paths resolved) as one line per value, grouped by concern (src/config/sections.ts),
 * each with where it came from — the file, a default, or an environment variable. Secret values
 * are never printed: the password and secret query parameters of any URL (a `postgres://`
 * database, an upstream URL), and the values of a stdio upstream's `env` that the gateway treats
 * as secrets (src/upstream/credentials.ts). Upstream header values are not in the config at all
 * (it names their environment variable or file), so they cannot be printed.
 */
import { loadConfig, readConfigFile } from '../config/index.js';
import { CONFIG_CONCERNS } from '../config/sections.js';
import { envSecrets, urlSecrets } from '../upstream/credentials.js';

/** Where an effective value came from. */
export type ValueSource = 'file' | 'default' | `environment ${string}`;

/** One value of the effective config. `path` as in config errors: `upstreams[1].url`. */
export interface ExplainedValue {
  concern: string;
  path: string;
  /** The value, secrets replaced by {@link REDACTED}; `null` for a section that is not set. */
  value: unknown;
  source: ValueSource;
  /** True for an optional section the file does not set (oauth, policy, catalog). */
  unset?: true;
}

/** Printed instead of a secret value, or in place of the secret part of a URL. */
export const REDACTED = '<redacted>';

/** Environment variables read at start-up that change the gateway's behaviour (not config values). */
const ENVIRONMENT_SWITCHES = ['CMCP_LOG_LEVEL'] as const;

type Json = null | boolean | number | string | Json[] | { [k: string]: Json };

function isRecord(v: unknown): v is Record<string, unknown> {
  return typeof v === 'object' && v !== null && !Array.isArray(v);
}

/** A leaf: a scalar, an empty container, or an array of scalars (printed whole, e.g. `pcrs`). */
function isLeaf(v: unknown): boolean {
  if (Array.isArray(v)) return v.every((x) => !isRecord(x) && !Array.isArray(x));
  return !isRecord(v) || Object.keys(v).length === 0;
}

function join(path: string, key: string | number): string {
  return typeof key === 'number' ? `${path}[${key}]` : path ? `${path}.${key}` : key;
}

/** Replaces the secret parts of every URL-shaped string in `v`. */
function redactUrls(v: unknown): unknown {
  if (typeof v === 'string') {
    let out = v;
    // Shortest first: the password goes before `user:password`, so the user name stays readable.
    for (const s of urlSecrets(v).sort((a, b) => a.length - b.length)) out = out.split(s).join(REDACTED);
    return out;
  }
  if (Array.isArray(v)) return v.map(redactUrls);
  return v;
}

/**
 * The effective config of `file`, one value per line-to-be.
 * @param env the environment `cmcp start` would see (its switches are reported as sources).
 * @throws ConfigError when the file is unreadable or invalid (as `cmcp start` would refuse it).
 */
export function explainConfig(file: string, env: NodeJS.ProcessEnv = process.env): ExplainedValue[] {
  const raw = readConfigFile(file);
  const effective = loadConfig(file, env);
  const cfg = effective as unknown as Record<string, unknown>;
  const out: ExplainedValue[] = [];
  const secretEnvValues = new Set<string>();
  for (const u of effective.upstreams)
    if (u.transport === 'stdio') for (const s of envSecrets(u.env)) secretEnvValues.add(s);

  const walk = (concern: string, path: string, value: unknown, written: unknown): void => {
    if (!isLeaf(value)) {
      const entries: [string | number, unknown][] = Array.isArray(value)
        ? value.map((x, i) => [i, x])
        : Object.entries(value as Record<string, unknown>);
      for (const [k, v] of entries) {
        const w =
          Array.isArray(written) || isRecord(written) ? (written as Record<string, unknown>)[k] : undefined;
        walk(concern, join(path, k), v, w);
      }
      return;
    }
    const secret =
      typeof value === 'string' && /\.env\.[^.]+(\.value)?$/.test(path) && secretEnvValues.has(value);
    out.push({
      concern,
      path,
      value: secret ? REDACTED : redactUrls(value),
      source: written === undefined ? 'default' : 'file',
    });
  };

  for (const { title, sections } of CONFIG_CONCERNS)
    for (const key of Object.keys(sections)) {
      const written = isRecord(raw) ? raw[key] : undefined;
      if (cfg[key] === undefined)
        out.push({ concern: title, path: key, value: null, source: 'default', unset: true });
      else walk(title, key, cfg[key], written);
    }

  for (const name of ENVIRONMENT_SWITCHES) {
    const v = env[name];
    if (v !== undefined)
      out.push({ concern: 'environment', path: name, value: v, source: `environment ${name}` });
  }
  return out;
}

/** The text `cmcp config explain` prints: a heading per concern, then `path = value  (source)`. */
export function renderExplained(values: readonly ExplainedValue[]): string {
  const width = Math.min(60, Math.max(...values.map((v) => v.path.length)));
  const lines: string[] = [];
  let concern = '';
  for (const v of values) {
    if (v.concern !== concern) {
      if (concern) lines.push('');
      lines.push(`# ${v.concern}`);
      concern = v.concern;
    }
    const shown = v.unset ? '(not set)' : JSON.stringify(v.value as Json);
    lines.push(`${v.path.padEnd(width)} = ${shown}  (${v.source})`);
  }
  return `${lines.join('\n')}\n`;
}
