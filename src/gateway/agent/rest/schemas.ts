/** Schemas of the agent REST routes (/sessions, /executions), built as edge/schemas.ts says. */
import { errors, idParams, nullableStr, open, str } from '../../edge/schemas.js';

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
