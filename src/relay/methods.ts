/**
 * The handlers of the relayed MCP methods (docs/spec/mcp.md#relayed-methods): the merged lists
 * with the gateway's cursor, the evidenced requests (src/relay/evidenced.ts), and
 * `logging/setLevel`, which goes to every upstream offering logging on the client session's
 * own connections (opened for it; src/relay/sessions.ts).
 */

import type { ActionId } from '../policy/vocabulary.js';
import { type Answer, registryError } from './answer.js';
import type { MethodHandler, MethodRequest } from './channel.js';
import { CursorError, pageOf } from './cursor.js';
import { type EvidencedSpec, relayEvidenced } from './evidenced.js';
import { LISTS, type ListKind } from './federation.js';
import type { RelayParts } from './parts.js';
import { upstreamMeta } from './progress.js';
import { sessionTools } from './session-tools.js';
import { taskHandlers, taskResultSpec } from './tasks.js';

function str(v: unknown): string | null {
  return typeof v === 'string' && v.length > 0 ? v : null;
}

/** The params forwarded upstream: without `_cmcp`, and `_meta` as src/relay/progress.ts says. */
export function upstreamParams(params: Record<string, unknown> | undefined): Record<string, unknown> {
  const { _cmcp: _ignored, _meta, ...rest } = params ?? {};
  const meta = upstreamMeta(_meta);
  return meta ? { ...rest, _meta: meta } : rest;
}

function paged(
  relay: RelayParts,
  pageSize: number,
  all: Record<string, unknown>[],
  key: string,
  req: MethodRequest,
) {
  try {
    const p = pageOf(relay.cursors, req.method, all, req.params?.cursor, pageSize);
    return { result: { [key]: p.items, ...(p.nextCursor ? { nextCursor: p.nextCursor } : {}) } };
  } catch (e) {
    if (e instanceof CursorError) return registryError('LIST_CURSOR_INVALID', e.message);
    throw e;
  }
}

function listHandler(relay: RelayParts, kind: ListKind, pageSize: number): MethodHandler {
  return async (req) => {
    const conn = relay.sessions.connectionFor(req.caller.agentId, req.channel);
    return paged(relay, pageSize, await relay.federation.merged(kind, conn), kind.key, req);
  };
}

/** Where each evidenced method goes, its Cedar action and resource. */
function specs(relay: RelayParts): Record<string, (req: MethodRequest) => Promise<EvidencedSpec | Answer>> {
  const conn = (req: MethodRequest) => relay.sessions.connectionFor(req.caller.agentId, req.channel);
  const resource = (action: ActionId) => async (req: MethodRequest) => {
    const uri = str(req.params?.uri);
    if (!uri) return registryError('INVALID_PARAMS', 'params.uri must be a non-empty string');
    const route = await relay.federation.resourceRoute(uri, conn(req));
    return {
      target: uri,
      route,
      unrouted: {
        code: 'RESOURCE_NOT_ROUTED' as const,
        message: relay.federation.ambiguous(uri)
          ? 'several upstreams list this resource URI; it is not routed'
          : 'no upstream serves this resource URI',
      },
      forward: upstreamParams(req.params),
      action,
      resource: { type: 'Resource' as const, id: uri, attrs: { uri } },
    };
  };
  return {
    'resources/read': resource('read_resource'),
    'resources/subscribe': resource('subscribe_resource'),
    'resources/unsubscribe': resource('subscribe_resource'),
    'prompts/get': async (req) => {
      const name = str(req.params?.name);
      if (!name) return registryError('INVALID_PARAMS', 'params.name must be a non-empty string');
      const route = await relay.federation.promptRoute(name, conn(req));
      return {
        target: name,
        route,
        unrouted: { code: 'PROMPT_NOT_FOUND' as const, message: 'no upstream offers this prompt' },
        forward: { ...upstreamParams(req.params), ...(route ? { name: route.name } : {}) },
        action: 'get_prompt',
        resource: { type: 'Prompt' as const, id: name, attrs: { name: route?.name ?? name } },
        context: { arguments: req.params?.arguments ?? {} },
      };
    },
    'completion/complete': async (req) => {
      const ref = req.params?.ref as Record<string, unknown> | undefined;
      const refType = str(ref?.type);
      const refName = refType === 'ref/prompt' ? str(ref?.name) : str(ref?.uri);
      if (!ref || !refName || (refType !== 'ref/prompt' && refType !== 'ref/resource'))
        return registryError(
          'INVALID_PARAMS',
          'params.ref must be a ref/prompt with a name or a ref/resource with a uri',
        );
      const route =
        refType === 'ref/prompt'
          ? await relay.federation.promptRoute(refName, conn(req))
          : (relay.federation.templateRoute(refName) ??
            (await relay.federation.resourceRoute(refName, conn(req))));
      const upstreamRef = refType === 'ref/prompt' && route ? { ...ref, name: route.name } : ref;
      return {
        target: `${refType}:${refName}`,
        route,
        unrouted: {
          code: 'UPSTREAM_METHOD_UNSUPPORTED' as const,
          message: 'no upstream serves this completion ref',
        },
        forward: { ...upstreamParams(req.params), ref: upstreamRef },
        action: 'complete',
        resource: {
          type: 'Completion' as const,
          id: `${refType}:${refName}`,
          attrs: { ref_type: refType, ref: refName },
        },
      };
    },
    'tasks/result': async (req) => taskResultSpec(relay, req),
  };
}

