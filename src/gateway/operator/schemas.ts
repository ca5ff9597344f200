/** Schemas of the operator routes (/operator/…), built as edge/schemas.ts says. */
import { agentIdParams, errors, open, str } from '../edge/schemas.js';

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
