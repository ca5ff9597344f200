/**
 * Which upstream requests were answered. The SDK turns a JSON-RPC error response into an
 * `McpError` with the upstream's code, and uses -32000 (connection closed) and -32001 (timeout)
 * for its own failures too, so the code alone cannot say whether the upstream answered.
 * This watcher sees the request leave (its JSON-RPC id, under the call's
 * AsyncLocalStorage context) and the response with that id arrive, and marks the call answered.
 *
 * It also delivers a call's `notifications/progress` to the call itself and keeps them from the
 * SDK's Protocol, which could do nothing with them but cost: for each one it runs three failing
 * zod type guards (result, error, request: ~30 µs of issue building) and a schema parse before
 * it finds the no-op progress handler the call registered only to get a progress token sent.
 */
import type { Transport } from '@modelcontextprotocol/sdk/shared/transport.js';
import type { JSONRPCMessage } from '@modelcontextprotocol/sdk/types.js';
import { type CallContext, callContext } from './result-cap.js';

type Id = string | number;

/** The calls whose request is out on one transport, by JSON-RPC id. */
export interface AnswerWatch {
  /** Stops watching a call (it ended; a late response is ignored). */
  forget(ctx: CallContext): void;
}

function idOf(m: JSONRPCMessage): Id | undefined {
  const id = (m as { id?: unknown }).id;
  return typeof id === 'string' || typeof id === 'number' ? id : undefined;
}

/**
 * Wraps `transport.send` and the `onmessage` the SDK assigns in `connect`, so that a response
 * (result or error) to a call's request sets `ctx.answered`. Call before `client.connect`.
 */
export function watchAnswers(transport: Transport): AnswerWatch {
  const pending = new Map<Id, CallContext>();
  const send = transport.send.bind(transport);
  transport.send = (message, options) => {
    const ctx = callContext.getStore();
    const id = idOf(message);
    if (ctx && id !== undefined && 'method' in message && message.method !== 'initialize') {
      ctx.requestId = id;
      pending.set(id, ctx);
    }
    return send(message, options);
  };
  // The SDK runs notification handlers a microtask late but settles responses at once, so a
  // progress notification that arrives in the same read as its response would find its
  // handler gone; the call's own onprogress is told here, in arrival order.
  // @returns true when a call took it (the SDK need not see it).
  const progressOf = (message: JSONRPCMessage): boolean => {
    const params = (message as { params?: Record<string, unknown> }).params;
    const token = params?.progressToken;
    const ctx = typeof token === 'string' || typeof token === 'number' ? pending.get(token) : undefined;
    if (!ctx?.onprogress || typeof params?.progress !== 'number') return false;
    const { progressToken: _t, ...rest } = params;
    ctx.onprogress(rest as { progress: number });
    return true;
  };
  let handler: Transport['onmessage'];
  Object.defineProperty(transport, 'onmessage', {
    configurable: true,
    get: () => handler,
    set: (h: Transport['onmessage']) => {
      handler =
        h &&
        ((message, extra) => {
          if ('method' in message && message.method === 'notifications/progress' && progressOf(message))
            return;
          const id = idOf(message);
          if (id !== undefined && !('method' in message) && ('result' in message || 'error' in message)) {
            const ctx = pending.get(id);
            if (ctx) {
              ctx.answered = true;
              pending.delete(id);
            }
          }
          h(message, extra);
        });
    },
  });
  return {
    forget(ctx) {
      if (ctx.requestId !== undefined && pending.get(ctx.requestId) === ctx) pending.delete(ctx.requestId);
    },
  };
}