/** The syslog severities of `logging/setLevel` (MCP 2025-11-25, LoggingLevel; RFC 5424 §6.2.1). */
const LOG_LEVELS = ['debug', 'info', 'notice', 'warning', 'error', 'critical', 'alert', 'emergency'];

/** Every relayed method's handler, keyed by JSON-RPC method. */
export function relayHandlers(relay: RelayParts, pageSize: number): ReadonlyMap<string, MethodHandler> {
  const m = new Map<string, MethodHandler>();
  for (const kind of Object.values(LISTS)) m.set(kind.method, listHandler(relay, kind, pageSize));
  m.set('tools/list', async (req) => paged(relay, pageSize, await sessionTools(relay, req), 'tools', req));
  for (const [method, spec] of Object.entries(specs(relay)))
    m.set(method, async (req) => {
      const s = await spec(req);
      return 'target' in s ? relayEvidenced(relay, req, s) : s;
    });
  for (const [method, h] of taskHandlers(relay, (all, req) => paged(relay, pageSize, all, 'tasks', req)))
    m.set(method, h);
  m.set('logging/setLevel', async (req) => {
    const level = req.params?.level;
    if (typeof level !== 'string' || !LOG_LEVELS.includes(level))
      return registryError('INVALID_PARAMS', `params.level must be one of ${LOG_LEVELS.join(', ')}`);
    const conn = relay.sessions.connectionFor(req.caller.agentId, req.channel);
    const names = await relay.federation.offering('logging', conn);
    if (!names.length) return registryError('UPSTREAM_METHOD_UNSUPPORTED', 'no upstream offers logging');
    for (const name of names) {
      // A log level is state of the client's own upstream session: never set on the shared one.
      const own = relay.sessions.connection(req.caller.agentId, req.channel, name, 'state');
      if (own && 'refused' in own) {
        relay.deps.onRefusal?.(own.refused.code);
        return registryError(own.refused.code, own.refused.message, { upstream: name });
      }
      const o = await own?.request('logging/setLevel', upstreamParams(req.params));
      if (o && 'rpcError' in o) return { error: o.rpcError };
      if (!o || !('result' in o))
        return registryError('UPSTREAM_FAILED', `upstream ${name} did not accept the level`, {
          upstream: name,
        });
    }
    return { result: {} };
  });
  return m;
}
