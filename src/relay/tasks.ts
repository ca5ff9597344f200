/**
 * The 2025-11-25 tasks methods (docs/spec/mcp.md#tasks) where an upstream offers them. A task
 * is created by a `tools/call` carrying `params.task` (passed through, src/relay/calls.ts); the
 * task id the upstream returns is remembered with that upstream and the agent, as resource
 * URIs are remembered with the upstream that listed them. `tasks/get`, `tasks/cancel` and
 * `tasks/result` go to that upstream on the client session's own connection (the upstream
 * scopes tasks by its session); `tasks/list` merges the upstreams' lists, keeps the tasks this
 * agent created through the gateway, and pages them with the gateway's cursor. `tasks/result`
 * carries the tool's result, so it is evidenced like `resources/read` (src/relay/evidenced.ts):
 * one terminal `task_result` entry with digests only; its policy decision is the one made at
 * the `tools/call` that created the task (`inherited`).
 */

import { listAllPages } from '../upstream/request.js';
import { type Answer, registryError } from './answer.js';
import type { MethodHandler, MethodRequest } from './channel.js';
import type { EvidencedSpec } from './evidenced.js';
import type { RelayParts } from './parts.js';

const UNKNOWN_TASK = 'no task with this taskId was created through the gateway by this agent';

/** The params forwarded upstream: without `_cmcp`. */
function forwarded(params: Record<string, unknown> | undefined): Record<string, unknown> {
  const { _cmcp: _ignored, ...rest } = params ?? {};
  return rest;
}

/** `tasks/get` or `tasks/cancel`: relayed to the task's upstream, its answer as given. */
function routed(relay: RelayParts): MethodHandler {
  return async (req) => {
    const r = relay.tasks.route(req.params?.taskId, req.caller.agentId);
    if (!r) return registryError('INVALID_PARAMS', UNKNOWN_TASK);
    const conn = relay.sessions.connectionFor(req.caller.agentId, req.channel)(r.upstream);
    if (!conn) return registryError('UPSTREAM_UNAVAILABLE', `upstream ${r.upstream} is not connected`);
    const o = await conn.request(req.method, forwarded(req.params), { signal: req.channel.signal });
    if ('result' in o) return { result: o.result };
    if ('rpcError' in o) return { error: o.rpcError };
    return registryError('UPSTREAM_FAILED', `upstream ${r.upstream} did not answer ${req.method}`, {
      upstream: r.upstream,
    });
  };
}

/** `tasks/list`: this agent's tasks from every upstream offering tasks, in upstream order. */
async function listed(relay: RelayParts, req: MethodRequest): Promise<Record<string, unknown>[] | Answer> {
  const conn = relay.sessions.connectionFor(req.caller.agentId, req.channel);
  const out: Record<string, unknown>[] = [];
  const names = await relay.federation.offering('tasks', conn);
  if (!names.length) return registryError('UPSTREAM_METHOD_UNSUPPORTED', 'no upstream offers tasks');
  for (const name of names) {
    const c = conn(name);
    const caps = c ? ((await c.capabilities()).tasks as { list?: unknown } | undefined) : undefined;
    if (!c || !caps?.list) continue;
    let tasks: Record<string, unknown>[];
    try {
      tasks = await listAllPages(c, 'tasks/list', 'tasks', { signal: req.channel.signal });
    } catch (e) {
      return registryError('UPSTREAM_FAILED', (e as Error).message.slice(0, 200), { upstream: name });
    }
    for (const t of tasks)
      if (relay.tasks.route(t.taskId, req.caller.agentId)?.upstream === name) out.push(t);
  }
  return out;
}

/** The evidenced spec of `tasks/result` (src/relay/evidenced.ts). */
export function taskResultSpec(relay: RelayParts, req: MethodRequest): EvidencedSpec | Answer {
  const taskId = req.params?.taskId;
  if (typeof taskId !== 'string' || taskId === '')
    return registryError('INVALID_PARAMS', 'params.taskId must be a non-empty string');
  const r = relay.tasks.route(taskId, req.caller.agentId);
  return {
    target: taskId,
    route: r ? { upstream: r.upstream, name: taskId } : null,
    unrouted: { code: 'INVALID_PARAMS', message: UNKNOWN_TASK },
    forward: forwarded(req.params),
    action: 'call_tool',
    resource: { type: 'ClientRequest', id: taskId, attrs: { method: 'tasks/result' } },
    inheritedPolicy: true,
  };
}

/** The handlers of `tasks/get`, `tasks/cancel` and `tasks/list` (`paged` applies the gateway cursor). */
export function taskHandlers(
  relay: RelayParts,
  paged: (all: Record<string, unknown>[], req: MethodRequest) => Answer,
): [string, MethodHandler][] {
  return [
    ['tasks/get', routed(relay)],
    ['tasks/cancel', routed(relay)],
    [
      'tasks/list',
      async (req) => {
        const all = await listed(relay, req);
        return Array.isArray(all) ? paged(all, req) : all;
      },
    ],
  ];
}
