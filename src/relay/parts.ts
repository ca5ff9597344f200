/**
 * What the relay's method handlers work with: the gateway's dependencies ({@link RelayDeps}) and
 * the relay's parts ({@link RelayParts}, which ./relay.ts's `Relay` implements). Declared apart
 * from ./relay.ts, which composes the handlers, so the handlers do not import it back.
 */
import type { Logger } from 'pino';
import type { Sensitivity } from '../catalog/catalog.js';
import type { PolicyEngine } from '../policy/engine.js';
import type { RelaySessionReads } from '../session/ports.js';
import type { SessionRow } from '../session/types.js';
import type { ToolDefinition, UpstreamPool } from '../upstream/pool.js';
import type { CursorCodec } from './cursor.js';
import type { RelayEntrySink, RelayRecorder } from './evidence.js';
import type { Federation } from './federation.js';
import type { NotificationLimits } from './notification-budget.js';
import type { NotificationDropped, RelaySessions } from './sessions.js';
import type { TaskRoutes } from './task-routes.js';

/** Items per page of a merged list the gateway answers. */
export const DEFAULT_PAGE_SIZE = 100;

/** What the relay needs from the rest of the gateway. */
export interface RelayDeps {
  pool: UpstreamPool;
  /** Where relayed requests' entries go (evidence.ts: SQLite's sink, or a replica's). */
  entries: RelayEntrySink;
  sessions: RelaySessionReads;
  log: Logger;
  /** The engine deciding requests now (changes on a signed reload), or null: no policy. */
  policy: () => PolicyEngine | null;
  agentAttributes: (agentId: string) => Record<string, unknown>;
  /**
   * The highest catalog sensitivity a session has forwarded (src/call/sensitivity.ts), for the
   * Cedar context of its relayed requests (`row`: the session's row when read); absent: `unclassified`.
   */
  maxSensitivity?: (sessionId: string, row?: SessionRow) => Sensitivity;
  /** The tools agents see (the catalog's when one is configured). */
  listTools: () => ToolDefinition[];
  /** True when a catalog decides the tools (a session's own connections then add none). */
  catalogued?: boolean;
  pageSize?: number;
  /** Told the code of every relayed request refused (cmcp_refusals_total). */
  onRefusal?: (code: string) => void;
  /** Bounds of the notifications relayed to one client (default DEFAULT_NOTIFICATION_LIMITS). */
  notificationLimits?: NotificationLimits;
  /** Told every upstream notification dropped over a client's bounds (recorded and counted). */
  onNotificationDropped?: NotificationDropped;
}

/** The relay's parts a method handler uses. */
export interface RelayParts {
  readonly deps: RelayDeps;
  readonly sessions: RelaySessions;
  readonly federation: Federation;
  readonly recorder: RelayRecorder;
  readonly cursors: CursorCodec;
  /** Task id → the upstream that created it (./task-routes.ts). */
  readonly tasks: TaskRoutes;
}
