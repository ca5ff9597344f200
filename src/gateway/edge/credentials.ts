/**
 * Agent authentication (docs/spec/mcp.md): a bearer token is hashed with SHA-256 and looked up in
 * the configured table; the agent_id never comes from the request body. In dev mode a
 * request without a token is the `dev` agent (the listener is loopback-only there).
 */
import { createHash, hash, timingSafeEqual } from 'node:crypto';

export interface AgentEntry {
  agent_id: string;
  /** Lowercase hex SHA-256 of the bearer token. */
  token_sha256: string;
}

/** An operator credential (docs/spec/policy.md#operator-controls): used on /operator/* only. */
export interface OperatorEntry {
  operator_id: string;
  /** Lowercase hex SHA-256 of the bearer token. */
  token_sha256: string;
}

function tokenDigest(header: string | undefined): string | null {
  if (header === undefined || header === '') return null;
  const m = /^Bearer ([\x21-\x7e]{1,512})$/i.exec(header);
  if (!m) return null;
  return createHash('sha256')
    .update(m[1] as string)
    .digest('hex');
}

function lookup(table: Map<string, string>, digest: string): string | null {
  let found: string | null = null;
  for (const [h, id] of table) {
    if (timingSafeEqual(Buffer.from(h), Buffer.from(digest))) found = id;
  }
  return found;
}

export class Authenticator {
  private readonly byHash = new Map<string, string>();
  private readonly operators = new Map<string, string>();

  constructor(
    agents: AgentEntry[],
    private readonly devMode: boolean,
    operators: OperatorEntry[] = [],
  ) {
    for (const a of agents) this.byHash.set(a.token_sha256, a.agent_id);
    for (const o of operators) this.operators.set(o.token_sha256, o.operator_id);
  }

  /**
   * The operator for an `Authorization` header value, or null. Agent tokens never match,
   * and there is no dev-mode default operator.
   */
  operator(header: string | undefined): string | null {
    const digest = tokenDigest(header);
    return digest ? lookup(this.operators, digest) : null;
  }

  /**
   * The agent for an `Authorization` header value, or null when unauthenticated.
   * Only the token's SHA-256 is ever compared or kept.
   */
  authenticate(header: string | undefined): string | null {
    if (header === undefined || header === '') return this.devMode ? 'dev' : null;
    const m = /^Bearer ([\x21-\x7e]{1,512})$/i.exec(header);
    if (!m) return null;
    const digest = hash('sha256', m[1] as string, 'hex'); // one-shot: no Hash object per request
    for (const [h, agent] of this.byHash) {
      if (timingSafeEqual(Buffer.from(h), Buffer.from(digest))) return agent;
    }
    return null;
  }
}
