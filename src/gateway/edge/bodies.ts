/**
 * Bodies refused before a handler runs (docs/spec/mcp.md#inbound, C-MCP-4): over the size limit
 * (413), a Content-Type other than JSON (415), and bodies that do not parse (400: not UTF-8, not
 * JSON, empty, shorter or longer than Content-Length). Each gets a stable code and a message
 * that says what is wrong, and is recorded in the aggregated refusal record (auth-failures.ts),
 * so an unauthenticated or dev-mode client cannot grow the audit log with them.
 */
import type { ErrorCode } from '@cmcp/verify/errors/index';

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
