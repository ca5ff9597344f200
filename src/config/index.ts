/**
 * Gateway configuration: YAML parsed with `yaml`, validated with zod. Errors name the field
 * (e.g. `upstreams[1].url: Invalid URL`) and carry the stable code CONFIG_INVALID.
 */
import { readFileSync } from 'node:fs';
import { dirname, isAbsolute, resolve } from 'node:path';
import { parse as parseYaml } from 'yaml';
import { z } from 'zod';
import { CmcpError } from '../errors/index.js';
import { attestationSchema, resolveAttestationPaths } from './attestation.js';
import { oauthSchema, resolveOAuthPaths } from './oauth.js';
import { replicasSchema } from './replicas.js';
import { sessionsSchema } from './sessions.js';

export type { AttestationConfig } from './attestation.js';

import { isPostgresUrl } from './database.js';
import { storeSchema } from './store.js';
import { streamsSchema } from './streams.js';
import { refineListeners, resolveTlsPaths, tlsSchema } from './tls.js';
import { httpCredentialFields, resolveCredentialPaths, stdioEnv } from './upstream-credentials.js';
import { upstreamOAuth } from './upstream-oauth.js';

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
  /**
   * true: the gateway refuses to start when this upstream cannot be reached. Absent/false: it is
   * marked unavailable (tools hidden, calls refused with UPSTREAM_OFFLINE), retried with backoff
   * and brought in when it answers (src/upstream/availability.ts). Only a required upstream
   * that is down makes /readyz not ready (src/gateway/health/readiness.ts).
   */
  required: z.boolean().optional(),
  /**
   * Client sessions that may hold a connection of their own to this upstream (for stdio, a
   * process each) at once; one more is refused with UPSTREAM_CLIENT_CONNECTIONS_FULL. Requests
   * needing no per-client upstream state share one connection (src/relay/sessions.ts). Absent:
   * 16 for stdio (each is a process), 256 for HTTP (each is an upstream MCP session).
   */
  max_client_connections: z.number().int().min(0).max(10_000).optional(),
};

const stdioUpstream = z.strictObject({
  ...upstreamCommon,
  transport: z.literal('stdio'),
  command: z.string().min(1),
  args: z.array(z.string()).default([]),
  /** Variables of the process: `NAME: value`, or `NAME: { value, secret }` (src/config/upstream-credentials.ts). */
  env: stdioEnv,
  cwd: z.string().optional(),
});

const httpUpstream = z.strictObject({
  ...upstreamCommon,
  transport: z.literal('http'),
  url: z.url({ protocol: /^https?$/ }),
  /** headers, tls, attested_tls (src/config/upstream-credentials.ts). */
  ...httpCredentialFields,
  oauth: upstreamOAuth, // OAuth 2.1 client of a protected upstream (./upstream-oauth.ts)
});

// ---- attestation (docs/spec/attestation.md; docs/attestation.md) ----

/** Cedar principal attributes of an agent (`principal.<name>` in policies; docs/policy.md). */
const agentAttributes = z.record(
  z.string().regex(/^[A-Za-z_][A-Za-z0-9_]{0,63}$/, 'attribute names are Cedar identifiers (1–64 chars)'),
  z.json(),
);

const agent = z.strictObject({
  agent_id: z.string().regex(/^[\x21-\x7e]{1,200}$/, 'must be 1–200 printable ASCII characters (0x21–0x7E)'),
  token_sha256: hex64,
  attributes: agentAttributes.default({}),
});

/** Operators use /operator/* only; their tokens are never agent tokens (docs/spec/policy.md#operator-controls). */
const operator = z.strictObject({ operator_id: name, token_sha256: hex64 });

const policy = z.strictObject({
  /** Policy bundle folder (manifest.json, one *.cedarschema, *.cedar); relative to the config. */
  bundle: z.string().min(1),
  /** enforcing: a deny refuses the call; advisory: recorded as advisory_deny, call proceeds;
   * silent: recorded as silent_deny, never blocks and never tells the caller. */
  enforcement_mode: z.enum(['enforcing', 'advisory', 'silent']).default('enforcing'),
  /** Pinned Ed25519 public key for signed reloads (SPKI PEM or base64url raw 32 bytes). */
  signing_key: z.string().min(1).optional(),
});

const catalog = z.strictObject({
  /** catalog.json (relative to the config). */
  file: z.string().min(1),
  /** Seconds between re-lists of every upstream's tools for drift checks; 0 turns it off. */
  relist_interval_s: z.number().int().min(0).max(86_400).default(300),
});

