/**
 * Why the gateway could not authorize a request to a protected upstream. Messages name the
 * upstream, the step and the authorization server's error code, never a token or secret.
 */
import { CmcpError } from '../../errors/index.js';

/** UPSTREAM_AUTHORIZATION_REQUIRED: a user must authorize; `authorizationUrl` is where. */
export class UpstreamAuthorizationRequiredError extends CmcpError {
  declare readonly code: 'UPSTREAM_AUTHORIZATION_REQUIRED';
  constructor(
    message: string,
    /** Where the operator must go (the authorization request, or the authorization server). */
    readonly authorizationUrl: string | undefined,
  ) {
    super('UPSTREAM_AUTHORIZATION_REQUIRED', message);
    this.name = 'UpstreamAuthorizationRequiredError';
  }
}

/** UPSTREAM_AUTHORIZATION_FAILED: discovery, registration or the token request failed. */
export class UpstreamAuthorizationFailedError extends CmcpError {
  declare readonly code: 'UPSTREAM_AUTHORIZATION_FAILED';
  constructor(message: string) {
    super('UPSTREAM_AUTHORIZATION_FAILED', message);
    this.name = 'UpstreamAuthorizationFailedError';
  }
}

export type UpstreamAuthorizationError =
  | UpstreamAuthorizationRequiredError
  | UpstreamAuthorizationFailedError;

/** The authorization error along `e`'s cause chain (the SDK and the start-up diagnosis wrap it), or undefined. */
export function authorizationErrorOf(e: unknown): UpstreamAuthorizationError | undefined {
  let cur: unknown = e;
  for (let i = 0; i < 6 && cur; i++) {
    if (cur instanceof UpstreamAuthorizationRequiredError || cur instanceof UpstreamAuthorizationFailedError)
      return cur;
    cur = (cur as { cause?: unknown }).cause;
  }
  return undefined;
}
