/**
 * Strict JSON bodies (docs/getting-started.md): unknown members are refused, as the config and
 * `params._cmcp` already are, so a typo'd `chalenge` is an error and not a session without a
 * challenge. Used by the REST routes and by `/mcp` for the JSON-RPC request envelope.
 */
import { CmcpError, clip } from '@cmcp/verify/errors/index';

/**
 * The members of `obj` outside `allowed`, as a message and error data, or null when there are
 * none. Member names are clipped (at most 5 shown, 40 characters each).
 */
export function unknownMembers(
  obj: Record<string, unknown>,
  allowed: readonly string[],
): { message: string; data: { unknown_members: string[]; accepted: string[] } } | null {
  const unknown = Object.keys(obj).filter((k) => !allowed.includes(k));
  if (!unknown.length) return null;
  const names = unknown.slice(0, 5).map((k) => clip(k, 40));
  return {
    message:
      `unknown member${unknown.length > 1 ? 's' : ''} ${names.map((k) => JSON.stringify(k)).join(', ')}` +
      ` (accepted: ${allowed.length ? allowed.join(', ') : 'none'})`,
    data: { unknown_members: names, accepted: [...allowed] },
  };
}

/**
 * Checks a parsed request body against the members a route accepts. An absent body (no
 * Content-Type, or JSON `null`) is an empty object.
 * @param route the route pattern, named in the message (e.g. `POST /sessions`).
 * @returns the body as an object.
 * @throws CmcpError INVALID_REQUEST — not an object, or unknown members (`data.unknown_members`).
 */
export function strictBody(
  body: unknown,
  allowed: readonly string[],
  route: string,
): Record<string, unknown> {
  if (body === undefined || body === null) return {};
  if (typeof body !== 'object' || Array.isArray(body))
    throw new CmcpError('INVALID_REQUEST', `${route}: the body must be a JSON object`);
  const unknown = unknownMembers(body as Record<string, unknown>, allowed);
  if (unknown) throw new CmcpError('INVALID_REQUEST', `${route}: ${unknown.message}`, unknown.data);
  return body as Record<string, unknown>;
}

/**
 * {@link strictBody} for a route whose own parser reports a missing or non-object body (the
 * policy reload records those as refused reloads): only unknown members are refused here.
 */
export function strictOrNull(body: unknown, allowed: readonly string[], route: string): unknown {
  if (typeof body !== 'object' || body === null || Array.isArray(body)) return body;
  return strictBody(body, allowed, route);
}

/** The members each JSON body route accepts. */
export const BODY_MEMBERS = {
  openSession: ['challenge'],
  closeSession: [],
  policyReload: ['files', 'signature'],
  blockAgent: ['reason'],
  unblockAgent: [],
} as const satisfies Record<string, readonly string[]>;

/** JSON-RPC 2.0 §4: the members of a request object. */
export const JSONRPC_REQUEST_MEMBERS = ['jsonrpc', 'id', 'method', 'params'] as const;