/**
 * Sizes, per-agent limits and per-connection timeouts (docs/operations.md#limits-and-timeouts).
 * Every refusal they cause has its own error code and is in the aggregated refusal record.
 */
const limits = z.strictObject({
  /** Items per page of the lists the gateway answers (tools, resources, templates, prompts). */
  list_page_size: z.number().int().min(1).max(10_000).default(100),
  /** Largest accepted request body, bytes. */
  max_request_bytes: z
    .number()
    .int()
    .min(1024)
    .default(2 * 1024 * 1024),
  /** Largest tools/call result read from an upstream, bytes; the read stops there (C-MCP-4). */
  max_result_bytes: z
    .number()
    .int()
    .min(1024)
    .default(2 * 1024 * 1024),
  /** Per agent: requests per second, sustained (token bucket; AGENT_RATE_LIMITED beyond). */
  agent_requests_per_s: z.number().min(0.01).max(1_000_000).default(300),
  /** Per agent: requests allowed at once above the sustained rate (the bucket's size). */
  agent_request_burst: z.number().int().min(1).max(1_000_000).default(600),
  /** Per agent: requests in flight at once (AGENT_TOO_MANY_IN_FLIGHT beyond). */
  agent_max_in_flight: z.number().int().min(1).max(100_000).default(64),
  /** Per agent: open sessions (explicit and default; AGENT_TOO_MANY_SESSIONS beyond). */
  agent_max_open_sessions: z.number().int().min(1).max(1_000_000).default(256),
  /** Per agent: client sessions opened (`initialize`) per minute (AGENT_CLIENT_SESSIONS_RATE_LIMITED beyond). */
  agent_client_sessions_per_min: z.number().int().min(1).max(1_000_000).default(60),
  /** Per connection: time to receive a request's headers, ms (REQUEST_HEADERS_TIMEOUT). */
  headers_timeout_ms: z.number().int().min(100).max(600_000).default(10_000),
  /** Per connection: time to receive a whole request, headers and body, ms (REQUEST_BODY_TIMEOUT). */
  request_timeout_ms: z.number().int().min(100).max(3_600_000).default(30_000),
  /** Per connection: how long an idle keep-alive connection is kept between requests, ms. */
  keep_alive_timeout_ms: z.number().int().min(100).max(600_000).default(5_000),
  /** Connections held at once, all clients together (CONNECTION_LIMIT_REACHED beyond). */
  max_connections: z.number().int().min(1).max(1_000_000).default(1024),
  /**
   * Connections that have not authenticated (no request on them has passed an agent or operator
   * check), all addresses together; absent: three quarters of max_connections, so authenticated
   * agents keep the rest. Beyond it an older one is closed, idle before busy, never the new one
   * (UNAUTHENTICATED_CONNECTION_LIMIT).
   */
  max_unauthenticated_connections: z.number().int().min(1).max(1_000_000).optional(),
  /** The same, per source address, IPv6 per /64 (UNAUTHENTICATED_CONNECTION_LIMIT beyond). */
  max_unauthenticated_per_address: z.number().int().min(1).max(1_000_000).default(128),
  /** ms a connection may stay unauthenticated, busy or not; then it is closed (UNAUTHENTICATED_CONNECTION_TIMEOUT). */
  unauthenticated_timeout_ms: z.number().int().min(100).max(600_000).default(5_000),
  /**
   * Per client (client session, else request) and upstream, and per request for its progress:
   * upstream notifications relayed per second, sustained (token bucket; beyond, dropped — list
   * changes and resource updates coalesced — and recorded as UPSTREAM_NOTIFICATIONS_LIMITED).
   */
  upstream_notifications_per_s: z.number().min(0.01).max(1_000_000).default(100),
  /** Per client: notifications allowed at once above the sustained rate (the bucket's size). */
  upstream_notification_burst: z.number().int().min(1).max(1_000_000).default(500),
  /** Per client: notification bytes relayed per second, sustained. */
  upstream_notification_bytes_per_s: z
    .number()
    .int()
    .min(1024)
    .default(1024 * 1024),
  /** Per client: notification bytes allowed at once above the sustained rate. */
  upstream_notification_byte_burst: z
    .number()
    .int()
    .min(1024)
    .default(4 * 1024 * 1024),
});

