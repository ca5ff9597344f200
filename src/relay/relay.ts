/**
 * The relayed MCP methods (docs/spec/mcp.md#relayed-methods), composed: federation and cursor,
 * the client sessions' upstream connections, policy and evidence. `methods` is the handler
 * map the MCP layer dispatches to (src/gateway/agent/mcp/endpoint.ts `McpControls.methods`); `capabilities`
 * is what `initialize` and `server/discover` advertise.
 */
import type { Logger } from 'pino';
import type { Sensitivity } from '../catalog/catalog.js';
import type { PolicyEngine } from '../policy/engine.js';
import type { RelaySessionReads } from '../session/ports.js';
import type { SessionRow } from '../session/types.js';
import type { ToolDefinition, UpstreamPool } from '../upstream/pool.js';
import { mergedCapabilities } from './capabilities.js';
import type { ClientSessionEvents, MethodHandler } from './channel.js';
import { CursorCodec } from './cursor.js';
import { type RelayEntrySink, RelayRecorder } from './evidence.js';
import { Federation } from './federation.js';
import { relayHandlers } from './methods.js';
import { NotificationBudget, type NotificationLimits } from './notification-budget.js';
import { serverRequestRelay } from './server-requests.js';
import { type NotificationDropped, RelaySessions } from './sessions.js';
import { TaskRoutes } from './tasks.js';

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
  pageSize?: number;
  /** Told the code of every relayed request refused (cmcp_refusals_total). */
  onRefusal?: (code: string) => void;
  /** Bounds of the notifications relayed to one client (default DEFAULT_NOTIFICATION_LIMITS). */
  notificationLimits?: NotificationLimits;
  /** Told every upstream notification dropped over a client's bounds (recorded and counted). */
  onNotificationDropped?: NotificationDropped;
}

/** The relay: handlers, capabilities and the client sessions' upstream connections. */
export class Relay {
  readonly sessions: RelaySessions;
  readonly federation: Federation;
  readonly recorder: RelayRecorder;
  readonly cursors = new CursorCodec();
  /** Task id → the upstream that created it (src/relay/tasks.ts). */
  readonly tasks = new TaskRoutes();
  readonly methods: ReadonlyMap<string, MethodHandler>;

  constructor(readonly deps: RelayDeps) {
    this.federation = new Federation(deps.pool, deps.log);
    this.recorder = new RelayRecorder(deps.entries, deps.log, deps.onRefusal);
    this.sessions = new RelaySessions(
      deps.pool,
      deps.log,
      serverRequestRelay(deps, deps.sessions, this.recorder),
      new NotificationBudget(deps.notificationLimits),
      deps.onNotificationDropped,
    );
    this.methods = relayHandlers(this, deps.pageSize ?? DEFAULT_PAGE_SIZE);
  }

  /** Connects the HTTP edge's client sessions (standalone streams, end of session). */
  attach(events: ClientSessionEvents): void {
    this.sessions.attach(events);
  }

  /** What the upstreams really offer, merged (what none offers is not advertised). */
  capabilities(): Promise<Record<string, unknown>> {
    return mergedCapabilities(this.deps.pool);
  }

  close(): Promise<void> {
    return this.sessions.close();
  }
}
