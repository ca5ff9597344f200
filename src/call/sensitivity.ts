/**
 * The highest catalog sensitivity each session has forwarded (a Cedar context attribute,
 * `context.session.maxSensitivity`): kept in memory, rebuilt from the session's chain after a
 * restart.
 */
import type { AuditChain } from '../audit/chain.js';
import { SENSITIVITY_LEVELS, type Sensitivity } from '../catalog/catalog.js';
import type { CatalogGuard } from '../catalog/guard.js';
import type { RoutedTool, UpstreamPool } from '../upstream/pool.js';

/** Sessions remembered; past this the oldest is forgotten (and rebuilt on demand). */
const MAX_REMEMBERED = 10_000;

export class SessionSensitivity {
  /** Session id → index into SENSITIVITY_LEVELS. */
  private readonly seen = new Map<string, number>();

  constructor(
    private readonly chain: AuditChain,
    private readonly upstreams: UpstreamPool,
    private readonly catalog: CatalogGuard | null,
  ) {}

  /** The catalog sensitivity of a routed tool (`unclassified` without a catalog). */
  of(route: RoutedTool | undefined): Sensitivity {
    if (!route || !this.catalog) return 'unclassified';
    return this.catalog.find(route.upstream, route.toolName)?.sensitivity ?? 'unclassified';
  }

  /** Highest sensitivity a session has forwarded so far; rebuilt from its chain after a restart. */
  max(sessionId: string): Sensitivity {
    let level = this.seen.get(sessionId);
    if (level === undefined) {
      level = 0;
      for (const e of this.chain.entries(sessionId)) {
        if (e.entry_type !== 'tool_call' || e.tool_name === null) continue;
        if (e.disposition !== 'completed' && e.disposition !== 'outcome_unknown') continue;
        const l = SENSITIVITY_LEVELS.indexOf(this.of(this.upstreams.route(e.tool_name)));
        if (l > level) level = l;
      }
      // Forget the oldest one, not all: clearing would replay every live session's chain at once.
      if (this.seen.size >= MAX_REMEMBERED) this.seen.delete(this.seen.keys().next().value as string);
      this.seen.set(sessionId, level);
    }
    return SENSITIVITY_LEVELS[level] ?? 'unclassified';
  }

  /** Notes that a session forwarded a call to `route` (it may have reached the upstream). */
  note(sessionId: string, route: RoutedTool): void {
    const l = SENSITIVITY_LEVELS.indexOf(this.of(route));
    if (l > (this.seen.get(sessionId) ?? 0)) this.seen.set(sessionId, l);
  }
}