/** An allowed_hosts entry: a host name or IP literal (IPv6 in brackets), optional port. */
const HOST_NAME = /^[A-Za-z0-9.\-_]+(:\d{1,5})?$|^\[[0-9A-Fa-f:.]+\](:\d{1,5})?$/;
const HOST_NAME_MESSAGE = 'must be a host name or IP literal (IPv6 in brackets), optionally with :port';

/** Metrics (src/metrics; docs/operations.md#metrics-traces-readiness). */
const metrics = z.strictObject({
  /** Serve Prometheus metrics at GET /metrics. */
  enabled: z.boolean().default(true),
  /**
   * A listener of its own for /metrics, without authentication. Absent: /metrics is served on
   * the main listener behind the operator token.
   */
  listen: z
    .strictObject({
      host: z.string().min(1),
      port: z.number().int().min(0).max(65535),
      /** Names Host/Origin may give on this listener (as listen.allowed_hosts); default its host and loopback. */
      allowed_hosts: z.array(z.string().regex(HOST_NAME, HOST_NAME_MESSAGE)).min(1).optional(),
    })
    .optional(),
  /** Allow `listen.host` beyond loopback (the metrics listener has no authentication). */
  allow_remote: z.boolean().default(false),
});

/** OpenTelemetry traces over OTLP/HTTP (src/tracing), off by default. */
const tracing = z.strictObject({
  enabled: z.boolean().default(false),
  /** OTLP/HTTP traces endpoint, e.g. `http://127.0.0.1:4318/v1/traces` (JSON encoding). */
  otlp_endpoint: z.url({ protocol: /^https?$/ }).optional(),
  /** The `service.name` resource attribute. */
  service_name: z.string().min(1).max(200).default('cmcp-gateway'),
});

