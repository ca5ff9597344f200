/**
 * The server capabilities the gateway advertises (docs/spec/mcp.md#capabilities): the union of
 * what the reachable upstreams said in `initialize`, limited to what the gateway relays. Tools
 * are always served (the gateway's own `tools/list`, possibly empty); `resources`, `prompts`,
 * `completions`, `logging` and `tasks` (its list, cancel and tools/call members as some upstream
 * has them) only when some upstream offers them, `resources.subscribe` only
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
  if (any('tasks')) out.tasks = tasksCapability(all);
  return out;
}

/** `tasks` as the upstreams offer it: list, cancel and task-augmented tools/call (2025-11-25). */
function tasksCapability(all: Caps[]): Caps {
  const t = all.map((c) => c.tasks).filter((x): x is Caps => typeof x === 'object' && x !== null);
  const out: Caps = {};
  if (t.some((x) => x.list !== undefined)) out.list = {};
  if (t.some((x) => x.cancel !== undefined)) out.cancel = {};
  const toolsCall = t.some((x) => {
    const tools = (x.requests as Caps | undefined)?.tools as Caps | undefined;
    return tools?.call !== undefined;
  });
  if (toolsCall) out.requests = { tools: { call: {} } };
  return out;
}
