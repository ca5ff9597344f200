/**
 * JSON schemas of the HTTP edge's params, bodies and responses (docs/spec/mcp.md#inbound).
 *
 * Two rules keep behaviour as it was before the schemas:
 * - Bodies: the schemas state the accepted types only; finer checks (lengths, base64url) and
 *   their messages stay in the handlers, and routes use `attachValidation` so a handler
 *   answers a bad body with its own message and in its own order. The application's Ajv does
 *   not coerce types (a number is never turned into a string).
 * - Responses: fast-json-stringify drops members a schema does not name, so what is signed or
 *   hashed elsewhere (claims, audit bundles) and what other modules shape (operator results,
 *   error data) is declared `additionalProperties: true` and passes through as it is.
 */

const str = { type: 'string' } as const;
const nullableStr = { type: ['string', 'null'] } as const;
const open = (description: string) => ({ type: 'object', additionalProperties: true, description }) as const;

/** `:id` of /sessions/:id/… and /executions/:id. */
export const idParams = {
  type: 'object',
  properties: { id: str },
  required: ['id'],
} as const;

/** `:agent_id` of /operator/agents/:agent_id/…. */
export const agentIdParams = {
  type: 'object',
  properties: { agent_id: str },
  required: ['agent_id'],
} as const;

/** Every REST error: `{"error":{"error_code","message", …data}}`. */
export const errorBody = {
  type: 'object',
  properties: {
    error: {
      type: 'object',
      properties: { error_code: str, message: str },
      required: ['error_code', 'message'],
      additionalProperties: true,
    },
  },
  required: ['error'],
} as const;

const errors = { '4xx': errorBody, '5xx': errorBody } as const;

export const healthSchema = {
  response: { 200: { type: 'object', properties: { status: str }, required: ['status'] } },
} as const;

/**
 * `GET /readyz`: `{status, checks: {database, upstreams: {name: reason | null},
 * required_upstreams: [name], attestation, shutdown}}`, and `lease` on a replica on PostgreSQL (readiness.ts).
 */
const readyBody = {
  type: 'object',
  properties: {
    status: str,
    checks: {
      type: 'object',
      properties: {
        database: nullableStr,
        upstreams: { type: 'object', additionalProperties: nullableStr },
        required_upstreams: { type: 'array', items: str },
        attestation: nullableStr,
        shutdown: nullableStr,
        lease: nullableStr,
      },
      required: ['database', 'upstreams', 'required_upstreams', 'attestation', 'shutdown'],
    },
  },
  required: ['status', 'checks'],
} as const;
export const readySchema = { response: { 200: readyBody, 503: readyBody } } as const;

/** `POST /sessions` `{challenge?: base64url | null}` (an absent body is `{}`). */
export const createSessionSchema = {
  body: { type: ['object', 'null'], properties: { challenge: nullableStr } },
  response: {
    201: {
      type: 'object',
      properties: {
        session_id: str,
        chain_root: str,
        binding: {
          type: 'object',
          properties: { provider: str, status: str, reason: nullableStr },
          required: ['provider', 'status', 'reason'],
        },
      },
      required: ['session_id', 'chain_root', 'binding'],
    },
    ...errors,
  },
} as const;

/** `POST /sessions/:id/close` and `GET /sessions/:id/claim`: the signed claim, as signed. */
export const claimSchema = {
  params: idParams,
  response: {
    200: open('a signed claim (docs/spec/claims.md): every member is signed, none may be dropped'),
    ...errors,
  },
} as const;

/** `GET /sessions/:id/audit`: the session chain's bundle of stored canonical texts. */
export const bundleSchema = {
  params: idParams,
  response: {
    200: open('an audit bundle (docs/spec/audit-entries.md): verifiers re-hash its canonical texts'),
    ...errors,
  },
} as const;

/** `GET /executions/:id`: the agent's view of one registry row (docs/spec/execution.md). */
export const executionSchema = {
  params: idParams,
  response: {
    200: {
      type: 'object',
      properties: {
        execution_id: str,
        state: str,
        call_id: str,
        session_id: str,
        tool_name: str,
        binding: str,
        created_at: str,
        updated_at: str,
        terminal_entry_hash: nullableStr,
      },
      required: ['execution_id', 'state', 'call_id', 'session_id', 'tool_name', 'binding'],
    },
    ...errors,
  },
} as const;

export const operatorStatusSchema = {
  response: { 200: open('running policy, catalog, drifted tools and blocked agents'), ...errors },
} as const;

/**
 * `POST /operator/policy/reload` `{files: {name: base64url}, signature}`. The route attaches
 * (does not answer) a schema failure: the reload's own decoder refuses a malformed request
 * *and records it* as `policy_reload_refused` (policy/state.ts), which a schema refusal would
 * skip.
 */
export const reloadSchema = {
  body: {
    type: 'object',
    properties: { files: { type: 'object', additionalProperties: str }, signature: str },
    required: ['files'],
  },
  response: { 200: open('the installed bundle, the re-measured gateway and the sessions closed'), ...errors },
} as const;

/**
 * `POST /operator/agents/:agent_id/block` `{reason?: string}` (arrays and no body are accepted).
 * Attached, not answered: blockAgent checks the body after the agent is known to exist.
 */
export const blockSchema = {
  params: agentIdParams,
  body: { type: ['object', 'array', 'null'], properties: { reason: str } },
  response: { 200: open('the block and the sessions it closed'), ...errors },
} as const;

export const unblockSchema = {
  params: agentIdParams,
  response: { 200: open('the agent and whether it is blocked'), ...errors },
} as const;
