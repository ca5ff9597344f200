/**
 * Ingress of one `tools/call` (docs/spec/execution.md, docs/spec/call-path.md): a pure reading of `params` into a
 * {@link CallRequest}, or the refusal it earns. Nothing is looked up or written here.
 *
 * Two scopes of refusal, in the order the checks run:
 * - `gateway`: the envelope of `_cmcp` (object, known members, session_id, workflow_id) is
 *   wrong, so no session can be named: the refusal goes to the gateway chain;
 * - `session`: the session can be resolved but the rest is wrong (execution_id, values JCS
 *   cannot carry, name, arguments, action_timestamp): recorded in the session's chain.
 */

import { assertCanonicalizable, CanonicalJsonError, jcsDigest } from '@cmcp/verify/formats';
import { clip } from '../errors/index.js';
import { checkExecutionId } from '../execution/ingress.js';
import type { CallRequest, Refusal } from './types.js';

export type Ingress =
  | { kind: 'request'; request: CallRequest }
  | {
      kind: 'refused';
      scope: 'gateway' | 'session';
      refusal: Refusal;
      /** What was read before the refusal (for the terminal entry). */
      sessionId: string | undefined;
      workflowId: string | null;
      toolName: string | null;
      requestPayloadHash: string | null;
    };

const CMCP_KEYS = new Set(['session_id', 'workflow_id', 'execution_id', 'action_timestamp']);

/** True when the string has no lone surrogate (so JCS can carry it, RFC 8785 §3.2.2.2). */
function isWellFormed(s: string): boolean {
  try {
    assertCanonicalizable(s);
    return true;
  } catch {
    return false;
  }
}

function isObject(v: unknown): v is Record<string, unknown> {
  return typeof v === 'object' && v !== null && !Array.isArray(v);
}

/** The message of a JCS refusal, or rethrows what is not one. */
function jcsProblem(value: unknown, path: string): string | null {
  try {
    assertCanonicalizable(value, { integersExact: true }, path);
    return null;
  } catch (e) {
    if (e instanceof CanonicalJsonError) return e.message;
    throw e;
  }
}

/**
 * Reads `params` of a `tools/call` (the MCP `_meta` member already removed).
 * @returns the request, or a refusal with its scope and what was read before it.
 */
export function readCallParams(params: unknown): Ingress {
  let sessionId: string | undefined;
  let workflowId: string | null = null;
  let toolName: string | null = null;
  let requestPayloadHash: string | null = null;
  const refuse = (scope: 'gateway' | 'session', message: string, code: Refusal['code'] = 'INVALID_PARAMS') =>
    ({
      kind: 'refused',
      scope,
      refusal: { code, message },
      sessionId,
      workflowId,
      toolName,
      requestPayloadHash,
    }) as const;

  if (!isObject(params)) return refuse('gateway', 'params must be an object');
  const cmcpRaw = params._cmcp;
  if (cmcpRaw !== undefined && !isObject(cmcpRaw)) return refuse('gateway', '_cmcp must be an object');
  const cmcp = cmcpRaw ?? {};
  for (const k of Object.keys(cmcp)) {
    if (!CMCP_KEYS.has(k)) return refuse('gateway', `unknown _cmcp member ${clip(k, 40)}`);
  }
  if (cmcp.session_id !== undefined) {
    const s = cmcp.session_id;
    if (typeof s !== 'string' || s.length > 100 || !/^[\x21-\x7e]+$/.test(s))
      return refuse('gateway', '_cmcp.session_id must be a string');
    sessionId = s;
  }
  if (cmcp.workflow_id !== undefined) {
    const w = cmcp.workflow_id;
    if (typeof w !== 'string' || w.length < 1 || w.length > 200 || !isWellFormed(w))
      return refuse('gateway', '_cmcp.workflow_id must be a string of 1–200 characters');
    workflowId = w;
  }

  // execution_id first (docs/spec/execution.md): anything but a valid id is EXECUTION_ID_INVALID, refused
  // before any reservation and audited with execution_id null.
  const exec = checkExecutionId(cmcp);
  if (exec.kind === 'invalid')
    return refuse('session', `execution_id ${exec.reason}`, 'EXECUTION_ID_INVALID');
  // Everything that may reach an audit entry or the upstream must be JSON that JCS can carry
  // exactly: checked before any reservation or upstream call.
  const paramsProblem = jcsProblem(params, '/params');
  if (paramsProblem) return refuse('session', clip(paramsProblem, 160));

  const name = params.name;
  if (typeof name !== 'string' || name.length < 1 || name.length > 256)
    return refuse('session', 'name must be a string of 1–256 characters');
  toolName = name;
  const args = params.arguments;
  if (args !== undefined && !isObject(args)) return refuse('session', 'arguments must be an object');
  // The gateway forwards exactly what it evaluated: what JSON cannot carry exactly was refused
  // above, where the check of params covered the arguments (not walked a second time here).
  requestPayloadHash = jcsDigest({ name, arguments: args ?? {} });

  let actionTimestamp: string | null = null;
  if (cmcp.action_timestamp !== undefined) {
    const a = cmcp.action_timestamp;
    if (typeof a !== 'string' || a.length > 64)
      return refuse('session', '_cmcp.action_timestamp must be a string of at most 64 characters');
    actionTimestamp = a;
  }
  return {
    kind: 'request',
    request: {
      sessionId,
      workflowId,
      toolName: name,
      arguments: args,
      requestPayloadHash,
      executionId: exec.kind === 'valid' ? exec.value : null,
      actionTimestamp,
    },
  };
}
