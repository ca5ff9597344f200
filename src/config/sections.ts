/**
 * The top-level sections of the gateway configuration, grouped by concern, each with one line
 * saying what it holds. The published JSON Schema takes its section descriptions from here
 * (./json-schema.ts) and `cmcp config explain` prints the effective config in this order
 * (src/cli/config-explain.ts). A test checks that every key of the schema is placed exactly once.
 */

/** One concern: a title and its sections, `key → description`, in reading order. */
export interface ConfigConcern {
  title: string;
  sections: Readonly<Record<string, string>>;
}

export const CONFIG_CONCERNS: readonly ConfigConcern[] = [
  {
    title: 'listen and edge',
    sections: {
      listen:
        'Address and port of the gateway, and the Host/Origin names it accepts (DNS-rebinding protection).',
      tls: 'TLS on the agent and metrics listeners: a generated certificate bound into the hardware evidence, or files.',
      dev_mode:
        'Development mode: loopback only; allows the software provider and the unauthenticated `dev` agent.',
      instance_id:
        'Names this gateway instance in the execution registry; distinct per process sharing a database.',
      shutdown: 'Graceful stop on SIGTERM/SIGINT: how long in-flight requests may take.',
    },
  },
  {
    title: 'auth',
    sections: {
      agents: 'Agents and the SHA-256 of their bearer tokens, with their Cedar principal attributes.',
      operators: 'Operators (routes under /operator/ only) and the SHA-256 of their bearer tokens.',
      oauth: 'JWT access tokens for agents (OAuth 2.1 resource server, RFC 9068 profile).',
    },
  },
  {
    title: 'upstreams',
    sections: {
      upstreams: 'The MCP servers the gateway forwards to: stdio processes or Streamable HTTP endpoints.',
    },
  },
  {
    title: 'policy and catalog',
    sections: {
      policy: 'Cedar policy bundle and enforcement mode; absent: every routed call is allowed.',
      catalog: 'Pinned tool definitions and drift checks; absent: every upstream tool is exposed as listed.',
    },
  },
  {
    title: 'attestation',
    sections: {
      attestation: 'The hardware (or software) provider that binds each session, and the minimum tier.',
    },
  },
  {
    title: 'sessions',
    sections: {
      sessions:
        'When default sessions close with a claim, when idle client sessions end, and how often session checkpoints are signed.',
    },
  },
  {
    title: 'store',
    sections: {
      database:
        'SQLite file (relative to the config) or a postgres:// URL (the gateway then serves as a replica).',
      store: 'Where the call path writes run on SQLite: on the event loop, or in the store worker thread.',
      replicas: 'Lease settings of a replica on PostgreSQL; unused with SQLite.',
    },
  },
  {
    title: 'limits',
    sections: {
      limits: 'Sizes, per-agent rates and per-connection timeouts; each refusal has its own error code.',
      streams:
        'Resumable SSE streams to clients: retry delay, the replay buffer per stream, the resume grace.',
    },
  },
  {
    title: 'telemetry',
    sections: {
      metrics:
        'Prometheus metrics at /metrics, behind the operator token or on a loopback listener of its own.',
      tracing: 'OpenTelemetry traces over OTLP/HTTP; off by default.',
    },
  },
];

/** The description of a top-level section, or undefined for a key no concern places. */
export function sectionDescription(key: string): string | undefined {
  for (const c of CONFIG_CONCERNS) if (key in c.sections) return c.sections[key];
  return undefined;
}
