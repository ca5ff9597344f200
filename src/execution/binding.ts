/**
 * Execution Action Binding v1 (docs/spec/execution.md; vectors in test/vectors/execution-binding-v1):
 * a digest over JCS of exactly six members — domain `cmcp.execution-action-binding`,
 * version 1, agent_id, action_type, action_scope, action_timestamp — rendered
 * `<alg>:<lowercase hex>` with alg sha256 or sha384. The registry compares the whole
 * rendered string, in constant time.
 */
import { hash } from 'node:crypto';
import { canonicalJson, sha256Hex } from '@cmcp/verify/formats';
import { CmcpError } from '../errors/index.js';

export const EAB_DOMAIN = 'cmcp.execution-action-binding';

/** The v1 preimage. */
export interface ExecutionActionBindingV1 {
  domain: typeof EAB_DOMAIN;
  version: 1;
  agent_id: string;
  action_type: string;
  action_scope: string;
  action_timestamp: string;
}

export type BindingAlgorithm = 'sha256' | 'sha384';

/** Why a preimage or rendered binding is refused. `code` is stable. */
export class BindingFormatError extends CmcpError {
  declare readonly code: 'EAB_NOT_V1' | 'EAB_UNSUPPORTED_ALGORITHM' | 'EAB_MALFORMED';
  constructor(code: 'EAB_NOT_V1' | 'EAB_UNSUPPORTED_ALGORITHM' | 'EAB_MALFORMED', message: string) {
    super(code, message);
    this.name = 'BindingFormatError';
  }
}

const MEMBERS = ['action_scope', 'action_timestamp', 'action_type', 'agent_id', 'domain', 'version'];

/**
 * Checks that `p` is a v1 preimage: exactly the six members, the v1 domain, `version` the
 * integer 1 (the string "1" is not v1), and four string members.
 * @throws BindingFormatError EAB_NOT_V1.
 */
export function assertV1Preimage(p: unknown): asserts p is ExecutionActionBindingV1 {
  if (typeof p !== 'object' || p === null || Array.isArray(p))
    throw new BindingFormatError('EAB_NOT_V1', 'preimage is not an object');
  const keys = Object.keys(p).sort();
  if (keys.length !== MEMBERS.length || keys.some((k, i) => k !== MEMBERS[i]))
    throw new BindingFormatError(
      'EAB_NOT_V1',
      `preimage must have exactly the members ${MEMBERS.join(', ')}`,
    );
  const o = p as Record<string, unknown>;
  if (o.domain !== EAB_DOMAIN)
    throw new BindingFormatError('EAB_NOT_V1', 'domain is not cmcp.execution-action-binding');
  if (o.version !== 1 || typeof o.version !== 'number')
    throw new BindingFormatError('EAB_NOT_V1', 'version is not the integer 1');
  for (const k of ['agent_id', 'action_type', 'action_scope', 'action_timestamp'])
    if (typeof o[k] !== 'string') throw new BindingFormatError('EAB_NOT_V1', `${k} must be a string`);
}

/**
 * Computes the rendered binding of a v1 preimage.
 * @throws BindingFormatError (not v1, or an algorithm other than sha256/sha384);
 *   CanonicalJsonError (a lone surrogate in a member).
 */
export function computeBinding(preimage: unknown, alg: string = 'sha256'): string {
  if (alg !== 'sha256' && alg !== 'sha384')
    throw new BindingFormatError('EAB_UNSUPPORTED_ALGORITHM', `unsupported algorithm ${alg}`);
  assertV1Preimage(preimage);
  return `${alg}:${hash(alg, canonicalJson(preimage), 'hex')}`; // a string is hashed as UTF-8
}

/**
 * Checks a rendered binding's form: `sha256:` + 64 or `sha384:` + 96 lowercase hex.
 * @throws BindingFormatError EAB_MALFORMED.
 */
export function assertRenderedBinding(b: string): void {
  if (!/^(sha256:[0-9a-f]{64}|sha384:[0-9a-f]{96})$/.test(b))
    throw new BindingFormatError('EAB_MALFORMED', 'not <alg>:<lowercase hex>');
}

export { bindingsEqual } from '../store/executions.js';

/**
 * The `tools/call` adapter (docs/spec/execution.md): action_type `mcp.tools/call`, action_scope
 * `<server_identity>/<tool_name>#sha256:<hex of JCS(arguments)>`, action_timestamp the
 * caller's `_cmcp.action_timestamp` or `""`. Arguments differing only in member order bind
 * identically.
 */
export function toolCallBinding(inp: {
  agentId: string;
  serverIdentity: string;
  toolName: string;
  arguments: Record<string, unknown>;
  actionTimestamp: string | null;
}): string {
  return computeBinding({
    domain: EAB_DOMAIN,
    version: 1,
    agent_id: inp.agentId,
    action_type: 'mcp.tools/call',
    action_scope: `${inp.serverIdentity}/${inp.toolName}#sha256:${sha256Hex(canonicalJson(inp.arguments))}`,
    action_timestamp: inp.actionTimestamp ?? '',
  });
}
