/**
 * The highest catalog sensitivity each session has forwarded (a Cedar context attribute,
 * `context.session.maxSensitivity`): kept in memory, and kept durable in `session_sensitivity`
 * so that a restart (or a session forgotten from memory) reads one row instead of replaying the
 * session's chain.
 *
 * The row is raised inside the transaction that records a call's attempt, before the upstream
 * is invoked (docs/spec/execution.md#attempts), and only when the level rises — at most once per
 * level per session, so the call path pays nothing for it in steady state. Raised before the
 * call, it can only be higher than the replayed rule (a call the upstream turned out to be
 * unreachable for, `not_attempted`, still counts once read back), never lower: a crash cannot
 * lose a level. Sessions that have no row yet (made before the table existed) are replayed
 * once, and get their row at their next attempt.
 */
import { SENSITIVITY_LEVELS, type Sensitivity } from '../catalog/catalog.js';
import type { CatalogGuard } from '../catalog/guard.js';
import type { SessionRow } from '../session/types.js';
import type { SensitivityReads } from '../store/port.js';
import type { RoutedTool, UpstreamPool } from '../upstream/pool.js';

/** Sessions remembered; past this the oldest is forgotten (and read back on demand). */
const MAX_REMEMBERED = 10_000;

export class SessionSensitivity {
  /** Session id → index into SENSITIVITY_LEVELS, of the calls that may have reached the upstream. */
  private readonly seen = new Map<string, number>();
  /** Session id → the level its `session_sensitivity` row holds (absent: not known to exist). */
  private readonly stored = new Map<string, number>();

  constructor(
    /** Null on a shared PostgreSQL, where the level comes with the session's row ({@link max}). */
    private readonly reads: SensitivityReads | null,
    private readonly upstreams: UpstreamPool,
    private readonly catalog: CatalogGuard | null,
  ) {}

  /** The catalog sensitivity of a routed tool (`unclassified` without a catalog). */
  of(route: RoutedTool | undefined): Sensitivity {
    if (!route || !this.catalog) return 'unclassified';
    return this.catalog.find(route.upstream, route.toolName)?.sensitivity ?? 'unclassified';
  }

  /**
   * Highest sensitivity a session has forwarded so far; read back after a restart (module doc).
   * On a replica (no {@link SensitivityReads}) the level is the one read with the session's row
   * (`row.sensitivity_level`, store/postgres/session-store.ts): whichever replica raised it,
   * the raise committed before its call reached the upstream, so a row read after that sees it.
   * @throws Error on a replica serving a catalog when no such row is given (fails closed).
   */
  max(sessionId: string, row?: Pick<SessionRow, 'sensitivity_level'>): Sensitivity {
    if (!this.reads) {
      if (!this.catalog) return 'unclassified';
      if (row?.sensitivity_level === undefined)
        throw new Error(`session ${sessionId}: its sensitivity is read with its row on PostgreSQL`);
      return SENSITIVITY_LEVELS[row.sensitivity_level] ?? 'unclassified';
    }
    let level = this.seen.get(sessionId);
    if (level === undefined) {
      const stored = this.reads.storedLevel(sessionId);
      if (stored !== undefined) this.stored.set(sessionId, stored);
      level = stored ?? this.replay(this.reads, sessionId);
      this.remember(sessionId, level);
    }
    return SENSITIVITY_LEVELS[level] ?? 'unclassified';
  }

  /**
   * The level (index into SENSITIVITY_LEVELS) a call of `sessionId` to `route` must raise the
   * session's `session_sensitivity` row to, or null when the row is known to be as high already.
   * The call path's `attempt`/`admission` write raises it (store/port.ts), and the caller then
   * reports the committed level with {@link raised}.
   */
  raise(sessionId: string, route: RoutedTool): number | null {
    const l = Math.max(SENSITIVITY_LEVELS.indexOf(this.of(route)), this.seen.get(sessionId) ?? 0);
    const stored = this.stored.get(sessionId);
    return stored !== undefined && l <= stored ? null : l;
  }

  /** The session's row now holds at least `level` (committed). */
  raised(sessionId: string, level: number): void {
    const stored = this.stored.get(sessionId);
    if (stored === undefined && this.stored.size >= MAX_REMEMBERED)
      this.stored.delete(this.stored.keys().next().value as string);
    this.stored.set(sessionId, Math.max(level, stored ?? 0));
  }

  /**
   * Notes that a session forwarded a call to `route` (it may have reached the upstream). A
   * session not in memory is left to {@link max}, which reads its row back: setting this one
   * call's level alone would forget the session's earlier, higher ones.
   */
  note(sessionId: string, route: RoutedTool): void {
    const cur = this.seen.get(sessionId);
    if (cur === undefined) return;
    const l = SENSITIVITY_LEVELS.indexOf(this.of(route));
    if (l > cur) this.seen.set(sessionId, l);
  }

  /** The level from the session's chain: only for a session with no row (module doc). */
  private replay(reads: SensitivityReads, sessionId: string): number {
    let level = 0;
    for (const e of reads.toolCalls(sessionId)) {
      if (e.tool_name === null) continue;
      if (e.disposition !== 'completed' && e.disposition !== 'outcome_unknown') continue;
      const l = SENSITIVITY_LEVELS.indexOf(this.of(this.upstreams.route(e.tool_name)));
      if (l > level) level = l;
    }
    return level;
  }

  private remember(sessionId: string, level: number): void {
    // Forget the oldest one, not all: clearing would read every live session back at once.
    if (this.seen.size >= MAX_REMEMBERED) {
      const oldest = this.seen.keys().next().value as string;
      this.seen.delete(oldest);
      this.stored.delete(oldest);
    }
    this.seen.set(sessionId, level);
  }
}
