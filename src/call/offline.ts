/**
 * The refusal of a call whose upstream has not been reachable since start-up:
 * UPSTREAM_OFFLINE, with the upstream and the last reason, as the call's terminal entry.
 */
import { clip } from '../errors/index.js';
import type { Unavailable } from '../upstream/availability.js';
import type { Refusal } from './types.js';

/**
 * Refuses `name` because its upstream is unavailable. The caller sees the short summary only
 * (`ECONNREFUSED`, `HTTP 503`, `exited with code 3`): the full reason, with the URL or the stdio
 * child's stderr tail, stays in the operator's log, the gateway chain and `cmcp start --check`.
 */
export function offlineRefusal(name: string, offline: Unavailable): Refusal {
  const summary = clip(offline.summary, 120);
  if (offline.authorizationFailed)
    return {
      code: 'UPSTREAM_AUTHORIZATION_FAILED',
      message: `tool ${clip(name, 80)}: upstream ${offline.upstream}: the gateway could not get an access token it accepts; tried again when called`,
      entry: { server_identity: offline.upstream, detail: { cause: summary } },
      data: { upstream: offline.upstream, since: offline.since },
    };
  // Waiting for a user's authorization is not being down: the operator is told where to go.
  if (offline.needsUser) {
    const url = offline.needsUser.authorizationUrl ?? null;
    return {
      code: 'UPSTREAM_AUTHORIZATION_REQUIRED',
      message: `tool ${clip(name, 80)}: upstream ${offline.upstream} needs a user's authorization the gateway cannot perform${url ? `; an operator must visit ${url}` : ''}`,
      entry: { server_identity: offline.upstream, detail: { authorization_url: url, cause: summary } },
      data: { upstream: offline.upstream, authorization_url: url },
    };
  }
  return {
    code: 'UPSTREAM_OFFLINE',
    message: `tool ${clip(name, 80)}: upstream ${offline.upstream} is unavailable (${summary}); retrying since ${offline.since}`,
    entry: {
      server_identity: offline.upstream,
      detail: { upstream_unavailable_since: offline.since, cause: summary },
    },
    data: { upstream: offline.upstream, since: offline.since },
  };
}
