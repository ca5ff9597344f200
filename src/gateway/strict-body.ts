/**
 * Strict JSON bodies on the REST routes (issue 16 item 5): unknown members are refused, as the
 * config and `params._cmcp` already are, so a typo'd `chalenge` is an error and not a session
 * without a challenge.
 */
import { CmcpError, clip } from '@cmcp/verify/errors/index';

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
  const unknown = Object.keys(body).filter((k) => !allowed.includes(k));
  if (unknown.length) {
    const shown = unknown.slice(0, 5).map((k) => JSON.stringify(clip(k, 40)));
    throw new CmcpError(
      'INVALID_REQUEST',
      `${route}: unknown member${unknown.length > 1 ? 's' : ''} ${shown.join(', ')}` +
        ` (accepted: ${allowed.length ? allowed.join(', ') : 'none'})`,
      { unknown_members: unknown.slice(0, 5).map((k) => clip(k, 40)), accepted: [...allowed] },
    );
  }
  return body as Record<string, unknown>;
}

/** The members each JSON body route accepts. */
export const BODY_MEMBERS = {
  openSession: ['challenge'],
  closeSession: [],
  policyReload: ['files', 'signature'],
  blockAgent: ['reason'],
  unblockAgent: [],
} as const satisfies Record<string, readonly string[]>;

/**
 * {@link strictBody} for a route whose own parser reports a missing or non-object body (the
 * policy reload records those as refused reloads): only unknown members are refused here.
 */
export function strictOrNull(body: unknown, allowed: readonly string[], route: string): unknown {
  if (typeof body !== 'object' || body === null || Array.isArray(body)) return body;
  return strictBody(body, allowed, route);
}
