/**
 * The forward stage of one `tools/call`: sends the admitted call upstream and classifies what
 * came back by its effect boundary (docs/spec/execution.md) into the terminal entry's members.
 */

import { jcsDigest, sha256Tagged } from '@cmcp/verify/formats';
import type { ErrorCode } from '../errors/index.js';
import type { Disposition } from '../store/port.js';
import { attestedUpstreamBinding } from '../upstream/attested-tls.js';
import type { CallOutcome, RoutedTool, UpstreamPool } from '../upstream/pool.js';
import type { CallLink } from './types.js';

export type { Disposition };

/** What the terminal entry records about the upstream's answer. */
export interface Forwarded {
  outcome: CallOutcome;
  disposition: Disposition;
  /** Null for a result; UPSTREAM_RPC_ERROR relays the upstream's own JSON-RPC error. */
  errorCode: ErrorCode | null;
  /** `sha256:` of JCS of the result, or null. */
  responseHash: string | null;
  detail: Record<string, unknown>;
}

/** The failures upstream/request.ts classifyFailure gives a request the client cancelled. */
const CANCELLED: ReadonlySet<string> = new Set(['REQUEST_CANCELLED', 'cancelled']);

/** The failures upstream/request.ts authorizationOutcome gives a request that could not be authorized. */
const AUTHORIZATION: ReadonlySet<string> = new Set([
  'UPSTREAM_AUTHORIZATION_REQUIRED',
  'UPSTREAM_AUTHORIZATION_FAILED',
]);

/** Terminal state of an allowed call, from its effect boundary (docs/spec/execution.md). */
export function disposition(o: CallOutcome): Disposition {
  if (o.boundary === 'answered') return 'completed';
  return o.boundary === 'not_sent' ? 'not_attempted' : 'outcome_unknown';
}

/** Calls the upstream (never throws for upstream faults: they are outcomes). */
export async function forward(
  upstreams: UpstreamPool,
  route: RoutedTool,
  args: Record<string, unknown> | undefined,
  link?: { link: CallLink; sessionId: string },
): Promise<Forwarded> {
  const outcome = link
    ? await link.link.forward(route, args, link.sessionId)
    : await upstreams.call(route, args);
  const detail: Record<string, unknown> = {};
  // An upstream in a TEE: the attested-TLS binding its connections were accepted under.
  const attested = attestedUpstreamBinding(route.upstream);
  if (attested) detail.upstream_attested_tls = attested;
  let errorCode: ErrorCode | null = null;
  let responseHash: string | null = null;
  if ('result' in outcome) {
    try {
      // The JCS text made for the result-cap check, when there is one (upstream.ts).
      responseHash =
        outcome.resultJcs !== undefined ? sha256Tagged(outcome.resultJcs) : jcsDigest(outcome.result);
    } catch (e) {
      detail.response_hash_error = (e as Error).message;
    }
  } else if ('rpcError' in outcome) {
    errorCode = 'UPSTREAM_RPC_ERROR';
    detail.upstream_error_code = outcome.rpcError.code;
  } else if ('tooLarge' in outcome) {
    errorCode = 'UPSTREAM_RESULT_TOO_LARGE';
    detail.result_cap_bytes = outcome.tooLarge.capBytes;
  } else if (CANCELLED.has(outcome.failure)) {
    // The client cancelled (or disconnected): not an upstream fault. The disposition still says
    // whether the request may have reached the upstream.
    errorCode = 'REQUEST_CANCELLED';
    detail.failure = outcome.failure;
  } else if (outcome.failure === 'UPSTREAM_CLIENT_CONNECTIONS_FULL') {
    // The client session could not have the connection of its own the call needs (relay/sessions.ts).
    errorCode = 'UPSTREAM_CLIENT_CONNECTIONS_FULL';
    detail.failure = outcome.failure;
  } else if (AUTHORIZATION.has(outcome.failure)) {
    // The gateway could not authorize the request to a protected upstream (upstream/oauth/).
    errorCode = outcome.failure as ErrorCode;
    detail.failure = outcome.failure;
    if (outcome.authorizationUrl) detail.authorization_url = outcome.authorizationUrl;
  } else {
    errorCode = outcome.boundary === 'not_sent' ? 'UPSTREAM_UNAVAILABLE' : 'UPSTREAM_FAILED';
    detail.failure = outcome.failure;
  }
  return { outcome, disposition: disposition(outcome), errorCode, responseHash, detail };
}
