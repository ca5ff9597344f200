/**
 * The building blocks of the edge's JSON schemas (docs/spec/mcp.md#inbound); each plugin
 * declares its own routes' schemas from them.
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

export const str = { type: 'string' } as const;
export const nullableStr = { type: ['string', 'null'] } as const;
export const open = (description: string) =>
  ({ type: 'object', additionalProperties: true, description }) as const;

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

/** The error responses every REST route may answer. */
export const errors = { '4xx': errorBody, '5xx': errorBody } as const;
