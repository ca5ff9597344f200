/**
 * The tools a client session sees (docs/spec/mcp.md#client-capabilities-upstream). An upstream
 * may offer some tools only to clients that declared sampling, elicitation or roots
 * (server-everything registers `trigger-sampling-request`, `get-roots-list`, … after
 * `initialized`, by the client's capabilities); the shared connection declares none, so it
 * never sees them. For a client session that declared such a capability, every available
 * upstream is reached on the session's own connection, which declares what the client did, and
 * that connection's tool list (every page, listed at each `tools/list`, so a list change is
 * seen at once) is what the session sees of that upstream and what its `tools/call` routes to.
 * Without a connection of its own (the upstream's cap reached) the session sees the shared list.
 * With a catalog, the catalog's list is shown and calls route as the catalog pins them.
 */
import type { ToolDefinition } from '../upstream/pool.js';
import { toolNameFault } from '../upstream/tool-name.js';
import type { RoutedTool, Upstream } from '../upstream/upstream.js';
import type { MethodRequest } from './channel.js';
import type { RelayParts } from './parts.js';

/**
 * The session's own connection to `name`, when the client declared relayed capabilities and
 * one is (or can be) open; null otherwise (the shared connection serves it).
 */
function ownConnection(relay: RelayParts, req: MethodRequest, name: string): Upstream | null {
  if (relay.deps.catalogued || !relay.sessions.relaysFor(req.channel)) return null;
  if (relay.deps.pool.availability.get(name)) return null;
  const c = relay.sessions.connection(req.caller.agentId, req.channel, name, 'call');
  if (!c || 'refused' in c || c === relay.deps.pool.shared(name)) return null;
  return c;
}

/** The upstream's tools as the own connection lists them now, or null when it cannot list them. */
async function ownTools(relay: RelayParts, name: string, conn: Upstream): Promise<ToolDefinition[] | null> {
  try {
    return await conn.listTools();
  } catch (e) {
    relay.deps.log.warn({ upstream: name, err: (e as Error).message }, 'own connection could not list tools');
    return null;
  }
}

/**
 * The tools list of one `tools/list` request: the gateway's list, or for a client that declared
 * relayed capabilities each upstream's list as its own connection sees it (configuration order,
 * each upstream's order; gateway names; an unrecordable or clashing name left out as for the
 * shared list).
 */
export async function sessionTools(relay: RelayParts, req: MethodRequest): Promise<ToolDefinition[]> {
  const base = relay.deps.listTools();
  if (relay.deps.catalogued || !relay.sessions.relaysFor(req.channel)) return base;
  const pool = relay.deps.pool;
  const out: ToolDefinition[] = [];
  const seen = new Set<string>();
  for (const name of pool.names()) {
    const conn = ownConnection(relay, req, name);
    const listed = conn ? await ownTools(relay, name, conn) : null;
    const tools = listed ?? (pool.availability.get(name) ? [] : (pool.shared(name)?.tools ?? []));
    for (const t of tools) {
      if (toolNameFault(t.name)) continue;
      const exposed = pool.exposedName(name, t.name);
      if (exposed === undefined || seen.has(exposed)) continue;
      seen.add(exposed);
      out.push({ ...t, name: exposed });
    }
  }
  return out;
}

/**
 * The route of a tool the shared connection does not offer but the session's own connection
 * does (see the module doc), or undefined.
 */
export async function sessionRoute(
  relay: RelayParts,
  req: MethodRequest,
  exposedName: string,
): Promise<RoutedTool | undefined> {
  const pool = relay.deps.pool;
  for (const name of pool.names()) {
    const prefix = pool.shared(name)?.prefix ?? name;
    if (prefix && !exposedName.startsWith(`${prefix}.`)) continue;
    const conn = ownConnection(relay, req, name);
    if (!conn) continue;
    const toolName = prefix ? exposedName.slice(prefix.length + 1) : exposedName;
    const find = (tools: ToolDefinition[]) =>
      tools.find((t) => t.name === toolName && !toolNameFault(t.name));
    // The list of the last tools/list, else listed again (a new connection, a changed list).
    const definition = find(conn.tools) ?? find((await ownTools(relay, name, conn)) ?? []);
    if (definition) return { exposedName, upstream: name, toolName, definition };
  }
  return undefined;
}
