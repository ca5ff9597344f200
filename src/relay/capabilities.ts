/**
 * The server capabilities the gateway advertises (docs/spec/mcp.md#capabilities): the union of
 * what the reachable upstreams said in `initialize`, limited to what the gateway relays. Tools
 * are always served (the gateway's own `tools/list`, possibly empty); `resources`, `prompts`,
 * `completions` and `logging` only when some upstream offers them, `resources.subscribe` only
 * when some upstream supports subscriptions. List-change notifications reach clients on their
 * standalone stream, so `listChanged` is advertised as the upstreams do.
 */
import type { UpstreamPool } from '../upstream/pool.js';

type Caps = Record<string, unknown>;

function flag(caps: Caps, cap: string, member: string): boolean {
  const c = caps[cap];
  return typeof c === 'object' && c !== null && (c as Record<string, unknown>)[member] === true;
}

/** The merged capabilities of every available upstream. Never throws (an unreadable one is skipped). */
export async function mergedCapabilities(pool: UpstreamPool): Promise<Caps> {
  const all: Caps[] = [];
  for (const name of pool.names()) {
    if (pool.availability.get(name)) continue;
    const c = await pool
      .shared(name)
      ?.capabilities()
      .catch(() => undefined);
    if (c) all.push(c);
  }
  const any = (cap: string) => all.some((c) => c[cap] !== undefined);
  const anyFlag = (cap: string, member: string) => all.some((c) => flag(c, cap, member));
  const out: Caps = { tools: { listChanged: false } };
  if (any('resources'))
    out.resources = {
      subscribe: anyFlag('resources', 'subscribe'),
      listChanged: anyFlag('resources', 'listChanged'),
    };
  if (any('prompts')) out.prompts = { listChanged: anyFlag('prompts', 'listChanged') };
  if (any('completions')) out.completions = {};
  if (any('logging')) out.logging = {};
  return out;
}
