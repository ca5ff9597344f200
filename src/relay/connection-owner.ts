/**
 * Whose upstream connections of its own a request uses, and what they declare upstream
 * (docs/spec/mcp.md#client-sessions, #client-capabilities-upstream): a client session's, declaring
 * what its `initialize` declared; or, for a stateless 2026-07-28 request that declared relayed
 * capabilities in its `_meta`, those shared by the agent's stateless requests that declared the
 * same ones.
 */
import { canonicalJson } from '@cmcp/verify/formats';
import type { ClientChannel } from './channel.js';

/** The server-to-client capabilities a client may declare; its own connections declare the same. */
const RELAYED_CAPABILITIES = ['sampling', 'elicitation', 'roots'] as const;

/**
 * The subset of a client's declared capabilities an own upstream connection declares for it, as
 * declared (elicitation's form and URL modes, roots' `listChanged`: the client's
 * `notifications/roots/list_changed` is forwarded to its own connections).
 */
export function relayedCapabilities(declared: Record<string, unknown> | undefined): Record<string, unknown> {
  const out: Record<string, unknown> = {};
  for (const k of RELAYED_CAPABILITIES) {
    const v = declared?.[k];
    if (typeof v === 'object' && v !== null) out[k] = v;
  }
  return out;
}

/** The start of the key of the connections stateless requests share (never a client session id: a UUID). */
export const STATELESS_KEY = 'stateless ';

/**
 * Whose own connections a request uses: its client session's, or for a stateless 2026-07-28
 * request that declared relayed capabilities, those shared by the agent's stateless requests
 * that declared the same ones (they declare them upstream, as each request's `_meta` did).
 */
export function ownerOf(
  agentId: string,
  channel: ClientChannel,
): { key: string; stateless: boolean } | undefined {
  if (channel.clientSessionId !== undefined) return { key: channel.clientSessionId, stateless: false };
  const relayed = relayedCapabilities(channel.declaredCapabilities);
  if (Object.keys(relayed).length === 0) return undefined;
  return { key: `${STATELESS_KEY}${agentId} ${declarationKey(relayed)}`, stateless: true };
}

/** One text per declaration, whatever its members' order (JCS; JSON text when JCS cannot carry it). */
function declarationKey(relayed: Record<string, unknown>): string {
  try {
    return canonicalJson(relayed);
  } catch {
    return JSON.stringify(relayed);
  }
}
