/**
 * The relay's side of a `tools/call` (src/call/types.ts `CallLink`): the call goes out on the
 * connection src/relay/sessions.ts picks (the shared one, or the client session's own when the
 * client can be asked for sampling, elicitation or roots, or the call creates a task), marked in flight there so the upstream's
 * server-to-client requests and log messages find this request, with the client's
 * cancellation (`channel.signal` → `notifications/cancelled` upstream) and its progress token
 * mapped back (src/relay/progress.ts). A `params.task` (2025-11-25 tasks) goes with it, and the
 * task id the upstream returns is remembered for src/relay/tasks.ts.
 */
import type { CallLink } from '../call/types.js';
import type { MethodRequest } from './channel.js';
import type { RelayParts } from './parts.js';
import { progressRelay, progressToken } from './progress.js';
import { sessionRoute } from './session-tools.js';

/** The link of one tools/call request. */
export function callLink(relay: RelayParts, req: MethodRequest): CallLink {
  return {
    route: (exposedName) => sessionRoute(relay, req, exposedName),
    async forward(route, args, sessionId) {
      const onprogress = progressRelay(
        progressToken(req.params),
        req.channel,
        relay.sessions.progress(req.caller.agentId, route.upstream),
      );
      const task = req.params?.task;
      const tasked = typeof task === 'object' && task !== null;
      const conn = relay.sessions.connection(
        req.caller.agentId,
        req.channel,
        route.upstream,
        tasked ? 'state' : 'call',
      );
      if (!conn) return { boundary: 'not_sent', failure: 'no connection to the upstream' };
      if ('refused' in conn) return { boundary: 'not_sent', failure: conn.refused.code };
      const inflight = { channel: req.channel, agentId: req.caller.agentId, sessionId };
      const opts = { signal: req.channel.signal, ...(onprogress ? { onprogress } : {}) };
      if (!tasked)
        return relay.sessions.during(conn, inflight, () =>
          relay.deps.pool.call(route, args, { via: conn, ...opts }),
        );
      // A task-augmented call (2025-11-25): `task` passed through, the task id remembered.
      const params = { name: route.toolName, ...(args !== undefined ? { arguments: args } : {}), task };
      const o = await relay.sessions.during(conn, inflight, () => conn.request('tools/call', params, opts));
      if ('result' in o)
        relay.tasks.rememberFrom(o.result, { upstream: route.upstream, agentId: req.caller.agentId });
      return o;
    },
  };
}
