/**
 * Request bodies at the edge (docs/spec/mcp.md#inbound, C-MCP-4, docs/getting-started.md):
 * - refused before a handler runs: over the size limit (413), a Content-Type other than JSON
 *   (415), bodies that do not parse (400: not UTF-8, not JSON, empty, shorter or longer than
 *   Content-Length). Each gets a stable code and a message that says what is wrong, and is
 *   recorded in the aggregated refusal record (refusals.ts), so an unauthenticated or dev-mode
 *   client cannot grow the audit log with them;
 * - strict members: unknown members are refused, as the config and `params._cmcp` already are,
 *   so a typo'd `chalenge` is an error and not a session without a challenge. Used by the REST
 *   routes and by `/mcp` for the JSON-RPC request envelope.
 */

import type { FastifyInstance } from 'fastify';
import { CmcpError, clip, type ErrorCode } from '../../errors/index.js';
/** The error the body parser raised (fastify's FST_ERR_CTP_*, or the strict UTF-8 parser's). */
export type ParserError = Error & { statusCode?: number; code?: string; validation?: unknown };

/** What a refused body was, recorded as `detail.reason`. */
export type BodyRefusalReason =
  | 'too_large'
  | 'media_type'
  | 'not_utf8'
  | 'not_json'
  | 'empty'
  | 'length_mismatch';

/** Marks the strict UTF-8 parser's error (app.ts) so it is told apart from other 400s. */
export const NOT_UTF8 = 'CMCP_BODY_NOT_UTF8';

const REASONS: Record<string, BodyRefusalReason> = {
  FST_ERR_CTP_BODY_TOO_LARGE: 'too_large',
  FST_ERR_CTP_INVALID_MEDIA_TYPE: 'media_type',
  FST_ERR_CTP_INVALID_JSON_BODY: 'not_json',
  FST_ERR_CTP_EMPTY_JSON_BODY: 'empty',
  FST_ERR_CTP_INVALID_CONTENT_LENGTH: 'length_mismatch',
  [NOT_UTF8]: 'not_utf8',
};

const MESSAGES: Record<Exclude<BodyRefusalReason, 'too_large'>, string> = {
  media_type: 'Content-Type must be application/json',
  not_utf8: 'the body is not valid UTF-8',
  not_json: 'the body is not valid JSON',
  empty: 'the body is empty but Content-Type is application/json',
  length_mismatch: 'the body is not as long as its Content-Length says',
};

/** One refused body: the code answered and recorded, the message, and the reason. */
export interface BodyRefusal {
  code: ErrorCode;
  message: string;
  reason: BodyRefusalReason;
}

/**
 * Classifies a body parser's error; null when `err` is not one (a schema validation error, a
 * route's own error, or a client that went away mid-body).
 * @param jsonRpc the route speaks JSON-RPC: an unparsable body is PARSE_ERROR (JSON-RPC 2.0 §5.1
 *   -32700), on REST routes INVALID_REQUEST.
 * @param maxRequestBytes the body limit, named in the 413's message.
 */
export function classifyBodyError(
  err: ParserError,
  jsonRpc: boolean,
  maxRequestBytes: number,
): BodyRefusal | null {
  const byStatus = err.statusCode === 413 ? 'too_large' : err.statusCode === 415 ? 'media_type' : undefined;
  const reason = REASONS[err.code ?? ''] ?? byStatus;
  if (!reason) return null;
  if (reason === 'too_large')
    return {
      code: 'PAYLOAD_TOO_LARGE',
      reason,
      message: `request body exceeds the limit of ${maxRequestBytes} bytes`,
    };
  if (reason === 'media_type') return { code: 'UNSUPPORTED_MEDIA_TYPE', reason, message: MESSAGES[reason] };
  return { code: jsonRpc ? 'PARSE_ERROR' : 'INVALID_REQUEST', reason, message: MESSAGES[reason] };
}

/**
 * JSON bodies must be valid UTF-8 (RFC 8259 §8.1). fastify's own parser decodes the bytes
 * leniently, replacing invalid sequences with U+FFFD, which would forward and hash text the
 * client never sent (the kind of fault C-JCS-1 names); here the bytes are decoded strictly and
 * an invalid body is refused as unparsable (400, PARSE_ERROR on /mcp) before fastify's JSON
 * parser (prototype-poisoning protection kept) sees it.
 */
export function strictUtf8Json(app: FastifyInstance): void {
  const parseJson = app.getDefaultJsonParser('error', 'error');
  const utf8 = new TextDecoder('utf-8', { fatal: true, ignoreBOM: true });
  app.removeContentTypeParser('application/json');
  app.addContentTypeParser('application/json', { parseAs: 'buffer' }, (req, body, done) => {
    let text: string;
    try {
      text = utf8.decode(body as Buffer);
    } catch {
      done(
        Object.assign(new Error('the body is not valid UTF-8'), { statusCode: 400, code: NOT_UTF8 }),
        undefined,
      );
      return;
    }
    parseJson(req, text, done);
  });
}
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
