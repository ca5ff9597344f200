/**
 * Gateway configuration: YAML parsed with `yaml`, validated with zod. Errors name the field
 * (e.g. `upstreams[1].url: Invalid URL`) and carry the stable code CONFIG_INVALID.
 */
import { readFileSync } from 'node:fs';
import { dirname, isAbsolute, resolve } from 'node:path';
import { parse as parseYaml } from 'yaml';
import { z } from 'zod';

const hex64 = z
  .string()
  .regex(/^[0-9a-f]{64}$/, 'must be 64 lowercase hex characters (SHA-256 of the token)');
const name = z
  .string()
  .regex(/^[A-Za-z0-9][A-Za-z0-9_-]{0,62}$/, 'must be 1–63 of A–Z a–z 0–9 _ - (starting alphanumeric)');

const upstreamCommon = {
  name,
  /** Prefix of this upstream's tool names; default = `name`; `""` exposes bare tool names. */
  prefix: z
    .string()
    .regex(/^([A-Za-z0-9][A-Za-z0-9_-]{0,62})?$/, 'must be empty or like a name')
    .optional(),
  /** How long the gateway waits for a tools/call answer, in milliseconds. */
  timeout_ms: z.number().int().min(100).max(3_600_000).default(30_000),
};

const stdioUpstream = z.strictObject({
  ...upstreamCommon,
  transport: z.literal('stdio'),
  command: z.string().min(1),
  args: z.array(z.string()).default([]),
  env: z.record(z.string(), z.string()).default({}),
  cwd: z.string().optional(),
});

const httpUpstream = z.strictObject({
  ...upstreamCommon,
  transport: z.literal('http'),
  url: z.url({ protocol: /^https?$/ }),
});

const tpmAttestation = z.strictObject({
  provider: z.literal('tpm'),
  /** tpm2-tss TCTI string, e.g. `swtpm:host=127.0.0.1,port=2321` or `device:/dev/tpmrm0`. */
  tcti: z.string().min(1),
  ak_algorithm: z.enum(['ecc-p256', 'rsa2048']).default('ecc-p256'),
  /** sha256-bank PCRs included in every quote. */
  pcrs: z.array(z.number().int().min(0).max(23)).min(1).default([0, 1, 2, 7]),
});

const softwareAttestation = z.strictObject({ provider: z.literal('software') });

export const configSchema = z
  .strictObject({
    /** Development mode: loopback only; allows the `software` provider and the `dev` agent. */
    dev_mode: z.boolean().default(false),
    listen: z
      .strictObject({
        host: z.string().default('127.0.0.1'),
        port: z.number().int().min(0).max(65535).default(8787),
      })
      .default({ host: '127.0.0.1', port: 8787 }),
    /**
     * Names this gateway instance in the execution registry. Recovery at start-up seals only
     * the in-flight executions this instance admitted, so processes sharing one database
     * file must use distinct ids.
     */
    instance_id: name.default('gateway'),
    /** SQLite database path (relative paths are relative to the config file). */
    database: z.string().min(1),
    upstreams: z.array(z.discriminatedUnion('transport', [stdioUpstream, httpUpstream])).default([]),
    attestation: z.discriminatedUnion('provider', [tpmAttestation, softwareAttestation]),
    agents: z
      .array(z.strictObject({ agent_id: z.string().min(1).max(200), token_sha256: hex64 }))
      .default([]),
    sessions: z
      .strictObject({
        /** A default (implicit) session is closed with a claim after this many calls. */
        default_max_calls: z.number().int().min(1).default(1000),
        /** …or after this many seconds. */
        default_max_age_s: z.number().int().min(1).default(3600),
      })
      .default({ default_max_calls: 1000, default_max_age_s: 3600 }),
    limits: z
      .strictObject({
        /** Largest accepted request body, bytes. */
        max_request_bytes: z
          .number()
          .int()
          .min(1024)
          .default(2 * 1024 * 1024),
      })
      .default({ max_request_bytes: 2 * 1024 * 1024 }),
  })
  .superRefine((c, ctx) => {
    if (c.attestation.provider === 'software' && !c.dev_mode) {
      ctx.addIssue({
        code: 'custom',
        path: ['attestation', 'provider'],
        message: '`software` attests nothing and is allowed only with dev_mode: true',
      });
    }
    if (c.dev_mode && !isLoopback(c.listen.host)) {
      ctx.addIssue({
        code: 'custom',
        path: ['listen', 'host'],
        message: `dev_mode binds loopback only; refusing ${c.listen.host}`,
      });
    }
    if (!c.dev_mode && c.agents.length === 0) {
      ctx.addIssue({
        code: 'custom',
        path: ['agents'],
        message: 'at least one agent is required outside dev_mode',
      });
    }
    const seen = new Set<string>();
    c.upstreams.forEach((u, i) => {
      if (seen.has(u.name))
        ctx.addIssue({ code: 'custom', path: ['upstreams', i, 'name'], message: 'duplicate' });
      seen.add(u.name);
    });
  });

/** A validated configuration. */
export type GatewayConfig = z.infer<typeof configSchema>;
export type UpstreamConfig = GatewayConfig['upstreams'][number];

/** True for 127.0.0.0/8, ::1 and `localhost`. */
export function isLoopback(host: string): boolean {
  return host === 'localhost' || host === '::1' || /^127\.\d{1,3}\.\d{1,3}\.\d{1,3}$/.test(host);
}

/** Thrown for an unreadable or invalid config. `issues` are `path: message` lines. */
export class ConfigError extends Error {
  readonly code = 'CONFIG_INVALID';
  constructor(
    readonly file: string,
    readonly issues: string[],
  ) {
    super(`invalid config ${file}:\n  ${issues.join('\n  ')}`);
    this.name = 'ConfigError';
  }
}

function fieldPath(path: readonly PropertyKey[]): string {
  let out = '';
  for (const p of path) out += typeof p === 'number' ? `[${p}]` : out ? `.${String(p)}` : String(p);
  return out || '(root)';
}

/**
 * Validates an already-parsed config object.
 * @throws ConfigError listing every issue with its field path.
 */
export function parseConfig(raw: unknown, file = '(inline)'): GatewayConfig {
  const r = configSchema.safeParse(raw);
  if (!r.success)
    throw new ConfigError(
      file,
      r.error.issues.map((i) => `${fieldPath(i.path)}: ${i.message}`),
    );
  return r.data;
}

/**
 * Reads and validates a YAML config file. Relative `database` and stdio `cwd` paths are
 * resolved against the file's folder.
 * @throws ConfigError (unreadable file, YAML syntax error, or validation issues).
 */
export function loadConfig(file: string): GatewayConfig {
  let text: string;
  try {
    text = readFileSync(file, 'utf8');
  } catch (e) {
    throw new ConfigError(file, [`cannot read: ${(e as NodeJS.ErrnoException).code ?? 'error'}`]);
  }
  let raw: unknown;
  try {
    raw = parseYaml(text);
  } catch (e) {
    throw new ConfigError(file, [`YAML: ${(e as Error).message.split('\n')[0]}`]);
  }
  const cfg = parseConfig(raw, file);
  const base = dirname(resolve(file));
  const abs = (p: string) => (isAbsolute(p) ? p : resolve(base, p));
  cfg.database = abs(cfg.database);
  for (const u of cfg.upstreams) if (u.transport === 'stdio' && u.cwd) u.cwd = abs(u.cwd);
  return cfg;
}
