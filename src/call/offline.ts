/**
 * The refusal of a call whose upstream has not been reachable since start-up (issue 16 item 3):
 * UPSTREAM_OFFLINE, with the upstream and the last reason, as the call's terminal entry.
 */
import { clip, type ErrorCode } from '@cmcp/verify/errors/index';
import type { EntryInput } from '../audit/chain.js';
import type { Unavailable } from '../upstream/availability.js';

/** The pipeline's refusal writer for one call (terminal entry + JSON-RPC error). */
type Refuse<R> = (
  code: ErrorCode,
  message: string,
  extra?: Partial<EntryInput>,
  data?: Record<string, unknown>,
) => R;

/**
 * Refuses `name` because its upstream is unavailable. The caller sees the short summary only
 * (`ECONNREFUSED`, `HTTP 503`, `exited with code 3`): the full reason, with the URL or the stdio
 * child's stderr tail, stays in the operator's log, the gateway chain and `cmcp start --check`.
 */
export function refuseOffline<R>(refuse: Refuse<R>, name: string, offline: Unavailable): R {
  const summary = clip(offline.summary, 120);
  return refuse(
    'UPSTREAM_OFFLINE',
    `tool ${clip(name, 80)}: upstream ${offline.upstream} is unavailable (${summary}); retrying since ${offline.since}`,
    {
      server_identity: offline.upstream,
      detail: { upstream_unavailable_since: offline.since, cause: summary },
    },
    { upstream: offline.upstream, since: offline.since },
  );
}