export const configSchema = z
  .strictObject({
    // ---- listen and edge ----
    listen: z
      .strictObject({
        host: z.string().default('127.0.0.1'),
        port: z.number().int().min(0).max(65535).default(8787),
        /**
         * Host names (or IP literals, IPv6 in brackets; a port is allowed and ignored) that a
         * request's Host and Origin headers may name (DNS-rebinding protection,
         * src/gateway/edge/host-check.ts). Default: the listen address and the loopback names.
         */
        allowed_hosts: z.array(z.string().regex(HOST_NAME, HOST_NAME_MESSAGE)).min(1).optional(),
      })
      .default({ host: '127.0.0.1', port: 8787 }),
    /** TLS on the listeners (config/tls.ts); absent: plain HTTP, loopback only. */
    tls: tlsSchema.optional(),
    /** Development mode: loopback only; allows the `software` provider and the `dev` agent. */
    dev_mode: z.boolean().default(false),
    /**
     * Names this gateway instance in the execution registry. Recovery at start-up seals only
     * the in-flight executions this instance admitted, so processes sharing one database
     * file must use distinct ids.
     */
    instance_id: name.default('gateway'),
    shutdown: z
      .strictObject({
        /** On SIGTERM/SIGINT, how long in-flight requests may take to end, milliseconds. */
        drain_ms: z.number().int().min(0).max(600_000).default(10_000),
      })
      .default({ drain_ms: 10_000 }),
    // ---- auth ----
    agents: z.array(agent).default([]),
    operators: z.array(operator).default([]),
    /** JWT access tokens for agents (OAuth 2.1 resource server; src/config/oauth.ts). */
    oauth: oauthSchema.optional(),
    // ---- upstreams ----
    upstreams: z.array(z.discriminatedUnion('transport', [stdioUpstream, httpUpstream])).default([]),
    // ---- policy and catalog ----
    /** Optional: absent ⇒ every routed call is allowed and claims say enforcement_mode "none". */
    policy: policy.optional(),
    /** Optional: absent ⇒ every upstream tool is exposed as listed and catalog_hash is null. */
    catalog: catalog.optional(),
    // ---- attestation ----
    attestation: attestationSchema,
    // ---- sessions ----
    sessions: sessionsSchema,
    // ---- store ----
    /**
     * SQLite database path (relative paths are relative to the config file), or a postgres://
     * URL: `cmcp start` then serves as a replica on that PostgreSQL (gateway/lifecycle/replica-engine.ts,
     * the `replicas` section; docs/replicas.md).
     */
    database: z.string().min(1),
    /** Where the call path's writes run (src/config/store.ts). */
    store: storeSchema.prefault({}),
    /** Lease settings of a replica on PostgreSQL (config/replicas.ts); unused with SQLite. */
    replicas: replicasSchema,
    // ---- limits ----
    limits: limits.prefault({}),
    streams: streamsSchema.prefault({}),
    // ---- telemetry ----
    metrics: metrics.default({ enabled: true, allow_remote: false }),
    tracing: tracing.default({ enabled: false, service_name: 'cmcp-gateway' }),
  })
  .superRefine((c, ctx) => {
    if (c.attestation.provider === 'software' && !c.dev_mode) {
      ctx.addIssue({
        code: 'custom',
        path: ['attestation', 'provider'],
        message: '`software` attests nothing and is allowed only with dev_mode: true',
      });
    }
    // A named hardware provider refuses start-up when unreachable unless on_unavailable says
    // serve_unbound (src/tee/tier.ts); for auto and software only minimum_tier gives it effect.
    if (
      c.attestation.on_unavailable !== undefined &&
      c.attestation.minimum_tier === undefined &&
      (c.attestation.provider === 'auto' || c.attestation.provider === 'software')
    ) {
      ctx.addIssue({
        code: 'custom',
        path: ['attestation', 'on_unavailable'],
        message: `has no effect with provider ${c.attestation.provider} without attestation.minimum_tier (sessions are served unbound anyway)`,
      });
    }
    refineListeners(c, ctx, isLoopback);
    if (c.limits.headers_timeout_ms > c.limits.request_timeout_ms) {
      ctx.addIssue({
        code: 'custom',
        path: ['limits', 'headers_timeout_ms'],
        message: 'must not exceed limits.request_timeout_ms (the headers are part of the request)',
      });
    }
    const unauthenticated = c.limits.max_unauthenticated_connections;
    if (
      unauthenticated !== undefined &&
      c.limits.max_connections > 1 &&
      unauthenticated >= c.limits.max_connections
    ) {
      ctx.addIssue({
        code: 'custom',
        path: ['limits', 'max_unauthenticated_connections'],
        message: 'must be below limits.max_connections (authenticated agents keep the rest)',
      });
    }
    if (c.tracing.enabled && !c.tracing.otlp_endpoint) {
      ctx.addIssue({
        code: 'custom',
        path: ['tracing', 'otlp_endpoint'],
        message: 'required when tracing is enabled',
      });
    }
    if (c.dev_mode && !isLoopback(c.listen.host)) {
      ctx.addIssue({
        code: 'custom',
        path: ['listen', 'host'],
        message: `dev_mode binds loopback only; refusing ${c.listen.host}`,
      });
    }
    if (!c.dev_mode && c.agents.length === 0 && !c.oauth) {
      ctx.addIssue({
        code: 'custom',
        path: ['agents'],
        message: 'at least one agent (or the oauth section) is required outside dev_mode',
      });
    }
    const tokens = new Set(c.agents.map((a) => a.token_sha256));
    const agentIds = new Set<string>();
    const agentTokens = new Set<string>();
    c.agents.forEach((a, i) => {
      if (agentIds.has(a.agent_id))
        ctx.addIssue({ code: 'custom', path: ['agents', i, 'agent_id'], message: 'duplicate' });
      agentIds.add(a.agent_id);
      // One token, one identity: a shared hash would silently map to whichever agent came last.
      if (agentTokens.has(a.token_sha256))
        ctx.addIssue({ code: 'custom', path: ['agents', i, 'token_sha256'], message: 'duplicate token' });
      agentTokens.add(a.token_sha256);
      if (c.dev_mode && a.agent_id === 'dev')
        ctx.addIssue({
          code: 'custom',
          path: ['agents', i, 'agent_id'],
          message: '"dev" is the identity of unauthenticated loopback requests in dev_mode',
        });
    });
    const opIds = new Set<string>();
    c.operators.forEach((o, i) => {
      if (tokens.has(o.token_sha256))
        ctx.addIssue({
          code: 'custom',
          path: ['operators', i, 'token_sha256'],
          message: 'an operator token must not also be an agent token (or another operator token)',
        });
      tokens.add(o.token_sha256);
      if (opIds.has(o.operator_id))
        ctx.addIssue({ code: 'custom', path: ['operators', i, 'operator_id'], message: 'duplicate' });
      opIds.add(o.operator_id);
    });
    const seen = new Set<string>();
    c.upstreams.forEach((u, i) => {
      if (seen.has(u.name))
        ctx.addIssue({ code: 'custom', path: ['upstreams', i, 'name'], message: 'duplicate' });
      seen.add(u.name);
      // Credentials travel only over TLS, or to a loopback upstream.
      if (u.transport === 'http' && !u.url.startsWith('https:') && URL.canParse(u.url)) {
        const host = new URL(u.url).hostname.replace(/^\[|\]$/g, '');
        for (const k of ['tls', 'attested_tls'] as const)
          if (u[k])
            ctx.addIssue({ code: 'custom', path: ['upstreams', i, k], message: 'needs an https: url' });
        if (u.headers && Object.keys(u.headers).length && !isLoopback(host))
          ctx.addIssue({
            code: 'custom',
            path: ['upstreams', i, 'headers'],
            message: 'credentials are sent only over https: (or to a loopback upstream)',
          });
      }
    });
  });

