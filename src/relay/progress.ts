/**
 * Progress and `_meta` across the gateway (docs/spec/mcp.md#progress): the client's
 * `progressToken` never goes upstream; the SDK sends its own token with the upstream request,
 * and each upstream `notifications/progress` is passed to the client under the client's token.
 * The stateless revision's `io.modelcontextprotocol/*` members describe the client's request to
 * the gateway, not the gateway's request upstream, so they stay here too.
 */
import type { Progress } from '@modelcontextprotocol/sdk/types.js';
import type { ClientChannel, ClientMessage } from './channel.js';

/** The `_meta` forwarded upstream: the client's, without its progress token and protocol members. */
export function upstreamMeta(meta: unknown): Record<string, unknown> | undefined {
  if (typeof meta !== 'object' || meta === null || Array.isArray(meta)) return undefined;
  const out: Record<string, unknown> = {};
  for (const [k, v] of Object.entries(meta))
    if (k !== 'progressToken' && !k.startsWith('io.modelcontextprotocol/')) out[k] = v;
  return Object.keys(out).length ? out : undefined;
}

/** The client's progress token of a request, if it sent one (a string or an integer). */
export function progressToken(params: Record<string, unknown> | undefined): string | number | undefined {
  const t = (params?._meta as Record<string, unknown> | undefined)?.progressToken;
  return typeof t === 'string' || (typeof t === 'number' && Number.isSafeInteger(t)) ? t : undefined;
}

/**
 * The `onprogress` that passes an upstream request's progress to the client under its own
 * token, or undefined when the client asked for none. `admit` (the request's own progress
 * bucket, src/relay/notification-budget.ts) decides whether each one goes.
 */
export function progressRelay(
  token: string | number | undefined,
  channel: ClientChannel,
  admit: (message: ClientMessage) => boolean = () => true,
): ((p: Progress) => void) | undefined {
  if (token === undefined) return undefined;
  return (p) => {
    const message = { method: 'notifications/progress', params: { ...p, progressToken: token } };
    if (admit(message)) channel.notify(message);
  };
}
