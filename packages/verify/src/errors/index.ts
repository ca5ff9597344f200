/**
 * The one registry of cmcp error codes (design §7). Each code is stable, upper-snake, and
 * carries an HTTP status (for non-JSON-RPC routes) and a JSON-RPC code. `docs/errors.md`
 * is generated from this table (`npm run docs:errors`).
 *
 * JSON-RPC codes: -32700..-32600 are JSON-RPC 2.0 §5.1; cmcp's own codes live in the
 * implementation-defined server-error range -32000..-32099.
 */

/** One registered error. */
export interface ErrorSpec {
  /** HTTP status when the error is returned outside JSON-RPC (REST routes, transport). */
  http: number;
  /** JSON-RPC error code when returned inside a JSON-RPC response. */
  rpc: number;
  /** One-line meaning, for docs. */
  summary: string;
}

export const ERRORS = {
  PARSE_ERROR: { http: 400, rpc: -32700, summary: 'The body is not valid JSON.' },
  INVALID_REQUEST: { http: 400, rpc: -32600, summary: 'Not a valid JSON-RPC 2.0 request (or id is null).' },
  BATCH_NOT_SUPPORTED: { http: 400, rpc: -32600, summary: 'JSON-RPC batches are refused.' },
  METHOD_NOT_FOUND: { http: 404, rpc: -32601, summary: 'The JSON-RPC method is not served by the gateway.' },
  INVALID_PARAMS: {
    http: 400,
    rpc: -32602,
    summary: 'Params are malformed (e.g. integers outside ±(2^53−1), lone surrogates, unknown _cmcp fields).',
  },
  INTERNAL_ERROR: {
    http: 500,
    rpc: -32603,
    summary: 'An internal fault; details are in the server log only.',
  },
  UNAUTHENTICATED: { http: 401, rpc: -32001, summary: 'Missing or unknown bearer token.' },
  PAYLOAD_TOO_LARGE: { http: 413, rpc: -32002, summary: 'The request body exceeds the configured limit.' },
  UNSUPPORTED_MEDIA_TYPE: { http: 415, rpc: -32003, summary: 'Content-Type must be application/json.' },
  UNKNOWN_SESSION: {
    http: 404,
    rpc: -32010,
    summary: 'No open session with this id belongs to the authenticated agent.',
  },
  SESSION_OPEN: { http: 409, rpc: -32012, summary: 'The session is still open; it has no claim yet.' },
  SESSION_CLOSED: { http: 409, rpc: -32011, summary: 'The session is closed; open a new one.' },
  UNKNOWN_TOOL: { http: 404, rpc: -32020, summary: 'No upstream tool has this name.' },
  UPSTREAM_UNAVAILABLE: {
    http: 502,
    rpc: -32030,
    summary: 'The upstream could not be reached; the request was not sent (not_attempted).',
  },
  UPSTREAM_FAILED: {
    http: 502,
    rpc: -32031,
    summary: 'The upstream failed after the request may have left (timeout, reset): outcome unknown.',
  },
  UPSTREAM_RPC_ERROR: {
    http: 502,
    rpc: -32033,
    summary: 'The upstream answered with a JSON-RPC error; its own code and message are relayed (completed).',
  },
  UPSTREAM_RESULT_TOO_LARGE: {
    http: 502,
    rpc: -32032,
    summary: 'The upstream result exceeded the size cap.',
  },
  AUDIT_WRITE_FAILED: {
    http: 500,
    rpc: -32040,
    summary: 'The terminal audit entry could not be committed; the outcome is not recorded.',
  },
  EXECUTION_ID_INVALID: {
    http: 400,
    rpc: -32050,
    summary: 'params._cmcp.execution_id is present but not 1–200 characters in 0x21–0x7E.',
  },
  EXECUTION_COLLISION: {
    http: 409,
    rpc: -32051,
    summary: 'This execution_id is bound to a different action (any state).',
  },
  EXECUTION_IN_FLIGHT: {
    http: 409,
    rpc: -32052,
    summary: 'The same action under this execution_id is running.',
  },
  EXECUTION_REPLAY_REFUSED: {
    http: 409,
    rpc: -32053,
    summary: 'This execution_id reached a terminal state; it is never run again.',
  },
  EXECUTION_NOT_FOUND: {
    http: 404,
    rpc: -32054,
    summary: 'No execution with this id for the authenticated agent.',
  },
  TOOL_NOT_IN_CATALOG: {
    http: 404,
    rpc: -32021,
    summary: 'A catalog is configured and this tool is not pinned in it.',
  },
  CATALOG_DRIFT: {
    http: 409,
    rpc: -32022,
    summary:
      "The upstream's live definition of this tool differs from its catalog pin (or the tool is gone); only this tool is blocked.",
  },
  POLICY_DENY: {
    http: 403,
    rpc: -32060,
    summary: 'The Cedar policy denied the call (enforcing mode); data.policy_ids names the matched policies.',
  },
  POLICY_EVALUATION_FAILED: {
    http: 403,
    rpc: -32061,
    summary:
      'The call could not be evaluated (a policy errored, or the request cannot be expressed in Cedar); refused, fail closed.',
  },
  POLICY_BUNDLE_INVALID: {
    http: 400,
    rpc: -32062,
    summary: "The policy bundle failed to load; Cedar's diagnostics are listed.",
  },
  POLICY_RELOAD_REFUSED: {
    http: 409,
    rpc: -32063,
    summary:
      'A policy reload was refused (unsigned, bad signature, not a higher version, no policy key, or an invalid bundle); data.reason says which.',
  },
  CATALOG_INVALID: {
    http: 400,
    rpc: -32064,
    summary: 'The catalog file is unreadable or its pins do not hold.',
  },
  OPERATOR_UNAUTHENTICATED: {
    http: 401,
    rpc: -32070,
    summary: 'Operator routes need an operator token; agent tokens are refused there.',
  },
  OPERATOR_CREDENTIAL_REFUSED: {
    http: 403,
    rpc: -32071,
    summary: 'An operator token was presented on an agent route; operator credentials never act as agents.',
  },
  AGENT_BLOCKED: {
    http: 403,
    rpc: -32072,
    summary: 'An operator blocked this agent identity (kill switch); every route refuses it.',
  },
  AGENT_NOT_FOUND: {
    http: 404,
    rpc: -32073,
    summary: 'No configured agent has this id.',
  },
  CONFIG_INVALID: { http: 500, rpc: -32603, summary: 'The configuration file failed validation.' },
  NOT_FOUND: { http: 404, rpc: -32601, summary: 'No such route or resource.' },
  VERIFY_INPUT_INVALID: {
    http: 400,
    rpc: -32080,
    summary:
      'A verify command (`cmcp-verify claim|evidence`, `cmcp verify`, `cmcp verify-evidence`) could not read its input or options (missing file, not JSON, bad flag value); exit code 2.',
  },
} as const satisfies Record<string, ErrorSpec>;

/** A registered error code. */
export type ErrorCode = keyof typeof ERRORS;

/**
 * An error with a stable machine code. `message` is safe to show a caller: it never contains
 * a stack trace and must not echo attacker-controlled text unbounded (use {@link clip}).
 */
export class CmcpError extends Error {
  constructor(
    readonly code: ErrorCode,
    message: string,
    /** Extra machine-readable data returned to the caller (JSON-RPC `error.data`). */
    readonly data: Record<string, unknown> = {},
  ) {
    super(message);
    this.name = 'CmcpError';
  }

  get http(): number {
    return ERRORS[this.code].http;
  }

  get rpc(): number {
    return ERRORS[this.code].rpc;
  }
}

/** Clips caller-supplied text before it is echoed in a message (design §7). */
export function clip(text: unknown, max = 80): string {
  const s = typeof text === 'string' ? text : (JSON.stringify(text) ?? String(text));
  return s.length > max ? `${s.slice(0, max)}…(${s.length} chars)` : s;
}