/** A validated configuration. */
export type GatewayConfig = z.infer<typeof configSchema>;
export type UpstreamConfig = GatewayConfig['upstreams'][number];
export type AgentConfig = GatewayConfig['agents'][number];

/** True for 127.0.0.0/8, ::1 and `localhost`. */
export function isLoopback(host: string): boolean {
  return host === 'localhost' || host === '::1' || /^127\.\d{1,3}\.\d{1,3}\.\d{1,3}$/.test(host);
}

/** Thrown for an unreadable or invalid config. `issues` are `path: message` lines. */
export class ConfigError extends CmcpError {
  declare readonly code: 'CONFIG_INVALID';
  constructor(
    readonly file: string,
    readonly issues: string[],
  ) {
    super('CONFIG_INVALID', `invalid config ${file}:\n  ${issues.join('\n  ')}`);
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

/** Variables no longer read, and what replaces each: one still set is refused, not ignored. */
const REMOVED_ENVIRONMENT: Readonly<Record<string, string>> = {
  CMCP_STORE_WORKER: 'no longer read: set `store.worker` in the config instead',
  CMCP_GROUP_COMMIT: 'no longer read: group commit is always on',
  CMCP_CHECKPOINT_WORKER: 'no longer read: the WAL checkpoint thread always runs',
};

/**
 * Reads and validates a YAML config file. Relative `database`, stdio `cwd`, `policy.bundle`
 * and `catalog.file` paths are resolved against the file's folder.
 * @param env the process environment, checked for removed variables ({@link REMOVED_ENVIRONMENT}).
 * @throws ConfigError (unreadable file, YAML syntax error, validation issues, a removed variable set).
 */
export function loadConfig(file: string, env: NodeJS.ProcessEnv = process.env): GatewayConfig {
  const removed = Object.keys(REMOVED_ENVIRONMENT).filter((k) => env[k] !== undefined);
  if (removed.length)
    throw new ConfigError(
      file,
      removed.map((k) => `environment ${k}: ${REMOVED_ENVIRONMENT[k]}`),
    );
  return resolveConfigPaths(parseConfig(readConfigFile(file), file), file);
}

/**
 * Reads a YAML config file as written, before validation (`cmcp config explain` compares it with
 * the effective config to tell what the file set from what a default filled in).
 * @throws ConfigError (unreadable file or YAML syntax error).
 */
export function readConfigFile(file: string): unknown {
  let text: string;
  try {
    text = readFileSync(file, 'utf8');
  } catch (e) {
    throw new ConfigError(file, [`cannot read: ${(e as NodeJS.ErrnoException).code ?? 'error'}`]);
  }
  try {
    return parseYaml(text);
  } catch (e) {
    throw new ConfigError(file, [`YAML: ${(e as Error).message.split('\n')[0]}`]);
  }
}

/** Resolves a validated config's relative paths against the folder of `file` (in place). */
function resolveConfigPaths(cfg: GatewayConfig, file: string): GatewayConfig {
  const base = dirname(resolve(file));
  const abs = (p: string) => (isAbsolute(p) ? p : resolve(base, p));
  if (!isPostgresUrl(cfg.database)) cfg.database = abs(cfg.database);
  for (const u of cfg.upstreams) if (u.transport === 'stdio' && u.cwd) u.cwd = abs(u.cwd);
  for (const u of cfg.upstreams) if (u.transport === 'http') resolveCredentialPaths(u, abs);
  resolveAttestationPaths(cfg.attestation, abs);
  resolveOAuthPaths(cfg.oauth, abs);
  resolveTlsPaths(cfg.tls, abs);
  if (cfg.policy) cfg.policy.bundle = abs(cfg.policy.bundle);
  if (cfg.catalog) cfg.catalog.file = abs(cfg.catalog.file);
  return cfg;
}
